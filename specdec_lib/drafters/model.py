"""A draft by a second model (:class:`ModelDrafter`), and :func:`as_drafter`."""

from __future__ import annotations

from typing import Any

import torch

from ..lm import KVState, model_device, vocab_size
from ..sampling import Warp, sample
from .base import BaseDrafter, Drafter

__all__ = ["ModelDrafter", "as_drafter"]


class ModelDrafter(BaseDrafter):
    """Drafts with any causal LM over the target's vocabulary, keeping its own KV cache."""

    stops_by_confidence = True

    def __init__(self, model: Any, *, use_cache: bool = True) -> None:
        self.model = model
        self.use_cache = use_cache
        self.vocab_size = vocab_size(model)
        self._state = KVState(model, use_cache)

    @property
    def device(self) -> torch.device | None:
        return model_device(self.model)

    def propose(
        self,
        ids: torch.Tensor,
        k: int,
        warp: Warp,
        generator: torch.Generator | None,
        threshold: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Up to ``k`` drafts; with a ``threshold``, stop after a draft whose confidence
        (:meth:`~specdec_lib.sampling.Warp.confidence`) is below it."""
        if k < 1:
            return ids.new_empty(0), torch.empty(0, self.vocab_size or 0, device=ids.device)
        tokens, probs, scores = [], [], []
        seq = ids
        for i in range(k):
            logits = self._state.forward(seq, 1)[-1]
            scores.append(logits)
            q = warp.probs(logits)
            x = sample(q, generator)
            tokens.append(x)
            probs.append(q)
            # Decided on the drafts so far only (a stopping time), so the output law stays exact.
            if threshold is not None and warp.confidence(logits, q, x) < threshold:
                break
            if i + 1 < k:  # the last draft token is fed at the next step, if it survives
                seq = torch.cat([seq, x.view(1)])
        self.draft_scores = torch.stack(scores)
        return torch.stack(tokens), torch.stack(probs)

    def update(self, n_valid: int) -> None:
        if n_valid == 0:
            self._state = KVState(self.model, self.use_cache)
        else:
            self._state.rollback(n_valid)


def as_drafter(draft: Any, use_cache: bool = True) -> Drafter:
    """``draft`` as a :class:`Drafter`: a causal LM is wrapped in :class:`ModelDrafter`."""
    if isinstance(draft, torch.nn.Module):
        return ModelDrafter(draft, use_cache=use_cache)
    if isinstance(draft, Drafter):
        return draft
    raise ValueError(
        "draft must be a causal LM (torch.nn.Module returning .logits) or a Drafter (subclass "
        f"specdec_lib.drafters.BaseDrafter and write propose), got {type(draft).__name__}"
    )
