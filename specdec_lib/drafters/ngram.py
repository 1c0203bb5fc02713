"""Prompt lookup (n-gram drafting, Saxena 2023; transformers' ``prompt_lookup_num_tokens``)."""

from __future__ import annotations

import torch

from ..checks import positive_int
from ..sampling import Warp
from .base import BaseDrafter

__all__ = ["NgramDrafter"]


class NgramDrafter(BaseDrafter):
    """Prompt-lookup drafting over a vocabulary of ``vocab_size``: propose up to
    ``min(k, max_tokens)`` tokens that followed the latest earlier occurrence of the last ``n``
    tokens, for ``n = max_ngram`` down to ``min_ngram``; none found: no drafts (``[0, V]`` rows).

    Unlike transformers, the *latest* occurrence is used. Deterministic and stateless: ``warp`` and
    ``generator`` are ignored, and the rows are one-hot (float32, on ``ids.device``).
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
        """``(start, n)``: the continuation starts at ``ids[start]``, after a matched n-gram of
        length ``n``; ``None`` when none of length ``>= min_ngram`` recurs. Vectorised: the best
        match maximises (common suffix length, position); one host read.
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
