"""A feature-level draft head (in the spirit of EAGLE, Li et al. 2024, arXiv 2401.15077).

The target's last hidden state ``h_j`` (the input of its final norm) already summarises the context
up to token ``x_j``: the target's own head turns it into ``p_j``, the law of ``x_{j+1}``. A draft that
reads ``h_{j-1}`` and the token ``x_j`` has to guess only what one more token changes::

    g_j  = fc([h_{j-1}; E x_j])                   E: the target's (frozen) embedding
    ĥ_j  = decoder layer(g_1..g_j)                 one Llama layer, causal, with its own KV cache
    q_j  = softmax_S(W_S norm(ĥ_j) / T)            the target's final norm and output rows, frozen,
                                                   restricted to a token subset S (|S| = 8192)

``q_j`` is the draft's law of ``x_{j+1}``; it is zero outside ``S``, which keeps speculative sampling
exact (a token the draft never proposes is still emitted, through the residual) and makes the head
cheap. To draft several tokens the head feeds its own ``ĥ`` back in place of the target's ``h``.

Only ``fc``, the layer and the subset are stored (a few MB); the embedding, norm and output rows are
taken from the target at load time. :class:`FeatureDrafter` plugs the head into
:class:`~specdec_lib.decoding.SpeculativeDecoder` through the ``wants_target_features`` protocol.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .decoding import final_norm
from .sampling import Warp, sample

__all__ = [
    "FeatureDrafter",
    "FeatureHead",
    "LayerDraft",
    "as_drafter",
    "load_head",
    "quantize_int8",
    "read_card",
    "save_head",
]


def _decoder_layers(model: Any) -> nn.ModuleList:
    return model.get_decoder().layers


def _check_subset(subset: Any, vocab: int) -> torch.Tensor:
    subset = torch.as_tensor(subset, dtype=torch.long).flatten().unique()
    if subset.numel() < 1 or int(subset.min()) < 0 or int(subset.max()) >= vocab:
        raise ValueError(f"subset must hold token ids in [0, {vocab})")
    return subset


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
        src = _decoder_layers(target)
        for layer, i in zip(body.layers, init_layers, strict=True):
            layer.load_state_dict(copy.deepcopy(src[i].state_dict()))
    return body


class _SubsetOutput(nn.Module):
    """The frozen pieces borrowed from the target: embedding, final norm, and the output rows of
    ``subset`` (the tokens the draft can propose). They are plain attributes, not submodules, so
    they are never saved with the draft."""

    def _init_subset(self, target: Any, subset: torch.Tensor) -> None:
        self.register_buffer("subset", subset, persistent=True)
        self._target = [target]  # a list: not a submodule
        self.refresh_frozen()

    @property
    def target(self) -> Any:
        return self._target[0]

    def refresh_frozen(self) -> None:
        """Re-read the frozen pieces (embedding, norm, output rows of the subset) from the target."""
        t = self.target
        w = t.get_output_embeddings().weight
        # object.__setattr__: the target's modules must not become (saved) submodules of the head.
        object.__setattr__(self, "_embed", t.get_input_embeddings())
        object.__setattr__(self, "_norm", final_norm(t))
        object.__setattr__(self, "_w_subset", w.detach().index_select(0, self.subset.to(w.device)))

    def frozen_float32(self) -> None:
        """Use float32 copies of the frozen pieces (training in float32 over a bf16 target)."""
        embed = copy.deepcopy(self._embed).float().requires_grad_(False)
        norm = copy.deepcopy(self._norm).float().requires_grad_(False)
        object.__setattr__(self, "_embed", embed)
        object.__setattr__(self, "_norm", norm)
        object.__setattr__(self, "_w_subset", self._w_subset.float())

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the subset, ``[..., |S|]``."""
        x = self._norm(hidden.to(self._w_subset.dtype))
        q8 = getattr(self, "_w8_subset", None)
        return x @ self._w_subset.T if q8 is None else _int8_mm(x, *q8)


