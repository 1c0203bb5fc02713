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
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

__all__ = [
    "CACHE_KW",
    "DECODE_ATTENTION",
    "DECODE_QUERIES",
    "KVState",
    "PackedLinear",
    "pack_linears",
    "cache_kwargs",
    "capture_features",
    "context_length",
    "decode_attention",
    "decode_queries",
    "final_norm",
    "last_rows",
    "model_device",
    "model_forward",
    "new_cache",
    "register_cache",
    "output_cache",
    "synchronize",
    "use_decode_attention",
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


# The passes (new tokens over the cached ones) that decode_attention computes itself, by dtype;
# the others go to sdpa. Timed side by side on a Zen 4 EPYC (the attention lever of
# research.levers, at commit 5a6d19a): in bfloat16 one query took 0.77-1.0 of sdpa's pass, more
# queries as long; in float32 two queries and more (under a mask sdpa copies the keys and values
# once per query head) 0.83-0.97, one query as long.
DECODE_ATTENTION = "specdec_decode"
DECODE_QUERIES: dict[torch.dtype, range] = {torch.float32: range(2, 17)}


def decode_queries(dtype: torch.dtype) -> range:
    """The pass lengths (new tokens) :func:`decode_attention` computes itself in ``dtype``
    (the others are sdpa's): ``DECODE_QUERIES``'s entry, else one token only."""
    return DECODE_QUERIES.get(dtype, range(1, 2))


def decode_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention as a transformers attention function (registered as ``DECODE_ATTENTION``), for
    decoding's passes on a CPU: a few new tokens (``query`` ``[B, H, n, D]``, ``n`` one of
    :func:`decode_queries` of its dtype) over the cache (``key``, ``value`` ``[B, H_kv, m, D]``),
    computed as two float32 products and a softmax, each group of query heads against its
    key-value head (no copies of the keys and values per head).

    PyTorch's fused CPU attention (``scaled_dot_product_attention``) is built for long queries:
    measured for one query, nine heads over three key-value heads and 64 dimensions in bfloat16
    on 2 cores, it took 38, 122 and 425 us over 70, 300 and 1000 keys, where these products took
    21, 33 and 77 us: at a 1000-token context, 10 of a one-token pass's 29 ms. Longer queries
    (a prompt's pass), a causal pass without a mask, other devices, dropout and training go to
    transformers' own ``sdpa`` attention, as do the masks (:func:`transformers.masking_utils.
    sdpa_mask`). Written by hand because neither PyTorch nor transformers has a short-query CPU
    kernel. Same maths as ``sdpa``, another rounding: both sides of a comparison run it. Masks
    (a left-padded batch's, a tree's) are honoured for any ``n``."""
    B, H, n, D = query.shape
    H_kv, m = key.shape[1], key.shape[-2]
    if (
        n not in decode_queries(query.dtype)
        or query.device.type != "cpu"
        or (attention_mask is None and n > 1)  # causal: sdpa's is_causal
        or dropout
        or module.training
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    g = H // H_kv  # query heads h * g .. h * g + g - 1 read key-value head h
    scores = torch.matmul(query.reshape(B, H_kv, g * n, D).float(), key.float().transpose(-1, -2))
    scores.mul_(D**-0.5 if scaling is None else scaling)
    if attention_mask is not None:  # [B or 1, 1, n, m]: bool (True: attend) or additive
        # A masked score is the lowest finite float, not -inf: its weight is still exactly 0
        # (exp underflows) where the row sees a key, and a row that sees none (a left-padded
        # batch's padding) averages its values instead of making NaN, which later rows would
        # read through their zero weights (0 * NaN); sdpa's own softmax makes such rows 0.
        lowest = torch.finfo(torch.float32).min
        mask = attention_mask.view(attention_mask.shape[0], 1, 1, n, m)
        scores = scores.view(B, H_kv, g, n, m)
        if mask.dtype == torch.bool:
            scores.masked_fill_(~mask, lowest)
        else:
            scores.add_(mask).clamp_(min=lowest)
        scores = scores.view(B, H_kv, g * n, m)
    out = torch.matmul(torch.softmax(scores, dim=-1), value.float())
    return out.to(query.dtype).view(B, H, n, D).transpose(1, 2).contiguous(), None


AttentionInterface.register(DECODE_ATTENTION, decode_attention)
AttentionMaskInterface.register(DECODE_ATTENTION, sdpa_mask)


def use_decode_attention(model: torch.nn.Module, on: bool = True) -> int:
    """Run :func:`decode_attention` (``on``; else transformers' ``sdpa``) in every transformers
    model within ``model`` (itself, or the Llama stack of a draft head); returns how many."""
    n = 0
    for sub in model.modules():
        if hasattr(sub, "set_attn_implementation") and hasattr(sub, "config"):
            sub.set_attn_implementation(DECODE_ATTENTION if on else "sdpa")
            n += 1
    return n


# How KVState holds a model's KV cache: as the model makes it (transformers' DynamicCache, at its
# first pass), unless a backend registered a cache with the same contents that costs less
# (register_cache; specdec_lib.research.speed registers its buffers, which a pass writes into).
_CACHE: Callable[[], Any] | None = None


def register_cache(factory: Callable[[], Any] | None) -> None:
    """Make ``factory()`` the empty KV cache every :class:`KVState` starts from (``None``: the
    model's own). Both sides of every comparison read it."""
    global _CACHE
    _CACHE = factory


def new_cache() -> Any:
    """An empty KV cache for :class:`KVState`: the registered one's, else ``None`` (the model then
    makes its own ``DynamicCache`` at its first pass)."""
    return _CACHE() if _CACHE is not None else None


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
        """Only the first ``n_valid`` tokens of the sequence stay: later cache entries go."""
        if self.use_cache and self.cache is not None:
            held = self.cache.get_seq_length()  # the sequence, and any tree nodes after it
            if held > n_valid:
                self.cache.crop(n_valid - held)  # transformers 5: a negative count removes
        self.length = min(self.length, n_valid)


class PackedLinear(torch.nn.Linear):
    """A linear layer whose weight is also held prepacked, once, in oneDNN's blocked layout
    (``torch.ops.mkldnn``, the library behind PyTorch's CPU convolutions and inductor's fused
    linear layers): a pass over a few tokens then streams the weights once instead of a general
    matrix product repacking them on every call.

    Measured on an AMD EPYC (Zen 4, 2 cores, the 135M target): in float32 a pass over 8 tokens
    about 1.0-1.3 x a one-token pass with oneDNN's product, against 1.5 x with the loaded
    kernels (MKL's, whose packed product was no faster there), and the one-token pass itself
    faster; in bfloat16 oneDNN's product is the one that keeps the bandwidth bound (where the CPU
    has AVX512-BW or AVX-NE-CONVERT). Same maths, another order of the sums: a packed model is
    another floating-point rounding of the same model, and decoding with it is exact with
    respect to it (the autoregressive baseline runs the same packed model)."""

    def pack(self) -> PackedLinear:
        self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach())
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


def pack_linears(model: torch.nn.Module) -> int:
    """Turn every ``nn.Linear`` of ``model`` (on a CPU, in float32 or bfloat16) into a
    :class:`PackedLinear`, in place; returns how many. Where oneDNN cannot pack the dtype on this
    CPU (no oneDNN; bfloat16 without AVX512-BW or AVX-NE-CONVERT) nothing changes and 0 is
    returned."""
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
