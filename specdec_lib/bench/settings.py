"""What defines a benchmark run: its settings, the named presets behind their defaults, and where
the run happens (device, dtype).

The flags of ``python -m specdec_lib bench`` are generated from
:class:`BenchSettings` (:mod:`specdec_lib.settings`). What ``bench`` runs
where a flag is left out is data, not code: the presets of ``presets.toml`` beside this module,
each with the reason for its choices (``why``). :meth:`BenchSettings.validate` resolves every
default, so that a stored run records what it measured.
"""

from __future__ import annotations

import dataclasses
import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..checks import one_of, positive_int, probability
from ..config import DEFAULT_PROMPTS
from ..costs import as_tree
from ..models import (
    DRAFTS,
    PACKINGS,
    PAIRS,
    TRAINED_DRAFTS,
    check_head,
    default_draft,
    load_pair,
    packing,
)
from ..results import repo_relative
from ..sampling import Warp
from ..settings import setting
from .passes import measure_pass_costs
from .tuning import tree_rates_path

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_TREE",
    "METHODS",
    "PRESETS",
    "SCHEDULES",
    "BenchSettings",
    "baseline_note",
    "draft_runs",
    "faster_baseline",
    "load_presets",
    "fastest_dtype",
    "preset_draft",
    "resolve_device",
    "settings_record",
]

METHODS = ("autoregressive", "speculative", "hf_assisted", "hf_autoregressive")
DEFAULT_METHODS = METHODS
SCHEDULES = ("fixed", "heuristic", "threshold")
DTYPES = ("float32", "bfloat16", "float16")
COST_TIMINGS = ("spread", "start")
DEVICES = ("auto", "cpu", "cuda")
PRESETS_FILE = Path(__file__).with_name("presets.toml")


def load_presets(path: str | Path = PRESETS_FILE) -> dict[str, dict[str, Any]]:
    """The named presets of ``path`` (TOML), each checked: a ``why``, and optionally the ``pair``
    it applies to, its ``drafts`` (the first that runs is taken) and ``library_drafts`` (those
    where the weights are packed for the library's product), its ``tree``, ``dtype`` and
    ``pack``."""
    presets = tomllib.loads(Path(path).read_text())
    known = {
        "why",
        "pair",
        "drafts",
        "library_drafts",
        "tree",
        "tune_tree",
        "schedule",
        "dtype",
        "pack",
    }
    for name, p in presets.items():
        where = f"preset {name!r} in {Path(path).name}"
        if not isinstance(p, dict) or not isinstance(p.get("why"), str) or not p["why"].strip():
            raise ValueError(f"{where}: every preset says why it chooses what it does (why = ...)")
        if set(p) - known:
            raise ValueError(
                f"{where}: unknown keys {sorted(set(p) - known)}; known: {sorted(known)}"
            )
        for key, choices in (("pair", PAIRS), ("dtype", DTYPES + ("auto",))):
            if key in p:
                one_of(p[key], f"{where}: {key}", choices)
        for key in ("drafts", "library_drafts"):
            for d in p.get(key, []):
                one_of(d, f"{where}: {key}", PAIRS.get(p.get("pair"), DRAFTS))
        if "pack" in p and p["pack"] != "auto":
            packing(p["pack"])
        if "tree" in p:
            p["tree"] = list(as_tree(p["tree"]))
        if not isinstance(p.get("tune_tree", False), bool):
            raise ValueError(f"{where}: tune_tree is true or false")
        if p.get("schedule", "fixed") not in SCHEDULES:
            raise ValueError(f"{where}: schedule is one of {', '.join(SCHEDULES)}")
    return presets


PRESETS = load_presets()
# The default preset's tree, for the notebooks and tests that check or reuse it.
DEFAULT_TREE = tuple(PRESETS["default"]["tree"])


def _preset_drafts(preset: dict[str, Any], draft: str) -> list[str]:
    """The drafts a preset's ``tree`` and ``schedule`` are for: its ``drafts`` and
    ``library_drafts``, or ``draft`` itself where it names none."""
    return preset.get("drafts", [draft]) + preset.get("library_drafts", [])


