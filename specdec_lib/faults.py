"""Deliberately wrong pieces, kept to show that the tests can fail (notebook 02, ``tests/``).

A test of exactness that never rejects anything proves nothing. Next to the prototype's wrong
correction (:func:`specdec_lib.sampling.prototype_correction`, a wrong *rule*), this module holds
two wrong pieces of *bookkeeping*, where the rule is right and the indices or caches are not.

:class:`StaleCacheDecoder` forgets to crop the target's KV cache after a rejection. The entries
of the rejected drafts stay, and every later pass attends to them as if they were part of the
text: the target's next distributions are conditioned on tokens that were never emitted. The
tokens of the step itself follow the right law; the ones after it do not, so only a test of
several tokens in a row can see it.

:func:`wrong_bonus_row_verify` draws the bonus token from the target's row of the *last draft*
(``p_{K-1}``) instead of the row after it (``p_K``): an off-by-one in the rows of the target's
pass. Only steps that accept every draft are affected, and there the bonus token follows the law
of the token before it. Never use these outside a test.
"""

from __future__ import annotations

from typing import Any

import torch

from .decoding import SpeculativeDecoder, TargetState
from .sampling import Verdict, verify

__all__ = ["StaleCacheDecoder", "StaleCacheState", "wrong_bonus_row_verify"]


class StaleCacheState(TargetState):
    """WRONG: :meth:`rollback` moves the sequence length back but leaves the cache uncropped."""

    def rollback(self, n_valid: int) -> None:
        self.length = min(self.length, n_valid)  # the bug: no self.cache.crop(...)
        self._alt_feats = None


class StaleCacheDecoder(SpeculativeDecoder):
    """WRONG: :class:`~specdec_lib.decoding.SpeculativeDecoder` with :class:`StaleCacheState`."""

    target_state = StaleCacheState


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
