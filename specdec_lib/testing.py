"""Deliberately wrong pieces, for the tests that must fail. Test-only.

A test of exactness that never rejects anything proves nothing. Next to the prototype's wrong
correction (:func:`specdec_lib.sampling.prototype_correction`, a wrong *rule*, which
:func:`prototype_verify` plugs into a decoder), this module holds two wrong pieces of
*bookkeeping*, where the rule is right and the indices or caches are not; each plugs into
:class:`~specdec_lib.decoding.SpeculativeDecoder` through one of its test-only arguments:

* :class:`StaleCacheState` (``target_state=``) forgets to crop the target's KV cache after a
  rejection. The entries of the rejected drafts stay, and every later pass attends to them as if
  they were part of the text: the target's next distributions are conditioned on tokens that were
  never emitted. The tokens of the step itself follow the right law; the ones after it do not, so
  only a test of several tokens in a row can see it.
* :func:`wrong_bonus_row_verify` (``verifier=``) draws the bonus token from the target's row of the
  *last draft* (``p_{K-1}``) instead of the row after it (``p_K``): an off-by-one in the rows of the
  target's pass. Only steps that accept every draft are affected, and there the bonus token follows
  the law of the token before it.

Never use the wrong pieces outside a test.
"""

from __future__ import annotations

from typing import Any

import torch

from .decoding import TargetState
from .sampling import Verdict, prototype_correction, verify

__all__ = ["StaleCacheState", "prototype_verify", "wrong_bonus_row_verify"]


class StaleCacheState(TargetState):
    """WRONG: :meth:`rollback` moves the sequence length back but leaves the cache uncropped
    (pass it as a decoder's ``target_state``)."""

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
    rejection (pass it as a decoder's ``verifier``)."""
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
    """WRONG: :func:`~specdec_lib.sampling.verify` with the bonus drawn from ``p_{K-1}``, the
    row of the last draft, instead of ``p_K`` (pass it as a decoder's ``verifier``)."""
    target_probs = torch.as_tensor(target_probs)
    if len(target_probs) >= 2:
        target_probs = torch.cat([target_probs[:-1], target_probs[-2:-1]])
    return verify(draft_tokens, draft_probs, target_probs, generator, **kwargs)
