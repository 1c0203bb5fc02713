"""A dynamic draft length around any drafter: transformers' schedules, as a Drafter.

:class:`DynamicK` chooses ``k`` per step: transformers' heuristic schedule
(``num_assistant_tokens_schedule``) and confidence stopping (``assistant_confidence_threshold``).
How many drafts to propose is decided from the drafts so far, a stopping time: every draft that is
proposed was still sampled from the ``q`` the verifier is given, and a position that is not drafted
gets its token straight from ``p``, so the rule of notebook 01 stays exact at every position.
Stopping *before* a low-confidence draft (dropping it once seen) is not a stopping time and biases
the output; ``tests/test_dynamic.py`` shows the chi-square test catching it.
"""

from __future__ import annotations

import inspect

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
        drafter: any :class:`~specdec_lib.drafters.Drafter` (a causal LM is wrapped in
            :class:`~specdec_lib.drafters.ModelDrafter`).
        schedule: ``"heuristic"`` (transformers' ``num_assistant_tokens_schedule="heuristic"``):
            start at ``initial``; +2 after a step in which every proposed draft was accepted,
            else -1 (never below 1). ``"constant"``: always ``initial``. Either way the decoder's
            ``k`` (``K``, less near the end of the output) caps the draft.
        initial: the draft length at the start of every sequence.
        threshold: ``None``, or a confidence in (0, 1): draft one token at a time and stop after a
            draft ``x`` of confidence below it (transformers' ``assistant_confidence_threshold``,
            which keeps the low-confidence token too): ``q(x)``, the warped draft law, and in
            greedy decoding, whose ``q`` is one-hot, the draft's softmax at ``x``
            (:meth:`~specdec_lib.sampling.Warp.confidence`). Needs a drafter whose ``propose``
            takes ``threshold=`` (:class:`~specdec_lib.drafters.ModelDrafter`, the feature head's).

    Two deliberate differences from transformers: the schedule restarts at ``initial`` on every
    :meth:`reset`, i.e. every sequence (transformers' ``"heuristic_transient"``; its
    ``"heuristic"`` carries the value over between ``generate`` calls); and it never grows past
    the ``k`` the decoder asked for, so that a long run of full acceptances does not leave it far
    above ``K``, where every later rejection would cost a step without shortening the draft. A step
    in which the inner drafter proposed nothing (an n-gram drafter without a match) leaves the
    schedule unchanged.

    ``history`` and ``accepted_history`` hold the drafts proposed and accepted per decoding step of
    the current sequence (one entry per :meth:`rollback`, lining up with
    ``GenerationResult.steps``).
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
        if (
            threshold is not None
            and "threshold" not in inspect.signature(self.drafter.propose).parameters
        ):
            raise ValueError(
                f"threshold needs a drafter that can stop by confidence (its propose takes "
                f"threshold=); {type(self.drafter).__name__} cannot"
            )
        self.current = self.initial
        self.history: list[int] = []
        self.accepted_history: list[int] = []
        self._pending: tuple[int, int, int] | None = None  # (len(ids), proposed, k asked)

    @classmethod
    def stopped(cls, drafter: Drafter | torch.nn.Module, K: int, threshold: float) -> DynamicK:
        """Up to ``K`` drafts a step, stopping after a draft of confidence below ``threshold``:
        the draft of ``bench --schedule threshold``."""
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

    def observe(self, start: int, features: torch.Tensor) -> None:
        self.drafter.observe(start, features)

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
        k = positive_int(k, "k", "draft tokens asked for")
        cap = min(k, self.current)
        stop = {} if self.threshold is None else {"threshold": self.threshold}
        tokens, probs = self.drafter.propose(ids, cap, warp, generator, **stop)
        self._pending = (ids.numel(), int(tokens.numel()), k)
        return tokens, probs

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
