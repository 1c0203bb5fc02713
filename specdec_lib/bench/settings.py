"""A benchmark run's settings (:class:`BenchSettings`, the source of ``bench``'s flags), the named
presets of ``presets.toml`` behind their defaults, and the device and dtype a run uses."""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from ..checks import one_of, positive_int, probability
from ..config import DEFAULT_PROMPTS, tree_rates_path
from ..costs import as_tree
from ..models import (
    DRAFTS,
    PAIRS,
    TRAINED_DRAFTS,
    check_head,
    default_draft,
    packing,
)
from ..results import repo_relative
from ..sampling import Warp
from ..settings import setting
from .methods import DEFAULT_METHODS, METHODS

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_TREE",
    "METHODS",
    "PRESETS",
    "SCHEDULES",
    "BenchSettings",
    "SettingChoice",
    "baseline_note",
    "draft_runs",
    "faster_baseline",
    "load_presets",
    "preset_draft",
    "resolve_device",
    "settings_record",
]

SCHEDULES = ("fixed", "heuristic", "threshold")
DTYPES = ("float32", "bfloat16", "float16")
COST_TIMINGS = ("spread", "start")
DEVICES = ("auto", "cpu", "cuda")
PRESETS_FILE = Path(__file__).with_name("presets.toml")


def load_presets(path: str | Path = PRESETS_FILE) -> dict[str, dict[str, Any]]:
    """The named presets of TOML ``path``, each checked; raises ``ValueError``."""
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
DEFAULT_TREE = tuple(PRESETS["default"]["tree"])


@dataclass(frozen=True)
class SettingChoice:
    """The dtype and weight layout chosen for a run that leaves them to the machine, with ``why``:
    timed (:func:`specdec_lib.research.speed.choose_setting`; ``t_target_s``: seconds per target
    pass by setting and tokens) or :func:`untimed_choice`. ``pack`` ``None``: dtype's default."""

    dtype: str
    pack: str | None
    why: str
    t_target_s: dict[str, dict[str, float]] | None = None
    fastest_one_token: str | None = None
    not_timed: dict[str, str] | None = None

    def record(self) -> dict[str, Any]:
        """The fields that are set, as a run stores them (``dtype_choice``)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def describe(self) -> str:
        layout = "" if self.pack is None else f", weights {self.pack}"
        return f"{self.dtype}{layout}: {self.why}"


def untimed_choice(device: str) -> SettingChoice:
    """The untimed choice for ``auto``: bfloat16 on CUDA, float32 on a CPU."""
    if device == "cuda":
        return SettingChoice("bfloat16", "off", "a CUDA device (tensor cores)")
    return SettingChoice(
        "float32",
        None,
        "no start-up timing given (the command line times one: "
        "specdec_lib.research.speed.choose_setting)",
    )


class TreeTuner(Protocol):
    """Chooses a tuned run's tree at each ``K`` from its pass costs; registered on import by
    :mod:`specdec_lib.research.speed`."""

    def pass_tokens(self, K_max: int) -> int:
        """The largest target pass a tuned run can make up to ``K_max``."""
        ...

    def tune(self, pair: Any, settings: Any, costs: dict[str, Any]) -> dict[str, Any]:
        """The tuned trees' record, ``by_K`` the tree of each ``K``."""
        ...


_TREE_TUNER: TreeTuner | None = None


def register_tree_tuner(tuner: TreeTuner | None) -> None:
    """Make ``tuner`` what tunes the trees of a run with ``tune_tree``."""
    global _TREE_TUNER
    _TREE_TUNER = tuner


def tree_tuner() -> TreeTuner:
    """The registered tree tuner; raises ``ValueError`` if none."""
    if _TREE_TUNER is None:
        raise ValueError(
            "tune_tree: a run's trees are tuned by specdec_lib.research.speed; import it (the "
            "command line does), or give tree"
        )
    return _TREE_TUNER


