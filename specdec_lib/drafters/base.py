"""The :class:`Drafter` protocol: everything :class:`~specdec_lib.decoding.SpeculativeDecoder` asks
of a draft, and :class:`BaseDrafter`, its defaults (a draft by a second model:
:mod:`~specdec_lib.drafters.model`).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

__all__ = ["BaseDrafter", "Drafter"]


@runtime_checkable
class Drafter(Protocol):
    """Everything :class:`SpeculativeDecoder` asks of a draft. Subclass :class:`BaseDrafter`,
    which supplies the defaults, and write :meth:`propose` (and what your draft needs of the rest).

    ``propose(ids, k, warp, generator)`` gets the whole sequence so far (``[L]``, on the target's
    device) and returns up to ``k`` draft tokens ``[k']`` (``k' <= k``: a drafter may stop early,
    or return none) with the distributions they were sampled from ``[k', V]`` (on ``support``
    where the drafter names one, below; warped by ``warp``, a :class:`~specdec_lib.sampling.Warp`; a deterministic drafter returns
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
        self, ids: torch.Tensor, k: int, warp: Any, generator: torch.Generator | None
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
        self, ids: torch.Tensor, k: int, warp: Any, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def rollback(self, n_valid: int) -> None:
        pass

    def observe(self, start: int, features: torch.Tensor) -> None:
        raise ValueError(f"{type(self).__name__} reads no target features (feature_layers is None)")