def rms_normalise(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / RMS(x)`` over the last axis (computed in float32)."""
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class FeatureHead(_SubsetOutput):
    """``fc`` + ``n_layers`` Llama decoder layers over (target feature, next token) pairs.

    ``target`` supplies the frozen embedding, final norm and output head (not registered as
    submodules: they are not saved with the head). ``subset`` holds the token ids the head can
    propose (sorted). ``init_layer`` copies that target layer as the starting point (``None``: the
    layer is initialised at random).
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
        if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
            raise ValueError(f"n_layers must be a positive integer, got {n_layers!r}")
        subset = _check_subset(subset, tcfg.vocab_size)
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
            self.fc.weight.zero_()
            self.fc.weight[:, :H].copy_(torch.eye(H))
            self.fc.weight[:, H:].copy_(torch.eye(H))
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
    ) -> tuple[torch.Tensor, Any]:
        """``features`` ``[B, n, F]`` (``h_{j-1}``: the target's, ``F = len(feature_layers) H``,
        or the head's own, ``F = H``), ``tokens`` ``[B, n]`` (``x_j``) -> ``ĥ_j`` ``[B, n, H]``
        and the updated cache."""
        H = self.fc.out_features
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
        return self._layers_with_cache(g, cache, position_ids), cache

    def _layers_with_cache(
        self, g: torch.Tensor, cache: Any, position_ids: torch.Tensor | None
    ) -> torch.Tensor:
        """The body's layers called directly over ``n`` new positions after the cached ones.

        Drafting runs the head on one or a few positions per call, where ``LlamaModel``'s own
        wrapper (mask construction, output capture) costs about as much as the layer; this builds
        the causal mask itself (none for one position) and is tested equal to the wrapper."""
        n, past = g.shape[1], cache.get_seq_length()
        if position_ids is None:
            position_ids = torch.arange(past, past + n, device=g.device).unsqueeze(0)
        mask = None
        if n > 1:  # new position i (absolute past + i) sees keys 0 .. past + i
            keys = torch.arange(past + n, device=g.device)
            allowed = keys.view(1, -1) <= (keys[past:].view(-1, 1))
            mask = torch.zeros(allowed.shape, dtype=g.dtype, device=g.device)
            mask = mask.masked_fill_(~allowed, float("-inf")).view(1, 1, n, past + n)
        position_embeddings = self.body.rotary_emb(g, position_ids=position_ids)
        h = g
        for layer in self.body.layers:
            h = layer(
                h,
                attention_mask=mask,
                position_ids=position_ids,
                cache=cache,
                use_cache=True,
                position_embeddings=position_embeddings,
            )
        return h


class LayerDraft(_SubsetOutput):
    """A small causal LM over the target's vocabulary: the target's frozen embedding, ``n_layers``
    Llama layers (copied from the target's ``init_layers``, or random: a standalone draft), and
    the target's frozen final norm and output rows restricted to ``subset``.

    It behaves as a transformers causal LM (``model(input_ids=..., cache=..., use_cache=...,
    logits_to_keep=...)`` returns ``.logits`` over the full vocabulary, ``-inf`` outside the
    subset, and ``.cache``), so :class:`~specdec_lib.decoding.ModelDrafter` drives it as it
    drives any draft model.
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
        if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
            raise ValueError(
                f"n_layers must be a positive integer (or give init_layers), got {n_layers!r}"
            )
        self.config = copy.deepcopy(tcfg)  # the decoder checks the vocabulary through .config
        self.config_dict = {
            "arch": "layers",
            "n_layers": n_layers,
            "init_layers": list(init_layers) if init_layers is not None else None,
        }
        self.body = _llama_body(target, list(init_layers) if init_layers else None, n_layers)
        self._init_subset(target, _check_subset(subset, tcfg.vocab_size))

    def hidden(self, input_ids: torch.Tensor, cache: Any = None, use_cache: bool = False):
        out = self.body(inputs_embeds=self._embed(input_ids), cache=cache, use_cache=use_cache)
        return out.last_hidden_state, out.cache if use_cache else None

    def forward(self, input_ids=None, cache=None, use_cache=False, logits_to_keep=0, **_):
        from types import SimpleNamespace

        h, cache = self.hidden(input_ids, cache, use_cache)
        if logits_to_keep:
            h = h[:, -logits_to_keep:]
        sub = self.logits(h)
        full = sub.new_full((*sub.shape[:-1], self.config.vocab_size), float("-inf"))
        full[..., self.subset] = sub
        return SimpleNamespace(logits=full, cache=cache)


# --------------------------------------------------------------------------------------------
# int8 weights (inference only)
# --------------------------------------------------------------------------------------------


def _int8_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per output row: ``weight ~= w8 * scale[:, None]``."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127
    w8 = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return w8.contiguous(), scale.to(torch.bfloat16)


def _int8_mm(x: torch.Tensor, w8: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    shape = x.shape
    y = torch._weight_int8pack_mm(x.reshape(-1, shape[-1]).contiguous(), w8, scale)
    return y.view(*shape[:-1], w8.shape[0])


class Int8Linear(nn.Module):
    """A bias-free linear layer with int8 weights (one bfloat16 scale per output row) over
    bfloat16 activations, through torch's weight-only int8 kernel: half the bytes of bfloat16."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if linear.bias is not None:
            raise ValueError("Int8Linear: only bias-free layers are quantised")
        w8, scale = _int8_rows(linear.weight)
        self.register_buffer("w8", w8)
        self.register_buffer("scale", scale)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _int8_mm(x, self.w8, self.scale)


