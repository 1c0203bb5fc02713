"""The few pieces of a transformers causal LM that decoding and drafting touch.

One cached forward pass (:func:`model_forward`), a model with its KV cache (:class:`KVState`), the
final norm (:func:`final_norm`), the hidden states of chosen decoder layers
(:class:`capture_features`), and the facts the decoders check (device, vocabulary size, context
length). Llama-like models (``model.model.layers``,
``model.model.norm``) are what feature-level drafters need; everything else works with any
transformers causal LM.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

__all__ = [
    "CACHE_KW",
    "KVSlab",
    "KVState",
    "MKL_ROWS",
    "PackedLinear",
    "RoomyLayer",
    "pack_linears",
    "cache_kwargs",
    "capture_features",
    "context_length",
    "final_norm",
    "last_rows",
    "model_device",
    "model_forward",
    "move_entries",
    "new_cache",
    "output_cache",
    "synchronize",
    "vocab_size",
]


def model_device(model: Any) -> torch.device | None:
    """The device of a module's first parameter (``None`` for a module without parameters)."""
    if not isinstance(model, torch.nn.Module):
        return None
    param = next(model.parameters(), None)
    return param.device if param is not None else None


def vocab_size(model: Any) -> int | None:
    """``model.config.vocab_size``, or ``None``."""
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    return int(size) if size is not None else None


