"""The KV cache of decoding in buffers with room to spare (:class:`BufferCache`): the same keys
and values as transformers' ``DynamicCache``, at less cost a pass."""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

__all__ = ["BufferCache", "BufferLayer"]


class BufferLayer(DynamicLayer):
    """A cache layer whose keys and values live in buffers ``[B, H_kv, capacity, D]`` (capacity
    doubling as needed): a pass writes its entries in place, a crop moves the end.

    ``keys`` and ``values`` are views of the first :meth:`get_seq_length` entries, so writing into
    them (:meth:`~specdec_lib.decoding.TargetState.keep`) writes into the cache; a tensor assigned
    to them becomes the buffer."""

    MIN_CAPACITY = 256

    def __init__(self, **kwargs: Any) -> None:
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self._n = 0
        super().__init__(**kwargs)

    @property
    def keys(self) -> torch.Tensor | None:
        return None if self._k is None else self._k[..., : self._n, :]

    @keys.setter
    def keys(self, t: torch.Tensor | None) -> None:
        self._k, self._n = _as_buffer(t)

    @property
    def values(self) -> torch.Tensor | None:
        return None if self._v is None else self._v[..., : self._n, :]

    @values.setter
    def values(self, t: torch.Tensor | None) -> None:
        self._v, self._n = _as_buffer(t)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self._n, self._n + key_states.shape[-2]
        if not _fits(self._k, key_states, end) or not _fits(self._v, value_states, end):
            capacity = max(2 * end, self.MIN_CAPACITY)
            self._k = _regrown(self._k, key_states, start, capacity)
            self._v = _regrown(self._v, value_states, start, capacity)
        self._k[..., start:end, :].copy_(key_states)
        self._v[..., start:end, :].copy_(value_states)
        self._n = end
        return self._k[..., :end, :], self._v[..., :end, :]

    def get_seq_length(self) -> int:
        return self._n if self.is_initialized else 0

    def reset(self) -> None:
        """Empty, the buffers dropped."""
        self._k = self._v = None
        self._n = 0
        self.is_initialized = False

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last ``-tokens_to_remove`` entries (0 or less, as ``DynamicLayer.crop`` takes
        it; else ``ValueError``); the buffers keep their memory."""
        if tokens_to_remove > 0:
            raise ValueError(
                f"tokens_to_remove must be 0 or negative (entries to drop), got {tokens_to_remove}"
            )
        self._n = max(0, self._n + tokens_to_remove)


def _as_buffer(t: torch.Tensor | None) -> tuple[torch.Tensor | None, int]:
    """A tensor assigned to a :class:`BufferLayer`'s keys or values, as its buffer and length
    (an empty or 1-D placeholder, as ``lazy_initialization`` assigns, holds nothing)."""
    if t is None or t.dim() < 2 or t.numel() == 0:
        return None, 0
    return t, t.shape[-2]


def _fits(buffer: torch.Tensor | None, new: torch.Tensor, end: int) -> bool:
    """Can ``buffer`` take entries like ``new`` up to position ``end``?"""
    return (
        buffer is not None
        and buffer.shape[-2] >= end
        and buffer.shape[:-2] == new.shape[:-2]
        and buffer.shape[-1] == new.shape[-1]
        and buffer.dtype == new.dtype
        and buffer.device == new.device
    )


def _regrown(
    buffer: torch.Tensor | None, new: torch.Tensor, held: int, capacity: int
) -> torch.Tensor:
    """A buffer of ``capacity`` entries shaped like ``new``, holding ``buffer``'s first ``held``."""
    out = new.new_empty((*new.shape[:-2], capacity, new.shape[-1]))
    if held:
        out[..., :held, :].copy_(buffer[..., :held, :])
    return out


class BufferCache(DynamicCache):
    """transformers' ``DynamicCache`` made of :class:`BufferLayer` s, one per decoder layer."""

    def __init__(self) -> None:
        super(DynamicCache, self).__init__(layer_class_to_replicate=BufferLayer)