def _preset_drafts(preset: dict[str, Any], draft: str) -> list[str]:
    """The drafts a preset's ``tree`` and ``schedule`` apply to (``draft`` if it names none)."""
    return preset.get("drafts", [draft]) + preset.get("library_drafts", [])


@dataclass
class BenchSettings:
    """Everything that defines a benchmark run; ``bench``'s flags are generated from the fields.
    :meth:`validate` resolves the defaults (from the preset) in place."""

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

    def __post_init__(self) -> None:
        self.choice: SettingChoice | None = None

    def validate(self, choice: SettingChoice | None = None) -> BenchSettings:
        """Check every field and resolve the defaults in place; returns ``self``. A dtype left to
        the machine is ``choice``'s, else :func:`untimed_choice`'s, kept in ``self.choice``.
        Raises ``ValueError``."""
        if choice is not None:
            self.choice = choice
        if self.choice is not None and self.dtype not in ("auto", self.choice.dtype):
            self.choice = None
        self._check_fields()
        preset = self._preset()
        self.device = resolve_device(self.device)
        self._resolve_dtype_and_pack(preset)
        if self.draft is None:
            self.draft = preset_draft(self.pair, preset, self.device, self.dtype, self.pack)
        one_of(self.draft, "draft", PAIRS[self.pair])
        if self.schedule is None:  # the preset's, for its drafts
            mine = self.draft in _preset_drafts(preset, self.draft)
            self.schedule = preset.get("schedule", "fixed") if mine else "fixed"
        one_of(self.schedule, "schedule", SCHEDULES)
        self.warp.for_draft(self.draft_temperature_scale)  # validates
        self.draft_temperature_scale = float(self.draft_temperature_scale)
        shape = self._shape(preset)
        self.tree = None if self.tune_tree else list(shape)
        self.width = None  # the tree holds it
        check_head(self.head, self.draft)
        return self

    def leaves_dtype_to_machine(self) -> bool:
        """Whether the dtype is left to a start-up timing: ``auto`` in flag and preset, on a CPU."""
        dtype = one_of(self.dtype, "dtype", DTYPES + ("auto",))
        preset_dtype = self._preset().get("dtype", "auto")
        return (dtype, preset_dtype, resolve_device(self.device)) == ("auto", "auto", "cpu")

    def _check_fields(self) -> None:
        """Check the fields that need nothing resolved; sorts and dedupes ``K``."""
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
        Warp(self.temperature, self.top_k, self.top_p)  # validates
        probability(self.threshold, "threshold", one=False)

    def _preset(self) -> dict[str, Any]:
        """The preset's table where it applies to the pair, else ``{}``."""
        one_of(self.pair, "pair", PAIRS)
        name = one_of(self.preset, "preset", PRESETS)
        return PRESETS[name] if PRESETS[name].get("pair", self.pair) == self.pair else {}

    def _resolve_dtype_and_pack(self, preset: dict[str, Any]) -> None:
        """``dtype`` and ``pack``: the flag's, else the preset's, else the choice's."""
        self.dtype = one_of(self.dtype, "dtype", DTYPES + ("auto",))
        if self.dtype == "auto":
            self.dtype = preset.get("dtype", "auto")
        if self.dtype == "auto":
            self.choice = self.choice or untimed_choice(self.device)
            self.dtype = self.choice.dtype
        if self.pack != "auto":
            self.pack = packing(self.pack)
        if self.pack == "auto":
            self.pack = preset.get("pack", "auto")
        if self.pack == "auto":
            chosen = self.choice.pack if self.choice is not None else None
            default = self.device == "cpu" and self.dtype == "bfloat16"
            self.pack = packing(default if chosen is None else chosen)

    def _shape(self, preset: dict[str, Any]) -> tuple[int, ...]:
        """The tree: given, else the preset's for its drafts, else the chain."""
        if self.width is not None and self.tree is not None:
            raise ValueError(
                f"give width (a spelling of tree=(width,)) or tree, not both: got "
                f"width={self.width!r} and tree={self.tree!r}"
            )
        if self.tune_tree is not None and not isinstance(self.tune_tree, bool):
            raise ValueError(f"tune_tree must be True, False or None, got {self.tune_tree!r}")
        if self.tune_tree is None:  # the preset's, if a trained head has rates
            self.tune_tree = bool(
                preset.get("tune_tree", False)
                and _TREE_TUNER is not None
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
        if self.tune_tree:
            tree_tuner()  # raises if none is registered
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
    """Every field as a run stores it, the prompts' path repository-relative and ``width`` filled
    from a one-depth tree (else ``1``)."""
    d = dataclasses.asdict(s)
    d["prompts"] = repo_relative(d["prompts"])
    if d["tree"] is not None and d["width"] is None:
        d["width"] = d["tree"][0] if len(d["tree"]) == 1 else 1
    return d


def preset_draft(
    pair: str, preset: dict[str, Any], device: str, dtype: str, pack: str = "off"
) -> str:
    """The first of ``preset``'s drafts (``library_drafts`` for ``pack="library"``) of ``pair``
    that :func:`draft_runs` there, else the pair's first."""
    key = "library_drafts" if pack == "library" and "library_drafts" in preset else "drafts"
    drafts = [d for d in preset.get(key, []) if d in PAIRS[pair]]
    runs = [d for d in drafts if draft_runs(d, device, dtype)]
    return runs[0] if runs else default_draft(pair)


def draft_runs(draft: str, device: str, dtype: str) -> bool:
    """Can ``draft`` run on ``device`` in ``dtype``? Int8 heads need bfloat16 on a CPU."""
    return draft != "trained-int8" or (device, dtype) == ("cpu", "bfloat16")


def resolve_device(device: str) -> str:
    """``"auto"`` -> ``"cuda"`` if present, else ``"cpu"``; raises ``ValueError`` if absent."""
    one_of(device, "device", DEVICES)
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no CUDA device (use 'cpu' or 'auto')")
    return device


# Layout names in a setting's name; another packing is named as itself ("bfloat16 library").
_LAYOUT_NAMES = {"off": "", "on": " packed"}


def setting_name(dtype: str, pack: bool | str) -> str:
    """The name a timed choice gives a dtype and weight layout (``"bfloat16 packed"``)."""
    pack = pack if isinstance(pack, str) else ("on" if pack else "off")
    return dtype + _LAYOUT_NAMES.get(pack, f" {pack}")


def setting_layout(setting: str) -> tuple[str, str]:
    """The dtype and ``pack`` of a setting :func:`setting_name` named."""
    dtype, _, layout = setting.partition(" ")
    names = {n.strip(): p for p, n in _LAYOUT_NAMES.items()}
    return dtype, names.get(layout, layout)


def _flags(setting: str) -> str:
    """``bench``'s flags for a setting :func:`setting_name` named."""
    dtype, pack = setting_layout(setting)
    return f"--dtype {dtype} --pack {pack}"


def faster_baseline(choice: dict[str, Any] | None) -> dict[str, Any] | None:
    """The faster one-token ``setting`` than the ``chosen`` one in a ``dtype_choice``, with both
    one-token pass times (seconds); else ``None``."""
    if not choice or "fastest_one_token" not in choice:
        return None
    chosen = setting_name(choice["dtype"], choice["pack"])
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
    """A sentence on the faster baseline :func:`faster_baseline` finds, else ``None``."""
    f = faster_baseline(choice)
    if f is None:
        return None
    other, chosen = f["setting"], f["chosen"]
    step = max(int(n) for n in choice["t_target_s"][chosen])
    return (
        f"autoregressive decoding is faster in {other} (one-token pass "
        f"{f['t_one_token_s'] * 1e3:.1f} ms) than in {chosen} "
        f"({f['chosen_t_one_token_s'] * 1e3:.1f} ms), whose passes over 1 and {step} "
        f"tokens take least time together: the speedups are against {chosen}'s baseline "
        f"(one dtype on both sides); {_flags(other)} measures against the other"
    )