def quantize_int8(head: nn.Module) -> nn.Module:
    """Store a loaded draft's matrices (its own linear layers and the output rows of its subset)
    as int8, in place, for inference in bfloat16 on a CPU: the draft reads about half the bytes
    per step. The draft's ``q`` changes slightly, so its acceptance is measured again; speculative
    sampling stays exact (``q`` is still the law the drafts are drawn from)."""
    dtype = head._w_subset.dtype
    if dtype != torch.bfloat16 or head._w_subset.device.type != "cpu":
        raise ValueError(
            f"int8 weights need a bfloat16 draft on a CPU, got {dtype} on {head._w_subset.device}"
        )
    if not hasattr(torch, "_weight_int8pack_mm"):
        raise ValueError("int8 weights need torch._weight_int8pack_mm (torch >= 2.3)")
    for module in list(head.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, child_name, Int8Linear(child))
    w8, scale = _int8_rows(head._w_subset)
    object.__setattr__(head, "_w8_subset", (w8, scale))
    return head


def save_head(head: nn.Module, path: str | Path, card: dict[str, Any]) -> None:
    """Save a draft's own weights (safetensors, atomically) and its settings; ``card`` goes into
    the metadata. The frozen pieces of the target are not saved."""
    from safetensors.torch import save

    from .results import atomic_write

    state = {k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}
    meta = {"config": json.dumps(head.config_dict), "card": json.dumps(card)}
    data = save(state, metadata=meta)
    atomic_write(path, lambda f: f.write(data), binary=True)  # a unique temporary name


def load_head(path: str | Path, target: Any) -> nn.Module:
    """Load a draft saved by :func:`save_head` onto ``target`` (its dtype and device): a
    :class:`FeatureHead` or a :class:`LayerDraft`."""
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
    dtype = next(target.parameters()).dtype
    head.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()})
    head.to(next(target.parameters()).device)
    head.refresh_frozen()
    head.eval()
    head.requires_grad_(False)
    return head


