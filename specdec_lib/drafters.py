"""Drafters beyond a second model: prompt lookup, and a wrapper that chooses the draft length.

Both plug into :class:`~specdec_lib.decoding.SpeculativeDecoder` through the
:class:`~specdec_lib.decoding.Drafter` protocol, and both keep the output law exactly the target's:

* :class:`NgramDrafter` (prompt lookup, Saxena 2023; transformers' ``prompt_lookup_num_tokens``)
  copies what followed the last earlier occurrence of the sequence's final n-gram. It is
  deterministic, so its ``q`` rows are one-hot: a draft ``x`` is accepted with probability
  ``p(x)``, and after a rejection the residual ``norm(max(0, p - q))`` is ``p`` with ``x`` removed.
* :class:`DynamicK` wraps any drafter and chooses ``k`` per step: transformers' heuristic schedule
  (``num_assistant_tokens_schedule``) and confidence stopping (``assistant_confidence_threshold``).
  How many drafts to propose is decided from the drafts so far, a stopping time: every draft that
  is proposed was still sampled from the ``q`` the verifier is given, and a position that is not
  drafted gets its token straight from ``p``, so the rule of notebook 01 stays exact at every
  position. Stopping *before* a low-confidence draft (dropping it once seen) is not a stopping
  time and biases the output; ``tests/test_drafters.py`` shows the chi-square test catching it.
"""

from __future__ import annotations

from typing import Any

import torch

from .decoding import Drafter, ModelDrafter, check_K
from .sampling import Warp

__all__ = ["SCHEDULES", "DynamicK", "NgramDrafter"]

SCHEDULES = ("heuristic", "constant")


