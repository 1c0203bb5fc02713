"""The :class:`Drafter` protocol: everything :class:`~specdec_lib.decoding.SpeculativeDecoder` asks
of a draft. :class:`BaseDrafter` supplies its defaults; :class:`ModelDrafter` drafts with any causal
LM over the target's vocabulary; :func:`as_drafter` wraps a model where a drafter is expected.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from ..lm import KVState, model_device, vocab_size
from ..sampling import Warp, sample

__all__ = ["BaseDrafter", "Drafter", "ModelDrafter", "as_drafter"]


@runtime_checkable
class Drafter(Protocol):
    """Everything :class:`SpeculativeDecoder` asks of a draft. Subclass :class:`BaseDrafter`,
    which supplies the defaults, and write :meth:`propose` (and what your draft needs of the rest).

    ``propose(ids, k, warp, generator)`` gets the whole sequence so far (``[L]``, on the target's
    device) and returns up to ``k`` draft tokens ``[k']`` (``k' <= k``: a drafter may stop early,
    or return none) with the distributions they were sampled from ``[k', V]`` (on ``support``
    where the drafter names one, below; warped by ``warp``; a deterministic drafter returns
    one-hot rows). Whether to go on drafting may depend
    on the drafts so far (a stopping time): the output law is still exactly the target's. (A
    drafter whose ``propose`` also takes ``threshold=`` can stop after a draft ``x`` of
    confidence below it, ``warp.confidence``: ``q(x)``, or in greedy decoding the draft's
    softmax at ``x``; :class:`~specdec_lib.drafters.DynamicK` uses it.)
    ``rollback(n)`` says that only the first ``n`` tokens of ``ids + drafts`` are still valid;
    ``reset()`` starts a new sequence. Anything honouring this is exact, however poor its guesses.

    ``feature_layers``: ``None``, or the target's decoder layers whose outputs the drafter reads;
    then ``observe(start, features)`` gets, after every target pass, the target's hidden states
    ``[m, F]`` (those layers' outputs, concatenated) for positions ``start..start+m-1``, the
    rejected drafts' positions included (``rollback`` follows). ``draft_scores``: the logits of
    every position of the last proposal over the whole vocabulary (``[k', V]``), or ``None``;
    greedy decoding with a tree ranks the alternatives by them. ``vocab_size`` and ``device``
    (either may be ``None``) let the decoder refuse a draft that does not fit the target.
    ``support`` (optional, ``None`` by default): the sorted token ids outside which every ``q``
    the drafter draws from is 0; then ``propose`` returns the rows of ``q`` on it
    (``[k', |support|]``), ``draft_scores`` are the scores of its tokens (``[k', |support|]``),
    and the decoder draws a tree's alternatives and verifies them there (a chain's rows are
    spread over the vocabulary only to be verified).
    """

    vocab_size: int | None
    device: torch.device | None
    feature_layers: tuple[int, ...] | None
    draft_scores: torch.Tensor | None

    def reset(self) -> None: ...

    def propose(
        self, ids: torch.Tensor, k: int, warp: Warp, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def rollback(self, n_valid: int) -> None: ...

    def observe(self, start: int, features: torch.Tensor) -> None: ...


class BaseDrafter:
    """The defaults of the :class:`Drafter` protocol: no vocabulary or device to check, no target
    features, no draft scores, nothing to reset or roll back."""

    vocab_size: int | None = None
    device: torch.device | None = None
    feature_layers: tuple[int, ...] | None = None
    draft_scores: torch.Tensor | None = None
    support: torch.Tensor | None = None

    def reset(self) -> None:
        pass

    def propose(
        self, ids: torch.Tensor, k: int, warp: Warp, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def rollback(self, n_valid: int) -> None:
        pass

    def observe(self, start: int, features: torch.Tensor) -> None:
        raise ValueError(f"{type(self).__name__} reads no target features (feature_layers is None)")


class ModelDrafter(BaseDrafter):
    """Drafts with any causal LM over the target's vocabulary, keeping its own KV cache."""

    def __init__(self, model: Any, *, use_cache: bool = True) -> None:
        self.model = model
        self.use_cache = use_cache
        self.vocab_size = vocab_size(model)
        self._state = KVState(model, use_cache)

    @property
    def device(self) -> torch.device | None:
        return model_device(self.model)

    def reset(self) -> None:
        self._state = KVState(self.model, self.use_cache)

    def propose(
        self,
        ids: torch.Tensor,
        k: int,
        warp: Warp,
        generator: torch.Generator | None,
        threshold: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Up to ``k`` drafts; with a ``threshold``, stop after a draft ``x`` whose confidence
        (:meth:`~specdec_lib.sampling.Warp.confidence`) is below it (a stopping time: the output
        law stays exact)."""
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

    def rollback(self, n_valid: int) -> None:
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
