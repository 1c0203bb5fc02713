"""A feature-level draft head (in the spirit of EAGLE, Li et al. 2024, arXiv 2401.15077).

The target's last hidden state ``h_j`` (the input of its final norm) already summarises the
context up to token ``x_j``: the target's own head turns it into ``p_j``, the law of ``x_{j+1}``. A
draft that reads ``h_{j-1}`` and the token ``x_j`` has to guess only what one more token changes::

    g_j  = fc([h_{j-1}; E x_j])                   E: the target's (frozen) embedding
    ĥ_j  = decoder layer(g_1..g_j)                 one Llama layer, causal, with its own KV cache
    q_j  = softmax_S(W_S norm(ĥ_j) / T)            the target's final norm and output rows, frozen,
                                                   restricted to a token subset S (|S| = 8192)

``q_j`` is the draft's law of ``x_{j+1}``; it is zero outside ``S``, which keeps speculative
sampling exact (a token the draft never proposes is still emitted, through the residual) and makes
the head cheap. To draft several tokens the head feeds its own ``ĥ`` back in place of the
target's ``h``.

Only ``fc``, the layer and the subset are stored (a few MB); the embedding, norm and output rows are
taken from the target at load time. :class:`~specdec_lib.drafters.feature.FeatureDrafter` plugs
the head into :class:`~specdec_lib.decoding.SpeculativeDecoder`; :class:`LayerDraft` is a small
causal LM over the target's vocabulary, driven like any draft model. Trained offline by
:mod:`specdec_lib.training` (notebook 05).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from ..checks import positive_int
from ..lm import cache_kwargs, final_norm, output_cache
from ..results import atomic_write
from .int8 import Int8Linear

__all__ = ["FeatureHead", "LayerDraft", "load_head", "rms_normalise", "save_head"]


def _llama_body(target: Any, init_layers: list[int] | None, n_layers: int) -> nn.Module:
    """A Llama stack shaped like the target's layers, without embedding or final norm (it reads
    ``inputs_embeds`` and returns pre-norm features). ``init_layers`` copies those target layers
    (one per layer); ``None`` initialises at random."""
    from transformers import LlamaConfig, LlamaModel

    tcfg = target.config
    H = tcfg.hidden_size
    cfg = LlamaConfig(
        vocab_size=1,  # never used: the body reads inputs_embeds
        hidden_size=H,
        intermediate_size=tcfg.intermediate_size,
        num_hidden_layers=n_layers,
        num_attention_heads=tcfg.num_attention_heads,
        num_key_value_heads=tcfg.num_key_value_heads,
        max_position_embeddings=tcfg.max_position_embeddings,
        rms_norm_eps=tcfg.rms_norm_eps,
        rope_parameters=getattr(tcfg, "rope_parameters", None),
        attention_bias=getattr(tcfg, "attention_bias", False),
        mlp_bias=getattr(tcfg, "mlp_bias", False),
        head_dim=getattr(tcfg, "head_dim", H // tcfg.num_attention_heads),
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    body = LlamaModel(cfg).to(next(target.parameters()).dtype)
    body.embed_tokens = None
    body.norm = nn.Identity()
    if init_layers is not None:
        src = target.get_decoder().layers
        for layer, i in zip(body.layers, init_layers, strict=True):
            layer.load_state_dict(copy.deepcopy(src[i].state_dict()))
    return body


class _SubsetOutput(nn.Module):
    """The frozen pieces borrowed from the target: embedding, final norm, and the output rows of
    ``subset`` (the tokens the draft can propose), held as a linear layer (``output``) so that
    a packing of the draft's layers packs it too (:meth:`frozen_linears`). They are plain
    attributes, not submodules, so they are never saved with the draft."""

    def _init_subset(self, target: Any, subset: Any) -> None:
        subset = torch.as_tensor(subset, dtype=torch.long).flatten().unique()
        vocab = target.config.vocab_size
        if subset.numel() < 1 or int(subset.min()) < 0 or int(subset.max()) >= vocab:
            raise ValueError(f"subset must hold token ids in [0, {vocab})")
        self.register_buffer("subset", subset, persistent=True)
        self._target = [target]  # a list: not a submodule
        self.refresh_frozen()

    @property
    def target(self) -> Any:
        return self._target[0]

    def refresh_frozen(self) -> None:
        """Re-read the frozen pieces (embedding, norm, the subset's output rows) from the target;
        a draft in another dtype than the target's gets the norm and the output rows in its own
        (the embedding's rows are cast as they are read)."""
        t = self.target
        w = t.get_output_embeddings().weight
        dtype = next(self.parameters()).dtype
        norm = final_norm(t)
        if next(norm.parameters()).dtype != dtype:
            norm = copy.deepcopy(norm).to(dtype).requires_grad_(False)
        w_subset = w.detach().index_select(0, self.subset.to(w.device)).to(dtype)
        # object.__setattr__: the target's modules must not become (saved) submodules of the head.
        object.__setattr__(self, "_embed", t.get_input_embeddings())
        object.__setattr__(self, "_norm", norm)
        int8 = isinstance(getattr(self, "output", None), Int8Linear)
        self._hold_output(w_subset)
        if int8:  # an int8 draft's output rows stay int8 (specdec_lib.drafters.int8)
            object.__setattr__(self, "output", Int8Linear(self.output))

    def _hold_output(self, w_subset: torch.Tensor) -> None:
        """Hold the subset's output rows, and a bias-free linear layer over them (``output``)."""
        output = nn.Linear(w_subset.shape[1], w_subset.shape[0], bias=False, device="meta")
        output.weight = nn.Parameter(w_subset, requires_grad=False)
        object.__setattr__(self, "_w_subset", w_subset)
        object.__setattr__(self, "output", output)

    def frozen_linears(self) -> tuple[nn.Module, ...]:
        """The linear layers among the frozen pieces (the subset's output rows), which
        :func:`specdec_lib.models.load_pair` packs with the draft's own."""
        return (self.output,)

    def frozen_float32(self) -> None:
        """Use float32 copies of the frozen pieces (training in float32 over a bf16 target)."""
        embed = copy.deepcopy(self._embed).float().requires_grad_(False)
        norm = copy.deepcopy(self._norm).float().requires_grad_(False)
        object.__setattr__(self, "_embed", embed)
        object.__setattr__(self, "_norm", norm)
        self._hold_output(self._w_subset.float())

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the subset, ``[..., |S|]``."""
        return self.output(self._norm(hidden.to(self._w_subset.dtype)))


def rms_normalise(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / RMS(x)`` over the last axis (computed in float32)."""
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class FeatureHead(_SubsetOutput):
    """``fc`` + ``n_layers`` Llama decoder layers over (target feature, next token) pairs.

    ``target`` lends the frozen pieces (never saved with the head); ``subset`` holds the token ids
    the head can propose. ``init_layer`` copies that target layer as the starting point (``None``:
    random initialisation).
    """

    def __init__(
        self,
        target: Any,
        subset: torch.Tensor,
        *,
        n_layers: int = 1,
        init_layer: int | None = -1,
        feature_layers: tuple[int, ...] = (-1,),
        scale: float = 1.0,
    ) -> None:
        super().__init__()
        tcfg = target.config
        positive_int(n_layers, "n_layers", "decoder layers of the head")
        H = tcfg.hidden_size
        feature_layers = tuple(int(i) for i in feature_layers)
        n_t = tcfg.num_hidden_layers
        if not feature_layers or any(not -n_t <= i < n_t for i in feature_layers):
            raise ValueError(f"feature_layers must be target layers in [-{n_t}, {n_t})")
        self.feature_layers = feature_layers
        self.config_dict = {
            "arch": "feature",
            "n_layers": n_layers,
            "init_layer": init_layer,
            "feature_layers": list(feature_layers),
            "scale": float(scale),
        }
        dtype = next(target.parameters()).dtype
        nF = len(feature_layers)
        # Several target layers (EAGLE-3's low/mid/high features) are fused into one H-vector;
        # the fusion starts as "take the last listed layer".
        self.fuse = nn.Linear(nF * H, H, bias=False, dtype=dtype) if nF > 1 else None
        if self.fuse is not None:
            with torch.no_grad():
                self.fuse.weight.zero_()
                self.fuse.weight[:, (nF - 1) * H :].copy_(torch.eye(H))
        # Both inputs are RMS-normalised (learnable gains) and brought to `scale`, the typical RMS
        # of the target's last hidden state: the target's residual stream carries a few huge
        # dimensions (RMS ~100s) next to embeddings of RMS ~1, and the copied target layer
        # expects inputs at the residual stream's scale.
        self.w_in = nn.Parameter(torch.ones(nF, H, dtype=dtype))
        self.w_emb = nn.Parameter(torch.ones(H, dtype=dtype))
        self.register_buffer("scale", torch.tensor(float(scale), dtype=torch.float32))
        self.fc = nn.Linear(2 * H, H, bias=False, dtype=dtype)
        with torch.no_grad():  # start as "the target's feature plus the token's embedding"
            self.fc.weight.copy_(torch.eye(H).repeat(1, 2))
        # The head outputs pre-norm features, like the target's last layer.
        self.body = _llama_body(
            target, [init_layer] * n_layers if init_layer is not None else None, n_layers
        )
        self._init_subset(target, subset)

    def forward(
        self,
        features: torch.Tensor,
        tokens: torch.Tensor,
        *,
        cache: Any = None,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """``features`` ``[B, n, F]`` (``h_{j-1}``: the target's, ``F = len(feature_layers) H``,
        or the head's own, ``F = H``), ``tokens`` ``[B, n]`` (``x_j``) -> ``ĥ_j`` ``[B, n, H]``
        and the updated cache. With a cache, ``attention_mask`` (additive, ``[1, 1, n, past + n]``)
        replaces the causal mask over the cached and new positions (the training-time test's
        unrolled steps, :func:`specdec_lib.training.distill.unrolled_mask`)."""
        H = self.fc.out_features
        features = features.to(self.w_in.dtype)  # a target in another dtype than the head's
        if features.shape[-1] != H:  # the target's features of several layers: fuse them
            blocks = rms_normalise(features.unflatten(-1, (-1, H))) * self.w_in
            x = self.fuse(blocks.flatten(-2))
        else:  # one layer's features (the target's last, or the head's own)
            x = rms_normalise(features) * self.w_in[-1]
        scale = self.scale.to(x.dtype)
        emb = rms_normalise(self._embed(tokens).to(x.dtype)) * self.w_emb
        g = self.fc(torch.cat([x * scale, emb * scale], dim=-1))
        if cache is None:  # training: whole sequences through the Llama stack
            return self.body(inputs_embeds=g, position_ids=position_ids).last_hidden_state, None
        return self._layers_with_cache(g, cache, position_ids, attention_mask), cache

    def _layers_with_cache(
        self,
        g: torch.Tensor,
        cache: Any,
        position_ids: torch.Tensor | None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The body's layers over ``n`` new positions after the cached ones, computed here.

        Drafting runs the head on one or a few positions per call. This writes each layer out
        from its own modules (norms, projections, activation) and the attention function its
        config names, and builds the causal mask itself (none for one position), without
        ``LlamaModel``'s wrapper (mask construction, output capture) and transformers' decoder
        layer (keyword handling, the attention interface's lookup): about a tenth less time a
        call in a profile on an AMD EPYC (Zen 4, 2 cores), where the rest is the operations
        themselves. Tested equal, bit for bit, to transformers' layers."""
        n, past = g.shape[1], cache.get_seq_length()
        if position_ids is None:
            position_ids = torch.arange(past, past + n, device=g.device).unsqueeze(0)
        if mask is None and n > 1:  # new position i (absolute past + i) sees keys 0 .. past + i
            keys = torch.arange(past + n, device=g.device)
            allowed = keys.view(1, -1) <= (keys[past:].view(-1, 1))
            mask = torch.zeros(allowed.shape, dtype=g.dtype, device=g.device)
            mask = mask.masked_fill_(~allowed, float("-inf")).view(1, 1, n, past + n)
        cos, sin = self.body.rotary_emb(g, position_ids=position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        h = g
        for i, layer in enumerate(self.body.layers):
            h = h + self._attention(
                layer.self_attn, layer.input_layernorm(h), cos, sin, cache, i, mask
            )
            mlp = layer.mlp
            x = layer.post_attention_layernorm(h)
            h = h + mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))
        # A cache the layers did not write (a transformers release whose cache API moved) would
        # leave a draft that attends to nothing before the new positions, and a draft step that
        # looks cheap. The cache's length is the one sign of it.
        if cache.get_seq_length() != past + n:
            raise RuntimeError(
                f"the head's decoder layers did not write their KV cache (it holds "
                f"{cache.get_seq_length()} positions, expected {past + n})"
            )
        return h

    @staticmethod
    def _attention(
        attn: nn.Module,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: Any,
        i: int,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """A Llama attention block over ``x`` ``[1, n, H]``: its projections, rotary positions
        (``cos``, ``sin`` ``[1, 1, n, D]``), the keys and values appended to layer ``i`` of
        ``cache``, and the attention function the layer's config names (:mod:`specdec_lib.lm`'s
        decoding attention on a CPU), as transformers' ``LlamaAttention`` computes them."""
        shape = (*x.shape[:-1], -1, attn.head_dim)
        q = attn.q_proj(x).view(shape).transpose(1, 2)
        k = attn.k_proj(x).view(shape).transpose(1, 2)
        v = attn.v_proj(x).view(shape).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k, v = cache.update(k, v, i)
        attend = ALL_ATTENTION_FUNCTIONS.get_interface(
            attn.config._attn_implementation, sdpa_attention_forward
        )
        out, _ = attend(attn, q, k, v, mask, dropout=0.0, scaling=attn.scaling)
        return attn.o_proj(out.reshape(*x.shape[:-1], -1))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Rotary embedding's rotation of each head's halves, ``(x1, x2) -> (-x2, x1)``."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LayerDraft(_SubsetOutput):
    """A small causal LM over the target's vocabulary: the target's frozen embedding, ``n_layers``
    Llama layers (copied from the target's ``init_layers``, or random: a standalone draft), and
    the target's frozen final norm and output rows restricted to ``subset``.

    It behaves as a transformers causal LM (``model(input_ids=..., use_cache=...,
    logits_to_keep=..., **lm.cache_kwargs(cache))`` returns ``.logits`` over the full vocabulary,
    ``-inf`` outside the subset, and the cache as :func:`~specdec_lib.lm.output_cache` reads it),
    so :class:`~specdec_lib.drafters.ModelDrafter` drives it as it drives any draft model. The
    cache is taken and returned under both names, ``cache`` and ``past_key_values``, whatever the
    installed transformers calls it.
    """

    def __init__(
        self,
        target: Any,
        subset: torch.Tensor,
        *,
        init_layers: tuple[int, ...] | None = (0, -1),
        n_layers: int | None = None,
    ) -> None:
        super().__init__()
        tcfg = target.config
        if init_layers is not None:
            init_layers = tuple(int(i) for i in init_layers)
            n_t = tcfg.num_hidden_layers
            if not init_layers or any(not -n_t <= i < n_t for i in init_layers):
                raise ValueError(f"init_layers must be target layers in [-{n_t}, {n_t})")
            n_layers = len(init_layers)
        positive_int(n_layers, "n_layers", "or give init_layers")
        self.config = copy.deepcopy(tcfg)  # the decoder checks the vocabulary through .config
        self.config_dict = {
            "arch": "layers",
            "n_layers": n_layers,
            "init_layers": list(init_layers) if init_layers is not None else None,
        }
        self.body = _llama_body(target, list(init_layers) if init_layers else None, n_layers)
        self._init_subset(target, subset)

    def hidden(self, input_ids: torch.Tensor, cache: Any = None, use_cache: bool = False):
        """The pre-norm features of ``input_ids`` ``[B, n]`` and, with ``use_cache``, the cache."""
        out = self.body(
            inputs_embeds=self._embed(input_ids), use_cache=use_cache, **cache_kwargs(cache)
        )
        return out.last_hidden_state, output_cache(out) if use_cache else None

    def forward(
        self,
        input_ids: torch.Tensor,
        cache: Any = None,
        use_cache: bool = False,
        logits_to_keep: int | torch.Tensor = 0,
        *,
        past_key_values: Any = None,
        attention_mask: torch.Tensor | None = None,
    ):
        """Logits over the full vocabulary (``-inf`` outside the subset) and the cache.

        The cache comes as ``cache`` or ``past_key_values`` (the two names transformers has used),
        never both. No catch-all keyword: an argument this draft does not use is an error, not a
        silently dropped cache. ``attention_mask`` may only be all ones (no padding)."""
        from types import SimpleNamespace

        if cache is not None and past_key_values is not None:
            raise ValueError("pass the cache as cache or as past_key_values, not both")
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError("LayerDraft takes no padding: attention_mask must be all ones")
        cache = cache if cache is not None else past_key_values
        h, cache = self.hidden(input_ids, cache, use_cache)
        if isinstance(logits_to_keep, torch.Tensor):  # positions, as lm.last_rows gives them
            h = h[:, logits_to_keep]
        elif logits_to_keep:
            h = h[:, -logits_to_keep:]
        sub = self.logits(h)
        full = sub.new_full((*sub.shape[:-1], self.config.vocab_size), float("-inf"))
        full[..., self.subset] = sub
        return SimpleNamespace(logits=full, cache=cache, past_key_values=cache)


def save_head(head: nn.Module, path: str | Path, card: dict[str, Any]) -> None:
    """Save a draft's own weights (safetensors, atomically) and its settings; ``card`` goes into
    the metadata. The frozen pieces of the target are not saved."""
    from safetensors.torch import save

    state = {k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}
    meta = {"config": json.dumps(head.config_dict), "card": json.dumps(card)}
    data = save(state, metadata=meta)
    atomic_write(path, lambda f: f.write(data), binary=True)  # a unique temporary name


def load_head(path: str | Path, target: Any, dtype: torch.dtype | None = None) -> nn.Module:
    """Load a draft saved by :func:`save_head` onto ``target`` (its device; ``dtype``, default the
    target's): a :class:`FeatureHead` or a :class:`LayerDraft` (in the target's dtype only)."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no drafter weights at {str(path)!r}")
    with safe_open(str(path), "pt") as f:
        meta = f.metadata() or {}
        state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no items()
    cfg = json.loads(meta.get("config", "{}"))
    if cfg.get("arch") == "layers":
        head: nn.Module = LayerDraft(
            target, state["subset"], init_layers=None, n_layers=cfg["n_layers"]
        )
        head.config_dict["init_layers"] = cfg.get("init_layers")
    else:
        head = FeatureHead(
            target,
            state["subset"],
            n_layers=cfg.get("n_layers", 1),
            init_layer=None,
            feature_layers=tuple(cfg.get("feature_layers", (-1,))),
            scale=cfg.get("scale", 1.0),
        )
    own = next(target.parameters()).dtype
    if dtype is None or dtype == own:
        dtype = own
    elif isinstance(head, FeatureHead):  # the head in its own dtype; the frozen pieces follow
        head.to(dtype)
    else:
        raise ValueError(f"dtype: a {type(head).__name__} runs in its target's dtype ({own})")
    head.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()})
    head.to(next(target.parameters()).device)
    head.refresh_frozen()
    head.eval()
    head.requires_grad_(False)
    return head
