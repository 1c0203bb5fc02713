"""Drafts over a token subset of the target's vocabulary: :class:`FeatureHead` (after EAGLE,
arXiv 2401.15077) and :class:`LayerDraft`, a small causal LM. Only the draft's own weights are
stored; the embedding, final norm and output rows are borrowed from the target at load time."""

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
    """A Llama stack like the target's, reading ``inputs_embeds`` and returning pre-norm features;
    ``init_layers`` lists the target layers to copy (``None``: random)."""
    from transformers import LlamaConfig, LlamaModel

    tcfg = target.config
    H = tcfg.hidden_size
    cfg = LlamaConfig(
        vocab_size=1,  # unused
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
    """The frozen pieces borrowed from the target: embedding, final norm and the output rows of
    ``subset`` (as linear layer ``output``). Plain attributes, not submodules: never saved."""

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
        """Re-read the frozen pieces from the target, norm and output rows in the draft's dtype."""
        t = self.target
        w = t.get_output_embeddings().weight
        dtype = next(self.parameters()).dtype
        norm = final_norm(t)
        if next(norm.parameters()).dtype != dtype:
            norm = copy.deepcopy(norm).to(dtype).requires_grad_(False)
        w_subset = w.detach().index_select(0, self.subset.to(w.device)).to(dtype)
        # object.__setattr__: not submodules, so never saved.
        object.__setattr__(self, "_embed", t.get_input_embeddings())
        object.__setattr__(self, "_norm", norm)
        int8 = isinstance(getattr(self, "output", None), Int8Linear)
        self._hold_output(w_subset)
        if int8:  # an int8 draft's output rows stay int8
            object.__setattr__(self, "output", Int8Linear(self.output))

    def _hold_output(self, w_subset: torch.Tensor) -> None:
        """Hold the subset's output rows, and a bias-free linear layer over them (``output``)."""
        output = nn.Linear(w_subset.shape[1], w_subset.shape[0], bias=False, device="meta")
        output.weight = nn.Parameter(w_subset, requires_grad=False)
        object.__setattr__(self, "_w_subset", w_subset)
        object.__setattr__(self, "output", output)

    def frozen_linears(self) -> tuple[nn.Module, ...]:
        """The frozen linear layers, which :func:`specdec_lib.models.load_pair` packs too."""
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
    """``g_j = fc([h_{j-1}; E x_j])``, ``ĥ_j = layers(g_1..g_j)``, ``q_j = softmax_S(W_S norm ĥ_j)``
    is the draft's law of ``x_{j+1}`` given the target's feature ``h_{j-1}`` and token ``x_j``, zero
    outside ``subset`` (sampling stays exact through the residual). Drafting further steps feeds
    ``ĥ`` back as ``h``. ``init_layer`` copies that target layer (``None``: random).
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
        # Several target layers' features fuse into one H-vector; starts as "the last layer".
        self.fuse = nn.Linear(nF * H, H, bias=False, dtype=dtype) if nF > 1 else None
        if self.fuse is not None:
            with torch.no_grad():
                self.fuse.weight.zero_()
                self.fuse.weight[:, (nF - 1) * H :].copy_(torch.eye(H))
        # Both inputs are RMS-normalised (learnable gains) and brought to `scale`, the residual
        # stream's typical RMS, which the copied target layer expects.
        self.w_in = nn.Parameter(torch.ones(nF, H, dtype=dtype))
        self.w_emb = nn.Parameter(torch.ones(H, dtype=dtype))
        self.register_buffer("scale", torch.tensor(float(scale), dtype=torch.float32))
        self.fc = nn.Linear(2 * H, H, bias=False, dtype=dtype)
        with torch.no_grad():  # start as "feature + embedding"
            self.fc.weight.copy_(torch.eye(H).repeat(1, 2))
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
        """``features`` ``[B, n, F]`` (the target's, ``F = len(feature_layers) H``, or the head's,
        ``F = H``), ``tokens`` ``[B, n]`` -> ``ĥ`` ``[B, n, H]`` and the cache. With a cache, an
        additive ``attention_mask`` ``[1, 1, n, past + n]`` replaces the causal mask."""
        H = self.fc.out_features
        features = features.to(self.w_in.dtype)
        if features.shape[-1] != H:  # several target layers: fuse
            blocks = rms_normalise(features.unflatten(-1, (-1, H))) * self.w_in
            x = self.fuse(blocks.flatten(-2))
        else:
            x = rms_normalise(features) * self.w_in[-1]
        scale = self.scale.to(x.dtype)
        emb = rms_normalise(self._embed(tokens).to(x.dtype)) * self.w_emb
        g = self.fc(torch.cat([x * scale, emb * scale], dim=-1))
        if cache is None:  # training: whole sequences
            return self.body(inputs_embeds=g, position_ids=position_ids).last_hidden_state, None
        return self._layers_with_cache(g, cache, position_ids, attention_mask), cache

    def _layers_with_cache(
        self,
        g: torch.Tensor,
        cache: Any,
        position_ids: torch.Tensor | None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The body's layers over ``n`` new positions after the cached ones, written out without
        ``LlamaModel``'s wrappers (cheaper per drafting call); bit-equal to transformers' layers.
        Raises ``RuntimeError`` if the layers did not write ``cache``."""
        n, past = g.shape[1], cache.get_seq_length()
        if position_ids is None:
            position_ids = torch.arange(past, past + n, device=g.device).unsqueeze(0)
        if mask is None and n > 1:  # new position i sees keys 0 .. past + i
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
        # An unwritten cache (a moved transformers cache API) would silently attend to nothing.
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
        """``LlamaAttention`` over ``x`` ``[1, n, H]``, rotary ``cos``, ``sin`` ``[1, 1, n, D]``,
        appending keys and values to layer ``i`` of ``cache``."""
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
    """A small causal LM: the target's frozen embedding, ``n_layers`` Llama layers (copies of
    ``init_layers``, or random) and the frozen norm and output rows of ``subset``. Called like a
    transformers causal LM, so :class:`~specdec_lib.drafters.ModelDrafter` drives it.
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
        self.config = copy.deepcopy(tcfg)  # the decoder reads the vocabulary here
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
        """Logits over the full vocabulary (``-inf`` outside the subset) and the cache, taken as
        ``cache`` or ``past_key_values`` (not both) and returned under both names. Raises
        ``ValueError`` on both caches or on padding in ``attention_mask``."""
        from types import SimpleNamespace

        if cache is not None and past_key_values is not None:
            raise ValueError("pass the cache as cache or as past_key_values, not both")
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError("LayerDraft takes no padding: attention_mask must be all ones")
        cache = cache if cache is not None else past_key_values
        h, cache = self.hidden(input_ids, cache, use_cache)
        if isinstance(logits_to_keep, torch.Tensor):  # positions
            h = h[:, logits_to_keep]
        elif logits_to_keep:
            h = h[:, -logits_to_keep:]
        sub = self.logits(h)
        full = sub.new_full((*sub.shape[:-1], self.config.vocab_size), float("-inf"))
        full[..., self.subset] = sub
        return SimpleNamespace(logits=full, cache=cache, past_key_values=cache)


def save_head(head: nn.Module, path: str | Path, card: dict[str, Any]) -> None:
    """Save a draft's own weights and settings (``card`` in the metadata) atomically."""
    from safetensors.torch import save

    state = {k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}
    meta = {"config": json.dumps(head.config_dict), "card": json.dumps(card)}
    data = save(state, metadata=meta)
    atomic_write(path, lambda f: f.write(data), binary=True)


def load_head(path: str | Path, target: Any, dtype: torch.dtype | None = None) -> nn.Module:
    """Load a :func:`save_head` draft onto ``target``'s device, in ``dtype`` (default the
    target's; a :class:`LayerDraft` only in that). Raises ``ValueError``."""
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
    elif isinstance(head, FeatureHead):
        head.to(dtype)
    else:
        raise ValueError(f"dtype: a {type(head).__name__} runs in its target's dtype ({own})")
    head.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()})
    head.to(next(target.parameters()).device)
    head.refresh_frozen()
    head.eval()
    head.requires_grad_(False)
    return head