def read_card(path: str | Path) -> dict[str, Any]:
    """The model card stored in a saved draft's metadata."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = f.metadata() or {}
    return {
        "config": json.loads(meta.get("config", "{}")),
        "card": json.loads(meta.get("card", "{}")),
    }


def as_drafter(head: nn.Module) -> Any:
    """The Drafter for a loaded draft: a :class:`FeatureDrafter` for a head, the model itself
    (driven by ModelDrafter) for a :class:`LayerDraft`."""
    return FeatureDrafter(head) if isinstance(head, FeatureHead) else head


class FeatureDrafter:
    """Drafts with a :class:`FeatureHead` inside :class:`~specdec_lib.decoding.SpeculativeDecoder`.

    The decoder hands over the target's hidden states after every pass (``observe``). The first step
    of a sequence has no target features yet, so it proposes nothing (the target's pass over the
    prompt then emits one token); after that, every step drafts. The head keeps a KV cache over the
    positions built from true target features and drops its drafted positions after each proposal.
    """

    wants_target_features = True

    def __init__(self, head: FeatureHead) -> None:
        self.head = head
        self.feature_layers = head.feature_layers
        self.config = getattr(head.target, "config", None)
        self.model = head  # for device checks
        self.reset()

    def reset(self) -> None:
        from transformers import DynamicCache

        self._feats: torch.Tensor | None = None  # true target features h_0..h_{m-1}
        self._cache = DynamicCache()
        self._done = 0  # head positions 1.._done are in the cache (built from true features)
        self._first_logits: torch.Tensor | None = None

    def observe(self, start: int, features: torch.Tensor) -> None:
        if self._feats is None:
            if start != 0:
                raise ValueError("FeatureDrafter: the first target pass must start at position 0")
            self._feats = features
        else:
            self._feats = torch.cat([self._feats[:start], features])

    def rollback(self, n_valid: int) -> None:
        if self._feats is not None and self._feats.shape[0] > n_valid:
            self._feats = self._feats[:n_valid]
        # Head position j reads (h_{j-1}, x_j): it stays valid while x_j does (j < n_valid).
        if self._done > n_valid - 1:
            self._cache.crop(n_valid - 1 - self._done)
            self._done = n_valid - 1

    @property
    def first_scores(self) -> torch.Tensor | None:
        """The logits of the first draft position of the last proposal, over the whole
        vocabulary (``-inf`` outside the subset): the decoder ranks greedy alternatives by them."""
        if self._first_logits is None:
            return None
        sub = self._first_logits.float()
        full = sub.new_full((self.head.target.config.vocab_size,), float("-inf"))
        return full.index_copy_(0, self.head.subset.to(full.device), sub)

    def _draw(
        self, hidden: torch.Tensor, warp: Warp, generator: torch.Generator | None, first: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One draft token and the full-vocabulary row ``q`` it was drawn from."""
        # Warping the subset's logits and scattering the probabilities is exactly warping the full
        # row with -inf outside the subset (temperature, top-k and top-p never keep a token of
        # probability 0), at a sixth of the cost; so is drawing within the subset.
        logits = self.head.logits(hidden)[0]
        if first:
            self._first_logits = logits  # kept as is; first_scores converts it when asked
        sub = warp.probs(logits)
        subset = self.head.subset.to(sub.device)
        x = subset[sample(sub, generator)]
        q = sub.new_zeros(self.head.target.config.vocab_size)
        return x, q.index_copy_(0, subset, sub)

    def propose(
        self, ids: torch.Tensor, k: int, warp: Warp, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.propose_until(ids, k, warp, generator, None)

    @torch.inference_mode()
    def propose_until(
        self,
        ids: torch.Tensor,
        k: int,
        warp: Warp,
        generator: torch.Generator | None,
        threshold: float | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Up to ``k`` drafts; with a ``threshold``, stop after a draft ``x`` with
        ``q(x) < threshold`` (a stopping time: the output law stays exact)."""
        L = ids.numel()
        if self._feats is None or self._feats.shape[0] < L - 1:
            empty = torch.empty(0, dtype=torch.long, device=ids.device)
            return empty, torch.empty(0, self.head.target.config.vocab_size, device=ids.device)
        # Head positions j = _done+1 .. L-1 read (h_{j-1}, x_j), all known exactly.
        j0 = self._done + 1
        feats = self._feats[j0 - 1 : L - 1].unsqueeze(0)
        toks = ids[j0:L].unsqueeze(0)
        pos = torch.arange(j0, L, device=ids.device).unsqueeze(0)
        hidden, self._cache = self.head(feats, toks, cache=self._cache, position_ids=pos)
        self._done = L - 1
        h = hidden[0, -1:]
        tokens, probs = [], []
        for i in range(k):
            x, q = self._draw(h, warp, generator, first=i == 0)
            tokens.append(x)
            probs.append(q)
            if threshold is not None and float(q[x]) < threshold:
                k = i + 1  # unsure: stop here (the host read is the price of a dynamic length)
                break
            if i + 1 < k:  # feed the head its own feature and the draft token
                pos = torch.tensor([[L + i]], device=ids.device)
                hidden, self._cache = self.head(
                    h.view(1, 1, -1), x.view(1, 1), cache=self._cache, position_ids=pos
                )
                h = hidden[0, -1:]
        if self._cache.get_seq_length() > self._done:  # drop the positions built from drafts
            self._cache.crop(self._done - self._cache.get_seq_length())
        return torch.stack(tokens), torch.stack(probs)