@dataclass
class BenchSettings:
    """Everything that defines a benchmark run (stored in the results' provenance; the flags of
    ``python -m specdec_lib bench`` are generated from these fields). ``draft``, ``dtype`` and the
    step's shape default to the preset's (``presets.toml``); :meth:`validate` resolves them."""

    pair: str = setting("default", "model pair", choices=PAIRS)
    preset: str = setting(
        "default",
        "named defaults for the draft, the draft tree and the dtype, each with why "
        "(specdec_lib/bench/presets.toml); a flag given wins",
        choices=PRESETS,
    )
    draft: str | None = setting(
        None, "the pair's draft (default: the preset's, else the pair's first)", choices=DRAFTS
    )
    head: str | None = setting(
        None,
        "saved weights of a trained draft (default: the committed data/drafter/feature_head"
        ".safetensors)",
    )
    device: str = setting(
        "auto", "where both models run (auto: cuda when present)", choices=DEVICES
    )
    dtype: str = setting(
        "auto",
        "dtype of both models (auto: the preset's; bfloat16 on cuda; on a CPU float32 or "
        "bfloat16, whichever runs the target faster, timed at start-up)",
        choices=DTYPES + ("auto",),
    )
    pack: str = setting(
        "auto",
        "prepack both models' linear weights for a CPU's product, both sides of every "
        "comparison: on (oneDNN's), library (the library's bfloat16 product) or off "
        "(auto: the preset's; else as timed with the dtype; on in bfloat16 on a CPU); library "
        "where specdec_lib.research.speed is imported, as the command line does",
    )
    K: list[int] = setting(list(range(1, 9)), "draft lengths (tokens drafted per step)")
    max_new_tokens: int = setting(50, "tokens generated per prompt")
    temperature: float = setting(1.0, "sampling temperature (0 = greedy)")
    top_k: int | None = setting(None, "keep the k most likely tokens")
    top_p: float | None = setting(None, "keep the smallest set with this probability")
    draft_temperature_scale: float = setting(
        1.0,
        "the draft's temperature over the target's: its drafts are drawn at temperature times "
        "this, exact at any value (the draft-temperature lever of research.levers measured one "
        "beside another)",
    )
    repeats: int = setting(1, "repeats of every (method, K, prompt) cell")
    seed: int = setting(0, "seed of the cells' sampling seeds")
    prompts: str = setting(
        str(DEFAULT_PROMPTS), 'JSON {"prompts": [{"category": ..., "text": ...}, ...]}'
    )
    methods: list[str] = setting(list(DEFAULT_METHODS), "methods measured", choices=METHODS)
    threads: int | None = setting(None, "torch threads (default: torch's)")
    cost_context: int | None = setting(
        None,
        "context length at which the pass costs are timed (default: the run's mean context, the "
        "prompts' mean length and half the new tokens)",
    )
    cost_reps: int = setting(15, "rounds of the pass-cost timing")
    cost_timing: str = setting(
        "spread",
        "when the cost model's pass costs are timed: before the cells and again in cost_reps "
        "rounds spread among them, the model reading those (spread), or before the cells only "
        "(start)",
        choices=COST_TIMINGS,
    )
    schedule: str | None = setting(
        None,
        "draft length per step: fixed K; HF's heuristic schedule from K (+2 after a fully "
        "accepted step, -1 otherwise); or up to K, stopping after a draft of confidence below "
        "--threshold (q(x), in greedy decoding the draft's softmax at x) (default: the preset's "
        "for its drafts, else fixed)",
        choices=SCHEDULES,
    )
    threshold: float = setting(0.4, "confidence threshold of --schedule threshold")
    tree: list[int] | None = setting(
        None,
        "the step's shape, candidates at each draft depth, e.g. 4 3: a draft tree along the "
        "chain, checked in one pass (speculative only; 1 is the chain; default: the preset's "
        "for its drafts, else the chain)",
    )
    width: int | None = setting(
        None,
        "another spelling of --tree W: W candidates for the first draft position (give --width "
        "or --tree, not both)",
    )
    tune_tree: bool | None = setting(
        None,
        "choose the trained head's tree at each K on this machine: the shape the cost model ranks "
        "fastest from the pass costs timed at start-up (made non-decreasing in the pass's "
        "tokens) and the head's acceptance of every tree "
        "up to 8 candidates at depths 1 and 2, committed beside it (<head>.tree_rates.json); the "
        "run records each K's shape (tuned_trees). Not with --tree or --width (default: the "
        "preset's, for a trained head whose tree rates are committed, unless --tree or --width "
        "is given)",
    )
    stop_at_eos: bool = setting(
        False,
        "end a cell at the target's end-of-sequence token (Spec-Bench's convention) instead of "
        "always generating max_new_tokens",
    )

    def validate(self) -> BenchSettings:
        """Check every field and resolve the defaults (device, dtype, draft, the step's shape) in
        place, so that a run records where and what it measured; returns ``self``. A dtype left
        to be measured (``auto`` on a CPU) is timed here (:func:`fastest_dtype`); the timings are
        kept in ``dtype_choice`` (validating again keeps them)."""
        choice = getattr(self, "dtype_choice", None)
        self.dtype_choice: dict[str, Any] | None = (
            choice if choice and choice["dtype"] == self.dtype else None
        )
        if not self.K:
            raise ValueError("K: give at least one draft length")
        self.K = sorted({positive_int(k, "K", "draft tokens per step") for k in self.K})
        positive_int(self.max_new_tokens, "max_new_tokens")
        positive_int(self.repeats, "repeats")
        positive_int(self.threads, "threads", optional=True)
        positive_int(self.cost_context, "cost_context", optional=True)
        positive_int(self.cost_reps, "cost_reps")
        one_of(self.cost_timing, "cost_timing", COST_TIMINGS)
        if not self.methods:
            raise ValueError(f"methods must be a non-empty subset of {METHODS}")
        for m in self.methods:
            one_of(m, "methods", METHODS)
        if "autoregressive" not in self.methods:
            raise ValueError(
                "methods must include 'autoregressive' (the baseline every speedup is relative to)"
            )
        Warp(self.temperature, self.top_k, self.top_p)  # validates the warps
        probability(self.threshold, "threshold", one=False)
        one_of(self.pair, "pair", PAIRS)
        preset = one_of(self.preset, "preset", PRESETS)
        preset = PRESETS[preset] if PRESETS[preset].get("pair", self.pair) == self.pair else {}
        self.device = resolve_device(self.device)
        self.dtype = one_of(self.dtype, "dtype", DTYPES + ("auto",))
        if self.dtype == "auto":
            self.dtype = preset.get("dtype", "auto")
        if self.dtype == "auto":
            self.dtype_choice = fastest_dtype(self.pair, self.device)
            self.dtype = self.dtype_choice["dtype"]
        if self.pack != "auto":
            self.pack = packing(self.pack)
        if self.pack == "auto":
            self.pack = preset.get("pack", "auto")
        if self.pack == "auto":  # as timed with the dtype, else prepacked in bfloat16 on a CPU
            default = self.device == "cpu" and self.dtype == "bfloat16"
            self.pack = packing((self.dtype_choice or {}).get("pack", default))
        if self.draft is None:
            self.draft = preset_draft(self.pair, preset, self.device, self.dtype, self.pack)
        one_of(self.draft, "draft", PAIRS[self.pair])
        if self.schedule is None:  # the preset's, for its drafts (as its tree)
            mine = self.draft in _preset_drafts(preset, self.draft)
            self.schedule = preset.get("schedule", "fixed") if mine else "fixed"
        one_of(self.schedule, "schedule", SCHEDULES)
        self.warp.for_draft(self.draft_temperature_scale)  # validates the scale
        self.draft_temperature_scale = float(self.draft_temperature_scale)
        shape = self._shape(preset)
        self.tree = None if self.tune_tree else list(shape)
        self.width = None  # a spelling only: the shape is the tree
        check_head(self.head, self.draft)
        return self

    def _shape(self, preset: dict[str, Any]) -> tuple[int, ...]:
        """The step's shape: the tree or width given, else the preset's tree for its drafts, else
        the chain."""
        if self.width is not None and self.tree is not None:
            raise ValueError(
                f"give width (a spelling of tree=(width,)) or tree, not both: got "
                f"width={self.width!r} and tree={self.tree!r}"
            )
        if self.tune_tree is not None and not isinstance(self.tune_tree, bool):
            raise ValueError(f"tune_tree must be True, False or None, got {self.tune_tree!r}")
        if self.tune_tree is None:  # the preset's, where it can: a trained head with its rates
            self.tune_tree = bool(
                preset.get("tune_tree", False)
                and self.width is None
                and self.tree is None
                and self.draft in TRAINED_DRAFTS
                and tree_rates_path(self.head).is_file()
            )
        if self.tune_tree and (self.width is not None or self.tree is not None):
            raise ValueError(
                "tune_tree chooses the tree at each K: give it or tree/width, not both (got "
                f"tree={self.tree!r}, width={self.width!r})"
            )
        if self.tune_tree and self.draft not in TRAINED_DRAFTS:
            raise ValueError(
                f"tune_tree: the tree is chosen from a trained head's acceptance rates; "
                f"draft={self.draft!r} has none (the trained drafts: {TRAINED_DRAFTS})"
            )
        if self.width is not None:
            return (positive_int(self.width, "width", "candidates for the first draft position"),)
        if self.tree is not None:
            return as_tree(self.tree)
        if "tree" in preset and self.draft in _preset_drafts(preset, self.draft):
            return tuple(preset["tree"])
        return (1,)

    @property
    def warp(self) -> Warp:
        return Warp(self.temperature, self.top_k, self.top_p)


