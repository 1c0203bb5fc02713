"""The :class:`Drafter` protocol: everything :class:`~specdec_lib.decoding.SpeculativeDecoder` asks
of a draft, and :class:`BaseDrafter`, its defaults."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

__all__ = ["BaseDrafter", "Drafter"]


@runtime_checkable
class Drafter(Protocol):
    """A draft, as transformers' candidate generator is: two methods. Subclass
    :class:`BaseDrafter` and write :meth:`propose` (and :meth:`update` if the draft keeps state).

    ``propose(ids, k, warp, generator)`` gets the sequence so far (``[L]``, on
    the target's device) and returns up to ``k`` draft tokens ``[k']`` with the rows of ``q``
    they were sampled from, ``[k', V]`` (on ``support`` where the draft names one), warped by
    ``warp`` (a :class:`~specdec_lib.sampling.Warp`; a deterministic draft returns one-hot
    rows). A draft that declares ``stops_by_confidence`` also takes ``threshold=``: it stops
    after a draft ``x`` whose confidence (``warp.confidence``) is below it. Stopping on the drafts so far is a
    stopping time: the output law is still exactly the target's.
    ``update(n_valid)``: only the first ``n_valid`` tokens of ``ids + drafts`` are still valid;
    ``update(0)`` starts a new sequence. Anything honouring this is exact, however poor its
    guesses.

    Attributes, each with a default in :class:`BaseDrafter`: ``vocab_size`` and ``device``
    (``None``: unchecked) let the decoder refuse a draft that does not fit the target;
    ``draft_scores``, the last proposal's logits (``[k', V]`` or on ``support``), rank greedy
    tree alternatives; ``support``, the sorted token ids outside which every ``q`` is 0;
    ``feature_layers``, the target layers whose hidden states a draft reads: then the decoder
    calls ``observe(start, features)`` after every target pass (``[m, F]`` for positions
    ``start..start+m-1``, rejected drafts included; ``update`` follows).
    """

    vocab_size: int | None
    device: torch.device | None
    feature_layers: tuple[int, ...] | None
    draft_scores: torch.Tensor | None
    stops_by_confidence: bool

    def propose(
        self, ids: torch.Tensor, k: int, warp: Any, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def update(self, n_valid: int) -> None: ...


class BaseDrafter:
    """The defaults of the :class:`Drafter` protocol: no vocabulary or device to check, no target
    features, no draft scores or subset, no stopping by confidence, no state to update."""

    vocab_size: int | None = None
    device: torch.device | None = None
    feature_layers: tuple[int, ...] | None = None
    draft_scores: torch.Tensor | None = None
    support: torch.Tensor | None = None
    stops_by_confidence: bool = False

    def propose(
        self, ids: torch.Tensor, k: int, warp: Any, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def update(self, n_valid: int) -> None:
        pass

    def observe(self, start: int, features: torch.Tensor) -> None:
        raise ValueError(f"{type(self).__name__} reads no target features (feature_layers is None)")
