"""Deliberately wrong pieces, for the tests that must fail (a test of exactness that never rejects
proves nothing); each plugs into :class:`~specdec_lib.decoding.SpeculativeDecoder` through a
test-only argument. Never use them outside a test."""

from __future__ import annotations

from typing import Any

import torch

from .decoding import TargetState
from .sampling import Verdict, prototype_correction, verify

__all__ = ["StaleCacheState", "prototype_verify", "wrong_bonus_row_verify"]


class StaleCacheState(TargetState):
    """WRONG: :meth:`rollback` leaves the cache uncropped (a decoder's ``target_state``).

    Rejected drafts stay in the cache and condition later passes: only a test of several tokens in a
    row can see it."""

    def rollback(self, n_valid: int) -> None:
        self.length = min(self.length, n_valid)  # the bug: no self.cache.crop(...)
        self._tree = None


def prototype_verify(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    **_: Any,
) -> Verdict:
    """WRONG: :func:`~specdec_lib.sampling.verify` with the prototype's correction after a
    rejection (a decoder's ``verifier``)."""
    return verify(
        draft_tokens, draft_probs, target_probs, generator, correction=prototype_correction
    )


def wrong_bonus_row_verify(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    **kwargs: Any,
) -> Verdict:
    """WRONG: :func:`~specdec_lib.sampling.verify` with the bonus drawn from ``p_{K-1}``, the last
    draft's row, instead of ``p_K`` (a decoder's ``verifier``); only steps that accept every draft
    are affected."""
    target_probs = torch.as_tensor(target_probs)
    if len(target_probs) >= 2:
        target_probs = torch.cat([target_probs[:-1], target_probs[-2:-1]])
    return verify(draft_tokens, draft_probs, target_probs, generator, **kwargs)