def _positive_int(value: Any, name: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer ({what}), got {value!r}")
    return value


def _no_drafts(vocab_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.empty(0, dtype=torch.long, device=device),
        torch.zeros(0, vocab_size, dtype=torch.float32, device=device),
    )


class NgramDrafter:
    """Prompt-lookup drafting: propose what followed the latest earlier occurrence of the last n tokens.

    For ``n = max_ngram`` down to ``min_ngram``, look for the most recent earlier occurrence of the
    sequence's last ``n`` tokens that is followed by at least one token; propose the tokens that
    followed it, up to ``min(k, max_tokens)`` (fewer where the sequence ends). No occurrence: no
    drafts (``[0]`` tokens, ``[0, V]`` rows), and the step emits one token from ``p``.

    Unlike transformers' ``PromptLookupCandidateGenerator``, which takes the *first* occurrence,
    the latest one is used, on the view that recent context predicts the continuation better. The
    price: a late occurrence leaves few tokens before the sequence ends (in a run ``a a a a`` only
    one). Deterministic: ``warp`` and ``generator`` are ignored and the
    rows are one-hot (float32, on ``ids.device``). Stateless, so ``reset`` and ``rollback`` do
    nothing.

    Args:
        vocab_size: ``V``, the target's vocabulary size (``target.config.vocab_size``).
        max_ngram, min_ngram: the n-gram lengths tried, longest first.
        max_tokens: the most drafts proposed per step (the decoder's ``K`` caps them too).
    """

    def __init__(
        self, vocab_size: int, *, max_ngram: int = 3, min_ngram: int = 1, max_tokens: int = 10
    ) -> None:
        self.vocab_size = _positive_int(vocab_size, "vocab_size", "the target's vocabulary size")
        self.min_ngram = _positive_int(min_ngram, "min_ngram", "the shortest n-gram matched")
        if isinstance(max_ngram, bool) or not isinstance(max_ngram, int) or max_ngram < min_ngram:
            raise ValueError(
                f"max_ngram must be a positive integer >= min_ngram ({min_ngram}), got {max_ngram!r}"
            )
        self.max_ngram = max_ngram
        self.max_tokens = _positive_int(max_tokens, "max_tokens", "the most drafts per step")

    @property
    def config(self) -> Any:
        """Lets the decoder check the vocabulary, as it does for a model draft."""
        from types import SimpleNamespace

        return SimpleNamespace(vocab_size=self.vocab_size)

    def __repr__(self) -> str:
        return (
            f"NgramDrafter(vocab_size={self.vocab_size}, max_ngram={self.max_ngram}, "
            f"min_ngram={self.min_ngram}, max_tokens={self.max_tokens})"
        )

    def reset(self) -> None:
        pass

    def rollback(self, n_valid: int) -> None:
        pass

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
        found = self.match(ids)
        if found is None or k < 1:
            return _no_drafts(self.vocab_size, ids.device)
        start = found[0]
        tokens = ids.reshape(-1)[start : start + min(k, self.max_tokens)].long()
        # zeros + scatter_ rather than one_hot(...).float(): no int64 [k, V] intermediate.
        q = torch.zeros(tokens.numel(), self.vocab_size, dtype=torch.float32, device=ids.device)
        return tokens, q.scatter_(1, tokens.view(-1, 1), 1.0)


class DynamicK:
    """Wraps a drafter and chooses how many tokens it drafts at each step.

    Args:
        drafter: any :class:`~specdec_lib.decoding.Drafter` (a causal LM is wrapped in
            :class:`~specdec_lib.decoding.ModelDrafter`).
        schedule: ``"heuristic"`` (transformers' ``num_assistant_tokens_schedule="heuristic"``):
            start at ``initial``; after a step in which every proposed draft was accepted, +2,
            otherwise -1 (never below 1). ``"constant"``: always ``initial``. Either way the
            decoder's ``k`` (``K``, less near the end of the output) caps the draft.
        initial: the draft length at the start of every sequence.
        threshold: ``None``, or a confidence in (0, 1): draft one token at a time and stop after a
            draft ``x`` with ``q(x) < threshold`` (transformers' ``assistant_confidence_threshold``,
            which keeps the low-confidence token too). ``q`` is the warped draft distribution, so
            under greedy decoding (one-hot ``q``) the threshold never fires.

    Two deliberate differences from transformers: the schedule restarts at ``initial`` on every
    :meth:`reset`, i.e. every sequence (transformers' ``"heuristic_transient"``; its
    ``"heuristic"`` carries the value over between ``generate`` calls); and it never grows past
    the ``k`` the decoder asked for, so that a long run of full acceptances does not leave it far
    above ``K``, where every later rejection would cost a step without shortening the draft. A step
    in which the inner drafter proposed nothing (an n-gram drafter without a match) leaves the
    schedule unchanged: nothing was learnt.

    ``history`` and ``accepted_history`` hold, per decoding step of the current sequence (one entry
    per :meth:`rollback`, so they line up with ``GenerationResult.steps``), the number of drafts
    proposed and accepted.
    """

    def __init__(
        self,
        drafter: Any,
        *,
        schedule: str = "heuristic",
        initial: int = 5,
        threshold: float | None = None,
    ) -> None:
        if isinstance(drafter, torch.nn.Module):
            drafter = ModelDrafter(drafter)
        if not isinstance(drafter, Drafter):
            raise ValueError(
                "drafter must be a Drafter (reset/propose/rollback) or a causal LM, got "
                f"{type(drafter).__name__}"
            )
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        if threshold is not None and (
            isinstance(threshold, bool)
            or not isinstance(threshold, (int, float))
            or not 0.0 < threshold < 1.0  # also rejects NaN
        ):
            raise ValueError(f"threshold must be a number in (0, 1) or None, got {threshold!r}")
        self.drafter = drafter
        self.schedule = schedule
        self.initial = check_K(initial, "initial")
        self.threshold = None if threshold is None else float(threshold)
        self.current = self.initial
        self.history: list[int] = []
        self.accepted_history: list[int] = []
        self._pending: tuple[int, int, int] | None = None  # (len(ids), proposed, k asked)

    # A feature-level inner drafter reads the target's hidden states: pass the protocol through.
    @property
    def wants_target_features(self) -> bool:
        return bool(getattr(self.drafter, "wants_target_features", False))

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return getattr(self.drafter, "feature_layers", (-1,))

    def observe(self, start: int, features: torch.Tensor) -> None:
        self.drafter.observe(start, features)

    @property
    def first_scores(self) -> torch.Tensor | None:
        return getattr(self.drafter, "first_scores", None)

    # The decoder checks the draft's vocabulary and device through these.
    @property
    def config(self) -> Any:
        return getattr(self.drafter, "config", None)

    @property
    def device(self) -> torch.device | None:
        return getattr(self.drafter, "device", None)

    def __repr__(self) -> str:
        return (
            f"DynamicK({self.drafter!r}, schedule={self.schedule!r}, initial={self.initial}, "
            f"threshold={self.threshold!r})"
        )

    def reset(self) -> None:
        self.drafter.reset()
        self.current = self.initial
        self.history = []
        self.accepted_history = []
        self._pending = None

    def propose(
        self, ids: torch.Tensor, k: int, warp: Warp, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        k = check_K(k, "k")
        cap = min(k, self.current)
        if self.threshold is None:
            tokens, probs = self.drafter.propose(ids, cap, warp, generator)
        elif hasattr(self.drafter, "propose_until"):  # the drafter stops by itself (one call)
            tokens, probs = self.drafter.propose_until(ids, cap, warp, generator, self.threshold)
        else:
            tokens, probs = self._propose_until_unsure(ids, cap, warp, generator)
        self._pending = (ids.numel(), int(tokens.numel()), k)
        return tokens, probs

    def _propose_until_unsure(
        self, ids: torch.Tensor, cap: int, warp: Warp, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tokens, rows = [], []
        seq = ids
        for _ in range(cap):
            x, q = self.drafter.propose(seq, 1, warp, generator)
            if x.numel() == 0:
                if not tokens:
                    return x, q
                break
            x, q = x[:1], q[:1]
            tokens.append(x)
            rows.append(q)
            # Decided on the drafts so far only (a stopping time), so the output law stays exact.
            if q[0, x[0]].item() < self.threshold:
                break
            seq = torch.cat([seq, x.to(seq.dtype)])
        return torch.cat(tokens), torch.cat(rows)

    def rollback(self, n_valid: int) -> None:
        self.drafter.rollback(n_valid)
        proposed = accepted = 0
        if self._pending is not None:
            length, proposed, asked = self._pending
            self._pending = None
            accepted = min(max(n_valid - length, 0), proposed)
            if self.schedule == "heuristic" and proposed > 0:
                if accepted == proposed:
                    self.current = max(self.current, min(self.current + 2, asked))
                else:
                    self.current = max(1, self.current - 1)
        self.history.append(proposed)
        self.accepted_history.append(accepted)
