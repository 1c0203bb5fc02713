"""Prompt lookup (n-gram drafting, Saxena 2023; transformers' ``prompt_lookup_num_tokens``).

:class:`NgramDrafter` copies what followed the last earlier occurrence of the sequence's final
n-gram. It is deterministic, so its ``q`` rows are one-hot: a draft ``x`` is accepted with
probability ``p(x)``, and after a rejection the residual ``norm(max(0, p - q))`` is ``p`` with
``x`` removed. Exact like any :class:`~specdec_lib.drafters.Drafter`.
"""

from __future__ import annotations

import torch

from ..checks import positive_int
from ..sampling import Warp
from .base import BaseDrafter

__all__ = ["NgramDrafter"]


class NgramDrafter(BaseDrafter):
    """Prompt-lookup drafting: propose what followed the latest earlier occurrence of the last
    ``n`` tokens.

    For ``n = max_ngram`` down to ``min_ngram``, look for the most recent earlier occurrence of the
    sequence's last ``n`` tokens that is followed by at least one token; propose the tokens that
    followed it, up to ``min(k, max_tokens)`` (fewer where the sequence ends). No occurrence: no
    drafts (``[0]`` tokens, ``[0, V]`` rows), and the step emits one token from ``p``.

    Unlike transformers' ``PromptLookupCandidateGenerator``, which takes the *first* occurrence,
    the latest one is used, on the view that recent context predicts the continuation better. The
    price: a late occurrence leaves few tokens before the sequence ends (in a run ``a a a a`` only
    one). Deterministic: ``warp`` and ``generator`` are ignored and the rows are one-hot (float32,
    on ``ids.device``). Stateless, so ``reset`` and ``rollback`` do nothing.

    Args:
        vocab_size: ``V``, the target's vocabulary size (``target.config.vocab_size``).
        max_ngram, min_ngram: the n-gram lengths tried, longest first.
        max_tokens: the most drafts proposed per step (the decoder's ``K`` caps them too).
    """

    def __init__(
        self, vocab_size: int, *, max_ngram: int = 3, min_ngram: int = 1, max_tokens: int = 10
    ) -> None:
        self.vocab_size = positive_int(vocab_size, "vocab_size", "the target's vocabulary size")
        self.min_ngram = positive_int(min_ngram, "min_ngram", "the shortest n-gram matched")
        self.max_ngram = positive_int(max_ngram, "max_ngram", "the longest n-gram matched")
        if max_ngram < min_ngram:
            raise ValueError(f"max_ngram must be >= min_ngram ({min_ngram}), got {max_ngram!r}")
        self.max_tokens = positive_int(max_tokens, "max_tokens", "the most drafts per step")

    def __repr__(self) -> str:
        return (
            f"NgramDrafter(vocab_size={self.vocab_size}, max_ngram={self.max_ngram}, "
            f"min_ngram={self.min_ngram}, max_tokens={self.max_tokens})"
        )

    def match(self, ids: torch.Tensor) -> tuple[int, int] | None:
        """``(start, n)``: the continuation starts at ``ids[start]`` and the matched n-gram has
        length ``n``; ``None`` when no n-gram of length ``>= min_ngram`` recurs.

        Vectorised over positions: ``length[j]`` is the length (capped at ``max_ngram``) of the
        common suffix of ``ids[: j + 1]`` and ``ids``, for every ``j`` that has a successor. The
        best match maximises ``(length, j)``. One host read.
        """
        ids = ids.reshape(-1)
        L = ids.numel()
        n_max = min(self.max_ngram, L - 1)
        if n_max < self.min_ngram:
            return None
        head = ids[:-1]  # candidate ends j = 0..L-2, each followed by ids[j + 1]
        run = head == ids[-1]
        length = run.long()
        for d in range(1, n_max):
            # run[j] stays true while ids[j - d] == ids[L - 1 - d]; j < d has no such token.
            run = torch.cat([run.new_zeros(d), run[d:] & (head[: L - 1 - d] == ids[L - 1 - d])])
            length += run
        score = int((length * L + torch.arange(L - 1, device=ids.device)).max())
        n, j = divmod(score, L)
        return (j + 1, n) if n >= self.min_ngram else None

    def propose(
        self, ids: torch.Tensor, k: int, warp: Warp, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        found = self.match(ids) if k >= 1 else None
        start, n = (found[0], min(k, self.max_tokens)) if found is not None else (0, 0)
        tokens = ids.reshape(-1)[start : start + n].long()  # no match: no drafts, [0, V] rows
        # zeros + scatter_ rather than one_hot(...).float(): no int64 [k, V] intermediate.
        q = torch.zeros(tokens.numel(), self.vocab_size, dtype=torch.float32, device=ids.device)
        return tokens, q.scatter_(1, tokens.view(-1, 1), 1.0)
