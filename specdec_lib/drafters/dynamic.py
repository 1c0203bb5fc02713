"""A dynamic draft length around any drafter (transformers' schedules), as a Drafter.

How many drafts to propose is decided from the drafts so far, a stopping time, so the rule stays
exact; dropping a low-confidence draft once seen would not be (``tests/test_dynamic.py``).
"""

from __future__ import annotations

import torch

from ..checks import one_of, positive_int, probability
from ..sampling import Warp
from .base import BaseDrafter, Drafter
from .model import as_drafter

__all__ = ["SCHEDULES", "DynamicK"]

SCHEDULES = ("heuristic", "constant")


class DynamicK(BaseDrafter):
    """Wraps a drafter and chooses how many tokens it drafts at each step.

    Args:
        drafter: any :class:`~specdec_lib.drafters.Drafter` or causal LM.
        schedule: ``"heuristic"``: start at ``initial``; +2 after a step that accepted every draft,
            else -1 (at least 1). ``"constant"``: always ``initial``. The decoder's ``k`` caps both.
        initial: the draft length at the start of every sequence.
        threshold: ``None``, or a confidence in (0, 1): stop after a draft whose confidence
            (:meth:`~specdec_lib.sampling.Warp.confidence`) is below it, keeping that draft
            (the drafter needs ``stops_by_confidence``).

    Unlike transformers, the schedule restarts on every sequence and never grows past the ``k``
    asked for. ``history``, ``accepted_history``: drafts proposed and accepted per step.
    """

    def __init__(
        self,
        drafter: Drafter | torch.nn.Module,
        *,
        schedule: str = "heuristic",
        initial: int = 5,
        threshold: float | None = None,
    ) -> None:
        self.drafter = as_drafter(drafter)
        self.schedule = one_of(schedule, "schedule", SCHEDULES)
        self.initial = positive_int(initial, "initial", "the draft length at the start")
        self.threshold = probability(threshold, "threshold", one=False, optional=True)
        if threshold is not None and not getattr(self.drafter, "stops_by_confidence", False):
            raise ValueError(
                f"threshold needs a drafter that can stop by confidence (stops_by_confidence); "
                f"{type(self.drafter).__name__} cannot"
            )
        self.current = self.initial
        self.history: list[int] = []
        self.accepted_history: list[int] = []
        self._pending: tuple[int, int, int] | None = None  # (len(ids), proposed, k asked)

    @classmethod
    def stopped(cls, drafter: Drafter | torch.nn.Module, K: int, threshold: float) -> DynamicK:
        """Up to ``K`` drafts a step, stopping by confidence (``bench --schedule threshold``)."""
        return cls(drafter, schedule="constant", initial=K, threshold=threshold)

    # The inner drafter answers the rest of the protocol.
    @property
    def vocab_size(self) -> int | None:
        return self.drafter.vocab_size

    @property
    def device(self) -> torch.device | None:
        return self.drafter.device

    @property
    def feature_layers(self) -> tuple[int, ...] | None:
        return self.drafter.feature_layers

    @property
    def draft_scores(self) -> torch.Tensor | None:
        return self.drafter.draft_scores

    @property
    def support(self) -> torch.Tensor | None:
        return getattr(self.drafter, "support", None)

    @property
    def stops_by_confidence(self) -> bool:
        return getattr(self.drafter, "stops_by_confidence", False)

    def observe(self, start: int, features: torch.Tensor) -> None:
        self.drafter.observe(start, features)

    def __repr__(self) -> str:
        return (
            f"DynamicK({self.drafter!r}, schedule={self.schedule!r}, initial={self.initial}, "
            f"threshold={self.threshold!r})"
        )

    def propose(
        self, ids: torch.Tensor, k: int, warp: Warp, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        k = positive_int(k, "k", "draft tokens asked for")
        cap = min(k, self.current)
        stop = {} if self.threshold is None else {"threshold": self.threshold}
        tokens, probs = self.drafter.propose(ids, cap, warp, generator, **stop)
        self._pending = (ids.numel(), int(tokens.numel()), k)
        return tokens, probs

    def update(self, n_valid: int) -> None:
        self.drafter.update(n_valid)
        if n_valid == 0:  # a new sequence
            self.current, self.history, self.accepted_history = self.initial, [], []
            self._pending = None
            return
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