def context_length(model: Any) -> int | None:
    """The longest sequence the model's positions allow, from its config, or ``None``."""
    cfg = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(cfg, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


# The KV cache's keyword, in a model's (and a decoder layer's) arguments and in its output:
# transformers up to 5.2x calls it ``past_key_values``, later releases ``cache`` (still accepting
# the old name, with a warning). A layer handed the wrong name silently runs without a cache, so
# every call in the library goes through these two helpers.
_LAYER_ARGS = inspect.signature(LlamaDecoderLayer.forward).parameters
CACHE_KW = "cache" if "cache" in _LAYER_ARGS else "past_key_values"


def cache_kwargs(cache: Any) -> dict[str, Any]:
    """``{CACHE_KW: cache}``: the KV cache as the installed transformers names it."""
    return {CACHE_KW: cache}


def output_cache(out: Any) -> Any:
    """The KV cache a model's output carries, under the installed transformers' name."""
    return getattr(out, CACHE_KW)


def model_forward(
    model: Any, ids: torch.Tensor, cache: Any, n_logits: int
) -> tuple[torch.Tensor, Any]:
    """One forward pass of a transformers causal LM on ``ids`` ``[n]`` with KV ``cache``.

    Returns the logits of the last ``n_logits`` positions, ``[n_logits, V]``, and the cache.
    """
    keep = last_rows(n_logits, ids.numel(), ids.device)
    out = model(
        input_ids=ids.view(1, -1), use_cache=True, logits_to_keep=keep, **cache_kwargs(cache)
    )
    return out.logits[0, -n_logits:], output_cache(out)


class KVSlab:
    """The keys and values of a cache's layers in two buffers, ``[layers, batch, heads, room,
    head_dim]``, with room to spare: the storage of :class:`RoomyLayer`. Moving entries (a kept
    tree path) is then one indexed copy for every layer at once."""

    room = 128  # entries held at the first pass, at least

    def __init__(self, n_layers: int) -> None:
        self.n_layers = n_layers
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.held = 0  # entries worth keeping when the buffers grow (the longest layer's)

    def fits(self, k: torch.Tensor) -> bool:
        """Can the buffers hold entries of this layer's shape, dtype and device?"""
        b = self.keys
        return b is None or (
            b.shape[1:-2] == k.shape[:-2]
            and b.shape[-1] == k.shape[-1]
            and b.dtype == k.dtype
            and b.device == k.device
        )

    def reserve(self, k: torch.Tensor, v: torch.Tensor, need: int) -> None:
        """Room for ``need`` entries in every layer (twice the room held, or more), the first
        ``held`` entries kept."""
        room = 0 if self.keys is None else self.keys.shape[-2]
        if need <= room:
            return
        cap = max(need, self.room, 2 * room)
        keys = k.new_empty((self.n_layers, *k.shape[:-2], cap, k.shape[-1]))
        values = v.new_empty((self.n_layers, *v.shape[:-2], cap, v.shape[-1]))
        if self.held:
            keys[..., : self.held, :] = self.keys[..., : self.held, :]
            values[..., : self.held, :] = self.values[..., : self.held, :]
        self.keys, self.values = keys, values

    def move(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Entries ``src`` become entries ``dst`` in every layer (index tensors; every source is
        read before any destination is written)."""
        for b in (self.keys, self.values):
            b.index_copy_(-2, dst, b.index_select(-2, src))


class RoomyLayer(DynamicLayer):
    """One layer's KV cache as a view of a :class:`KVSlab`, for decoding's bookkeeping.

    transformers' ``DynamicLayer`` concatenates every pass's keys and values onto the cache (a new
    tensor, the whole cache copied, per layer and pass) and crops by slicing each layer. Here a
    pass writes its entries into the slab's free room (which doubles when full), dropping the
    last entries (:meth:`crop`) changes a count, and moving entries is one copy in the slab for
    all layers. Attention reads views of the same values: the same logits, bit for bit (tested).
    Written by hand because transformers has no such layer: its ``StaticLayer`` is preallocated
    too, but attends over its whole length, empty room included."""

    def __init__(self, slab: KVSlab | None = None, index: int = 0, **kwargs: Any) -> None:
        self.slab, self.index = slab or KVSlab(1), index
        self._n = 0
        super().__init__(**kwargs)

    # keys and values as transformers' code reads and sets them: the entries held
    @property
    def keys(self) -> torch.Tensor | None:
        b = self.slab.keys
        return None if b is None or not self.is_initialized else b[self.index, ..., : self._n, :]

    @keys.setter
    def keys(self, t: torch.Tensor | None) -> None:
        self._assign(t, "keys")

    @property
    def values(self) -> torch.Tensor | None:
        b = self.slab.values
        return None if b is None or not self.is_initialized else b[self.index, ..., : self._n, :]

    @values.setter
    def values(self, t: torch.Tensor | None) -> None:
        self._assign(t, "values")

    def _assign(self, t: torch.Tensor | None, name: str) -> None:
        """transformers' own code sets keys and values to ``None`` (a reset), or to new tensors
        (beam search, offloading): those this layer holds on a slab of its own."""
        if t is None:
            self._n = 0
            return
        if self.slab.n_layers > 1:
            self.slab, self.index = KVSlab(1), 0
        setattr(self.slab, name, t.unsqueeze(0))
        self._n = self.slab.held = t.shape[-2]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        if not self.slab.fits(key_states):  # a layer of another shape: storage of its own
            self.slab, self.index = KVSlab(1), 0
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, m, slab = self._n, key_states.shape[-2], self.slab
        slab.reserve(key_states, value_states, n + m)
        slab.keys[self.index, ..., n : n + m, :] = key_states
        slab.values[self.index, ..., n : n + m, :] = value_states
        self._n = n + m
        slab.held = max(slab.held, self._n)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._n if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last ``-tokens_to_remove`` entries (a negative count, as transformers 5's)."""
        if tokens_to_remove > 0:
            raise ValueError(
                f"tokens_to_remove must be a negative count of entries, got {tokens_to_remove}"
            )
        self._n = max(0, self._n + tokens_to_remove)


def new_cache(model: Any) -> DynamicCache:
    """An empty KV cache for ``model``'s passes: its config's layers (a sliding window's as
    transformers makes them), the ordinary ones :class:`RoomyLayer` views of one
    :class:`KVSlab`. Without a config, each layer as it comes holds a slab of its own."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "get_text_config"):
        cache = DynamicCache()
        cache.layer_class_to_replicate = RoomyLayer
        return cache
    cache = DynamicCache(config=config)
    plain = [i for i, layer in enumerate(cache.layers) if type(layer) is DynamicLayer]
    slab = KVSlab(len(plain))
    for j, i in enumerate(plain):
        cache.layers[i] = RoomyLayer(slab, j)
    return cache


def move_entries(cache: Any, moves: Sequence[tuple[int, int]]) -> None:
    """Cache entries move, ``(source, destination)`` each, in every layer: every source is read
    before any destination is written. :class:`RoomyLayer` layers move in one indexed copy per
    slab; other layers by a slice copy per entry, which is right where every entry moves to a
    position before its own and before every later source (a kept tree path)."""
    slabs: dict[int, KVSlab] = {}
    for layer in cache.layers:
        if isinstance(layer, RoomyLayer):
            slabs[id(layer.slab)] = layer.slab
            continue
        for s, d in moves:
            layer.keys[..., d : d + 1, :] = layer.keys[..., s : s + 1, :]
            layer.values[..., d : d + 1, :] = layer.values[..., s : s + 1, :]
    if slabs:
        src, dst = torch.tensor(moves).T
        for slab in slabs.values():
            slab.move(src.to(slab.keys.device), dst.to(slab.keys.device))


class KVState:
    """A model and its KV cache, which covers the first ``length`` tokens of the sequence.

    ``forward(seq, n)`` runs the model on the tokens of ``seq`` not yet in the cache and returns
    the logits of its last ``n`` positions; ``rollback(n)`` keeps the first ``n`` tokens only.
    With ``use_cache=False`` every pass re-encodes the whole sequence instead (slow; the reference
    that tests the cache logic). A draft model keeps its cache in one; the target's
    (:class:`~specdec_lib.decoding.TargetState`) adds the passes over a draft tree.
    """

    def __init__(self, model: Any, use_cache: bool = True) -> None:
        self.model = model
        self.use_cache = use_cache
        self.cache: Any = None
        self.length = 0

    def forward(self, seq: torch.Tensor, n_logits: int) -> torch.Tensor:
        if not self.use_cache:
            logits, _ = model_forward(self.model, seq, None, n_logits)
            return logits
        logits, self.cache = model_forward(self.model, seq[self.length :], self.kv(), n_logits)
        self.length = seq.numel()
        return logits

    def kv(self) -> Any:
        """The KV cache, made (:func:`new_cache`) before the first pass."""
        if self.cache is None:
            self.cache = new_cache(self.model)
        return self.cache

    def rollback(self, n_valid: int) -> None:
        """Only the first ``n_valid`` tokens of the sequence stay: later cache entries go."""
        if self.use_cache and self.cache is not None:
            held = self.cache.get_seq_length()  # the sequence, and any tree nodes after it
            if held > n_valid:
                self.cache.crop(n_valid - held)  # transformers 5: a negative count removes
        self.length = min(self.length, n_valid)


# The row counts whose float32 products MKL packs the weights for (a pass over more rows than the
# largest runs unpacked; over fewer, on the next count up, the extra rows zeros).
MKL_ROWS = (2, 4, 8, 12, 16)


class PackedLinear(torch.nn.Linear):
    """A linear layer whose weight is also held prepacked for the CPU's matmul libraries: a pass
    over a few tokens then streams the weights once, in the library's blocked layout, instead of a
    general matrix product repacking them on every call (measured: about twice the time of a
    one-token pass for two tokens in float32 on AVX2-only CPUs).

    bfloat16 runs oneDNN's packed product. float32 keeps the matrix-vector kernel for one row
    (already at the memory bandwidth) and runs MKL's packed product (``cblas_sgemm_compute``)
    for up to ``MKL_ROWS[-1]`` rows; MKL packs for a fixed row count, so a pass runs at the next
    count of ``MKL_ROWS`` up, the extra rows zeros, which change nothing in the real rows. Same
    maths, another order of the sums: a packed model is another floating-point rounding of the
    same model, and decoding with it is exact with respect to it (the autoregressive baseline
    runs the same packed model)."""

    def pack(self) -> PackedLinear:
        w = self.weight.detach()
        self.by_rows: dict[int, torch.Tensor] = {}
        if w.dtype != torch.float32:
            self.packed = torch.ops.mkldnn._reorder_linear_weight(w)
        elif torch.backends.mkl.is_available():
            self.by_rows = {m: torch.ops.mkl._mkl_reorder_linear_weight(w, m) for m in MKL_ROWS}
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight.dtype == torch.float32:
            rows = x.numel() // x.shape[-1]
            m = next((m for m in self.by_rows if m >= rows), None)
            if rows == 1 or m is None:
                return torch.nn.functional.linear(x, self.weight, self.bias)
            flat = x.reshape(rows, x.shape[-1])
            if m > rows:
                flat = torch.cat([flat, flat.new_zeros(m - rows, flat.shape[-1])])
            out = torch.ops.mkl._mkl_linear(flat, self.by_rows[m], self.weight, self.bias, m)
            return out[:rows].view(*x.shape[:-1], out.shape[-1])
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


def pack_linears(model: torch.nn.Module) -> int:
    """Turn every ``nn.Linear`` of ``model`` (on a CPU, in float32 or bfloat16) into a
    :class:`PackedLinear`, in place; returns how many. Where the library cannot pack the dtype on
    this CPU (float32 without MKL; bfloat16 without oneDNN, or without AVX512-BW or
    AVX-NE-CONVERT) nothing changes and 0 is returned."""
    layers = [
        m
        for m in model.modules()
        if type(m) is torch.nn.Linear
        and m.weight.device.type == "cpu"
        and m.weight.dtype in (torch.float32, torch.bfloat16)
    ]
    if not layers:
        return 0
    w = layers[0].weight.detach()[:1]
    try:
        if w.dtype == torch.float32 and torch.backends.mkl.is_available():
            torch.ops.mkl._mkl_reorder_linear_weight(w, MKL_ROWS[0])
        elif w.dtype != torch.float32 and torch.backends.mkldnn.is_available():
            torch.ops.mkldnn._reorder_linear_weight(w)
        else:
            return 0
    except RuntimeError:  # no kernel for this dtype on this CPU
        return 0
    for m in layers:
        m.__class__ = PackedLinear
        m.pack()
    return len(layers)


def last_rows(n: int, length: int, device: torch.device | None = None) -> int | torch.Tensor:
    """``logits_to_keep`` for the last ``n`` of ``length`` positions of a pass.

    An int makes transformers slice the hidden states (``h[:, -n:]``) into a view whose batch
    stride is not ``n * hidden``; on a CPU, bfloat16 ``linear`` on such a view leaves its fast
    kernel (measured here: the 49k-token head of SmolLM2 on one row, about 90 ms instead of 2).
    The positions as an index tensor give a densely strided copy instead."""
    return n if n >= length else torch.arange(length - n, length, device=device)


def final_norm(model: Any) -> torch.nn.Module:
    """The final norm of a transformers decoder-only LM (its input is the last hidden state)."""
    norm = getattr(_decoder(model), "norm", None)
    if not isinstance(norm, torch.nn.Module):
        raise ValueError(
            f"cannot find the final norm of {type(model).__name__} (expected model.model.norm): "
            "feature-level drafters need a Llama-like target"
        )
    return norm


def _decoder(model: Any) -> Any:
    return model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)


class capture_features:
    """Context manager: the outputs of decoder ``layers`` (``-1``: the last, i.e. the input of the
    final norm) of every forward pass inside it, concatenated on the last axis.

    ``with capture_features(model, (2, 14, -1)) as got: model(...)`` leaves one ``[B, n, 3 H]``
    tensor per pass in ``got``.
    """

    def __init__(self, model: Any, layers: Sequence[int] = (-1,)) -> None:
        blocks = getattr(_decoder(model), "layers", None)
        if blocks is None:
            raise ValueError(f"{type(model).__name__} has no decoder layers to read features from")
        n = len(blocks)
        if not layers or any(not -n <= int(i) < n for i in layers):
            raise ValueError(f"feature layers must be in [-{n}, {n}), got {tuple(layers)!r}")
        self._modules = [blocks[int(i)] for i in layers]
        self.captured: list[torch.Tensor] = []

    def __enter__(self) -> list[torch.Tensor]:
        parts: dict[int, torch.Tensor] = {}

        def hook(i):
            def fn(_m, _args, out):
                parts[i] = out[0] if isinstance(out, tuple) else out
                if len(parts) == len(self._modules):
                    self.captured.append(torch.cat([parts[j] for j in sorted(parts)], dim=-1))
                    parts.clear()

            return fn

        self._handles = [m.register_forward_hook(hook(i)) for i, m in enumerate(self._modules)]
        return self.captured

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); a no-op on a CPU. Every timing goes through it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
