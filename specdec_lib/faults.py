"""Deliberately wrong pieces, kept to show that the tests can fail (notebook 02, ``tests/``).

A test of exactness that never rejects anything proves nothing. Next to the prototype's wrong
correction (:func:`specdec_lib.sampling.prototype_correction`, a wrong *rule*), this module holds a
wrong piece of *bookkeeping*: the rule is right, the caches are not.

:class:`StaleCacheDecoder` forgets to crop the target's KV cache after a rejection. The entries
of the rejected drafts stay, and every later pass attends to them as if they were part of the
text: the target's next distributions are conditioned on tokens that were never emitted. The
tokens of the step itself follow the right law; the ones after it do not, so only a test of
several tokens in a row can see it. Never use these outside a test.
"""

from __future__ import annotations

from .decoding import SpeculativeDecoder, TargetState

__all__ = ["StaleCacheDecoder", "StaleCacheState"]


class StaleCacheState(TargetState):
    """WRONG: :meth:`rollback` moves the sequence length back but leaves the cache uncropped."""

    def rollback(self, n_valid: int) -> None:
        self.length = min(self.length, n_valid)  # the bug: no self.cache.crop(...)
        self._alt_feats = None


class StaleCacheDecoder(SpeculativeDecoder):
    """WRONG: :class:`~specdec_lib.decoding.SpeculativeDecoder` with :class:`StaleCacheState`."""

    target_state = StaleCacheState