def settings_record(s: BenchSettings) -> dict[str, Any]:
    """The settings as a run stores them: every field, the prompts' path relative to the
    repository (so that results compare across checkouts), and ``width``, the candidates at the
    first position when the tree has one depth (``1`` otherwise), as the runs recorded before the
    tree was a step's only shape."""
    d = dataclasses.asdict(s)
    d["prompts"] = repo_relative(d["prompts"])
    if d["tree"] is not None and d["width"] is None:
        d["width"] = d["tree"][0] if len(d["tree"]) == 1 else 1
    return d


def preset_draft(
    pair: str, preset: dict[str, Any], device: str, dtype: str, pack: str = "off"
) -> str:
    """The draft a ``preset`` (a table of :data:`PRESETS`) runs with ``pair`` on ``device`` in
    ``dtype`` with the weights packed as ``pack`` says: the first of its drafts (its
    ``library_drafts`` where ``pack`` is ``"library"`` and it names them) of the pair's that runs
    there (:func:`draft_runs`), else the pair's first."""
    key = "library_drafts" if pack == "library" and "library_drafts" in preset else "drafts"
    drafts = [d for d in preset.get(key, []) if d in PAIRS[pair]]
    runs = [d for d in drafts if draft_runs(d, device, dtype)]
    return runs[0] if runs else default_draft(pair)


