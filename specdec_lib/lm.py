"""The pieces of a transformers causal LM that decoding and drafting touch. Feature-level drafters
need a Llama-like model; the rest works with any causal LM."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

__all__ = [
    "CACHE_KW",
    "KVState",
    "PackedLinear",
    "pack_linears",
    "cache_kwargs",
    "capture_features",
    "context_length",
    "final_norm",
    "last_rows",
    "model_device",
    "model_forward",
    "new_cache",
    "register_attention",
    "register_cache",
    "output_cache",
    "synchronize",
    "use_cpu_attention",
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


# The KV cache's keyword (``past_key_values``, or ``cache`` in later transformers). A layer handed
# the wrong name silently runs without a cache, so every call goes through these helpers.
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
    """One forward pass on ``ids`` ``[n]`` with KV ``cache``: (logits of the last ``n_logits``
    positions ``[n_logits, V]``, the cache)."""
    keep = last_rows(n_logits, ids.numel(), ids.device)
    out = model(
        input_ids=ids.view(1, -1), use_cache=True, logits_to_keep=keep, **cache_kwargs(cache)
    )
    return out.logits[0, -n_logits:], output_cache(out)


# The attention of every pair loaded for a CPU; None: transformers' own (register_attention).
_ATTENTION: tuple[str, Callable[[torch.dtype], range]] | None = None


def register_attention(name: str | None, passes: Callable[[torch.dtype], range] | None = None):
    """Run the transformers attention registered as ``name`` in every pair loaded for a CPU
    (``None``: transformers' own); ``passes(dtype)``: the pass lengths it computes itself."""
    global _ATTENTION
    _ATTENTION = None if name is None else (name, passes or (lambda dtype: range(1, 2)))


def use_cpu_attention(model: torch.nn.Module) -> dict[str, Any]:
    """Set the registered CPU attention in every model within ``model``; returns what to record."""
    if _ATTENTION is None:
        return {}
    name, passes = _ATTENTION
    for sub in model.modules():
        if hasattr(sub, "set_attn_implementation") and hasattr(sub, "config"):
            sub.set_attn_implementation(name)
    q = passes(next(model.parameters()).dtype)
    return {"attention": name, "decode_queries": [q.start, q.stop - 1]}


# KVState's empty cache; None: the model's own DynamicCache (register_cache).
_CACHE: Callable[[], Any] | None = None


def register_cache(factory: Callable[[], Any] | None) -> None:
    """Make ``factory()`` the empty KV cache every :class:`KVState` starts from (``None``: the
    model's own); both sides of every comparison use it."""
    global _CACHE
    _CACHE = factory


def new_cache() -> Any:
    """An empty KV cache: the registered one's, else ``None`` (the model makes its own)."""
    return _CACHE() if _CACHE is not None else None


class KVState:
    """A model and its KV cache, which covers the first ``length`` tokens of the sequence.

    ``forward(seq, n)`` runs the tokens of ``seq`` not yet cached and returns the logits of the last
    ``n`` positions; ``rollback(n)`` keeps the first ``n`` tokens. ``use_cache=False`` re-encodes
    the whole sequence each pass (the slow reference for tests).
    """

    def __init__(self, model: Any, use_cache: bool = True) -> None:
        self.model = model
        self.use_cache = use_cache
        self.cache: Any = new_cache() if use_cache else None
        self.length = 0

    def forward(self, seq: torch.Tensor, n_logits: int) -> torch.Tensor:
        if not self.use_cache:
            logits, _ = model_forward(self.model, seq, None, n_logits)
            return logits
        logits, self.cache = model_forward(self.model, seq[self.length :], self.cache, n_logits)
        self.length = seq.numel()
        return logits

    def rollback(self, n_valid: int) -> None:
        """Keep the first ``n_valid`` tokens of the sequence; later cache entries go."""
        if self.use_cache and self.cache is not None:
            held = self.cache.get_seq_length()  # the sequence, and any tree nodes after it
            if held > n_valid:
                self.cache.crop(n_valid - held)  # transformers 5: a negative count removes
        self.length = min(self.length, n_valid)


class PackedLinear(torch.nn.Linear):
    """A linear layer whose weight is also held prepacked once in oneDNN's blocked layout, so a pass
    over a few tokens streams the weights once instead of repacking them each call. Only the order
    of the sums changes: decoding with a packed model is exact with respect to it (the baseline runs
    the same packed model)."""

    def pack(self) -> PackedLinear:
        self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach())
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


def pack_linears(model: torch.nn.Module) -> int:
    """Turn every CPU float32/bfloat16 ``nn.Linear`` of ``model`` into a :class:`PackedLinear` in
    place; returns how many (0 where oneDNN cannot pack the dtype on this CPU)."""
    layers = [
        m
        for m in model.modules()
        if type(m) is torch.nn.Linear
        and m.weight.device.type == "cpu"
        and m.weight.dtype in (torch.float32, torch.bfloat16)
    ]
    if not layers or not torch.backends.mkldnn.is_available():
        return 0
    try:
        torch.ops.mkldnn._reorder_linear_weight(layers[0].weight.detach()[:1])
    except RuntimeError:  # no kernel for this dtype on this CPU
        return 0
    for m in layers:
        m.__class__ = PackedLinear
        m.pack()
    return len(layers)


def last_rows(n: int, length: int, device: torch.device | None = None) -> int | torch.Tensor:
    """``logits_to_keep`` for the last ``n`` of ``length`` positions: an index tensor, since an int
    slices a strided view that drops bfloat16 ``linear`` off its fast CPU kernel."""
    return n if n >= length else torch.arange(length - n, length, device=device)


def final_norm(model: Any) -> torch.nn.Module:
    """The final norm of a decoder-only LM (its input is the last hidden state)."""
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
    """Context manager yielding a list that gets, per pass inside it, the outputs of decoder
    ``layers`` (``-1``: the last, the final norm's input) concatenated on the last axis: one
    ``[B, n, len(layers) * H]`` tensor."""

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
    """Wait for the device's queued work (CUDA; a no-op on a CPU). Every timing goes through it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