def draft_runs(draft: str, device: str, dtype: str) -> bool:
    """Can ``draft`` run on ``device`` in ``dtype``? Int8 head weights need bfloat16 on a CPU (the
    kernel they run through); every other draft runs anywhere."""
    return draft != "trained-int8" or (device, dtype) == ("cpu", "bfloat16")


def resolve_device(device: str) -> str:
    """``"auto"`` -> ``"cuda"`` when a CUDA device is present, else ``"cpu"``; ``"cuda"`` without
    one is a ``ValueError``."""
    one_of(device, "device", DEVICES)
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no CUDA device (use 'cpu' or 'auto')")
    return device


# The pass the dtype is chosen on, besides the one-token pass (the baseline's): the last token and
# a step's drafts (the default tree (4, 3) at K = 2 checks 1 + 7 tokens).
STEP_TOKENS = 8


@functools.cache
def fastest_dtype(pair: str, device: str, reps: int = 5) -> dict[str, Any]:
    """The dtype (and packing) ``--dtype auto`` resolves to, measured: bfloat16 on a CUDA device
    (its tensor cores); on a CPU, of float32 as loaded, float32 prepacked and bfloat16 prepacked
    for oneDNN (:func:`~specdec_lib.lm.pack_linears`), and bfloat16 packed for the library's
    product where it runs (:mod:`~specdec_lib.research.speed`, where imported; where it does not, the reason is
    recorded, ``not_timed``), the one whose target passes over one token (the baseline's) and
    over a step's tokens (``STEP_TOKENS``, a step's verification) take least time together,
    timed as the benchmark times its passes (:func:`~specdec_lib.bench.measure_pass_costs`; a few
    seconds each, once per process). Whether bfloat16 is native or emulated and what packing buys
    decide it; ``/proc/cpuinfo``'s flags do not tell the cost, so the run records the timings
    (``dtype_choice``), and which setting passes over one token fastest (``fastest_one_token``:
    where it is another, the autoregressive baseline would be faster there,
    :func:`baseline_note`)."""
    if device == "cuda":
        return {"dtype": "bfloat16", "pack": "off", "why": "a CUDA device (tensor cores)"}
    candidates = [("float32", "off"), ("float32", "on"), ("bfloat16", "on")]
    not_timed = {}
    for name, p in PACKINGS.items():  # a backend's, in the dtype it takes
        if name not in ("off", "on") and p.dtype == torch.bfloat16:
            if (why := p.unavailable()) is None:
                candidates.append(("bfloat16", name))
            else:
                not_timed[_setting("bfloat16", name)] = why
    t = {}
    for d, pack in candidates:
        costs = measure_pass_costs(load_pair(pair, dtype=d, pack=pack), STEP_TOKENS, reps=reps)
        t_n = costs["t_target_s"]
        t[_setting(d, pack)] = {"1": t_n[0], str(STEP_TOKENS): t_n[-1]}
    best = min(t, key=lambda v: t[v]["1"] + t[v][str(STEP_TOKENS)])
    dtype, pack = _dtype_and_pack(best)
    return {
        "dtype": dtype,
        "pack": pack,
        "why": f"the fastest target passes over 1 and {STEP_TOKENS} tokens on this CPU",
        "t_target_s": t,
        "fastest_one_token": min(t, key=lambda v: t[v]["1"]),
    } | ({"not_timed": not_timed} if not_timed else {})


# What fastest_dtype names the core's weight layouts (a stored choice's ``pack`` may be a bool:
# True is oneDNN's); a backend's is named by its packing ("bfloat16 library").
_LAYOUT_NAMES = {"off": "", "on": " packed"}


def _setting(dtype: str, pack: bool | str) -> str:
    """The name :func:`fastest_dtype` times a dtype and weight layout under."""
    pack = pack if isinstance(pack, str) else ("on" if pack else "off")
    return dtype + _LAYOUT_NAMES.get(pack, f" {pack}")


def _dtype_and_pack(setting: str) -> tuple[str, str]:
    """The dtype and ``pack`` of a setting :func:`_setting` named."""
    dtype, _, layout = setting.partition(" ")
    names = {n.strip(): p for p, n in _LAYOUT_NAMES.items()}
    return dtype, names.get(layout, layout)


def _flags(setting: str) -> str:
    """``bench``'s flags for a setting :func:`_setting` named."""
    dtype, pack = _dtype_and_pack(setting)
    return f"--dtype {dtype} --pack {pack}"


def faster_baseline(choice: dict[str, Any] | None) -> dict[str, Any] | None:
    """Where a run's timed dtype choice (``dtype_choice``) left a faster one-token pass in another
    setting than the one ``chosen``: that ``setting`` and both one-token passes (seconds), else
    ``None``."""
    if not choice or "fastest_one_token" not in choice:
        return None
    chosen = _setting(choice["dtype"], choice["pack"])
    other = choice["fastest_one_token"]
    if other == chosen:
        return None
    t = choice["t_target_s"]
    return {
        "setting": other,
        "chosen": chosen,
        "t_one_token_s": t[other]["1"],
        "chosen_t_one_token_s": t[chosen]["1"],
    }


def baseline_note(choice: dict[str, Any] | None) -> str | None:
    """A sentence for a run whose timed dtype choice left a faster one-token pass, hence a faster
    autoregressive decoder, in another setting (:func:`faster_baseline`; ``None`` otherwise):
    the speedups are then against the chosen setting's baseline, as both sides run one dtype."""
    f = faster_baseline(choice)
    if f is None:
        return None
    other, chosen = f["setting"], f["chosen"]
    return (
        f"autoregressive decoding is faster in {other} (one-token pass "
        f"{f['t_one_token_s'] * 1e3:.1f} ms) than in {chosen} "
        f"({f['chosen_t_one_token_s'] * 1e3:.1f} ms), whose passes over 1 and {STEP_TOKENS} "
        f"tokens take least time together: the speedups are against {chosen}'s baseline "
        f"(one dtype on both sides); {_flags(other)} measures against the other"
    )
