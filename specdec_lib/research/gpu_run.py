"""The GPU run: what one step of speculative decoding costs on an accelerator, in one command.

``python3 -m specdec_lib.research.gpu_run --out DIR`` (``--device cpu --dry-run``: the rehearsal)
runs :data:`SECTIONS`, most needed first, replacing one JSON under ``--out`` after each. Weights are
seeded random (a pass's time at batch 1 does not depend on them) unless ``--gguf``."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ..bench import measure_pass_costs, resolve_device
from ..checks import non_negative_int, one_of, positive_int, real
from ..config import DEFAULT_HEAD, DEFAULT_PROMPTS, REPO_ROOT
from ..decoding import AutoregressiveDecoder, GenerationResult, SpeculativeDecoder
from ..lm import synchronize
from ..models import ModelPair, from_gguf, tokenizer_from_gguf
from ..results import atomic_write_json, load_prompts, provenance
from ..settings import add_arguments, from_arguments, setting
from .device_costs import CONFIG, generate_per_token, random_target, random_weights_pair

__all__ = [
    "SECTIONS",
    "SHAPES",
    "GpuRunSettings",
    "run",
    "source_digest",
    "step_profile",
    "step_times",
]

PROG = "python3 -m specdec_lib.research.gpu_run"
# The step shapes timed: candidates at each draft depth.
SHAPES: dict[str, tuple[int, ...]] = {"chain": (1,), "width 2": (2,), "tree (4, 3)": (4, 3)}
SECTIONS = ("costs", "decoder", "generate", "profile")
# The step the profile section records beside the autoregressive token: the benchmark's tree.
PROFILED_SHAPE, PROFILED_K = "tree (4, 3)", 2
# What --dry-run changes: every loop runs, each as little as it can.
DRY_RUN = dict(
    n_max=4,
    context=8,
    reps=1,
    K_max=1,
    new_tokens=4,
    decoder_reps=1,
    temperatures=(1.0,),
    generate_tokens=2,
    generate_reps=1,
    threads=1,
    profile_steps=4,
)


@dataclass
class GpuRunSettings:
    """What defines a GPU run (its flags)."""

    device: str = setting("auto", "where to measure (auto: cuda when present)")
    dtype: str = setting(
        "bfloat16", "dtype of the target and the head", choices=("bfloat16", "float32")
    )
    n_max: int = setting(128, "target passes over n = 1..n_max new tokens")
    context: int = setting(64, "tokens in the cache when a pass is timed; the decoders' prompt")
    reps: int = setting(15, "timed rounds per pass size (medians)")
    K_max: int = setting(8, "decoder steps timed at K = 1..K_max")
    new_tokens: int = setting(64, "tokens per timed decoder generation")
    decoder_reps: int = setting(3, "timed generations per decoder cell (medians)")
    temperatures: tuple[float, ...] = setting((1.0, 0.0), "decoder temperatures (0: greedy)")
    generate_tokens: int = setting(64, "tokens per timed transformers generate call")
    generate_reps: int = setting(3, "timed generate calls (after two warm-up calls)")
    graphs: bool = setting(True, "also time generate with CUDA graphs (CUDA only)")
    graphs_cap_s: float = setting(180.0, "seconds the CUDA-graphs child may take, compile included")
    budget_s: float = setting(420.0, "seconds for the whole run: later cells are skipped past it")
    sections: tuple[str, ...] = setting(
        SECTIONS, "the sections run, in this order", choices=SECTIONS
    )
    profile_steps: int = setting(16, "tokens per profiled generation (profile section)")
    seed: int = setting(0, "seed of the random target weights and of the decoders")
    # One thread for the rehearsal: on a small shared CPU, torch's threads wait on each other.
    threads: int | None = setting(None, "torch's CPU threads (none: torch's default)")
    dry_run: bool = setting(False, "the rehearsal: every section, tiny settings, one K")
    commit: str | None = setting(None, "the commit the tree is at (the device has no git)")
    gguf: str | None = setting(
        None,
        "the default target's GGUF file: its real weights (transformers' GGUF reader) and real "
        "prompts instead of seeded random weights and random ids",
    )

    def __post_init__(self) -> None:
        one_of(self.device, "device", ("auto", "cpu", "cuda"))
        for name in ("n_max", "context", "reps", "K_max", "new_tokens", "decoder_reps"):
            positive_int(getattr(self, name), name)
        positive_int(self.generate_tokens, "generate_tokens")
        positive_int(self.generate_reps, "generate_reps")
        positive_int(self.profile_steps, "profile_steps")
        self.sections = tuple(self.sections)
        if not self.sections:
            raise ValueError(f"sections must name at least one of {', '.join(SECTIONS)}")
        for name in self.sections:
            one_of(name, "sections", SECTIONS)
        non_negative_int(self.seed, "seed")
        positive_int(self.threads, "threads", optional=True)
        real(self.graphs_cap_s, "graphs_cap_s", low=0.0, low_open=True)
        real(self.budget_s, "budget_s", low=0.0, low_open=True)
        self.temperatures = tuple(self.temperatures)
        if not self.temperatures:
            raise ValueError("temperatures must name at least one temperature (0: greedy)")
        for T in self.temperatures:
            real(T, "temperatures", "0 for greedy", low=0.0)
        if self.gguf is not None and not Path(self.gguf).is_file():
            raise ValueError(f"gguf: no file at {self.gguf}")
        if self.new_tokens < self.K_max + 2:
            raise ValueError(
                f"new_tokens must be at least K_max + 2 = {self.K_max + 2}: a step's time is read "
                f"after the first (which also encodes the prompt), so a generation needs two "
                f"steps even when every draft is accepted; got {self.new_tokens}"
            )

    def effective(self) -> GpuRunSettings:
        """The settings the run uses: with ``dry_run``, the tiny ones of :data:`DRY_RUN`."""
        return replace(self, **DRY_RUN) if self.dry_run else self


def source_digest(root: Path = REPO_ROOT) -> str:
    """SHA-256 over the library's Python files (path and bytes, in sorted order), the head and the
    architecture's config: the code and inputs a run used, checkable against any commit."""
    h = hashlib.sha256()
    files = sorted((root / "specdec_lib").rglob("*.py")) + [CONFIG, DEFAULT_HEAD]
    for path in files:
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def step_times(result: GenerationResult) -> dict[str, float]:
    """A generation's step in seconds: ``step_s``, the wall time after the first step (which encodes
    the prompt) per later step, host work included; ``draft_s`` and ``verify_s``, the medians of the
    timed parts; ``tokens_per_step``."""
    steps = result.steps
    if len(steps) < 2:
        raise ValueError(f"a step's time needs at least 2 steps, the generation took {len(steps)}")
    first_s = (steps[0].draft_ms + steps[0].verify_ms) / 1e3
    return {
        "step_s": (result.elapsed_s - first_s) / (len(steps) - 1),
        "draft_s": statistics.median(s.draft_ms for s in steps[1:]) / 1e3,
        "verify_s": statistics.median(s.verify_ms for s in steps[1:]) / 1e3,
        "tokens_per_step": len(result.tokens) / len(steps),
    }


def _median_cell(results: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in results) for k in results[0]}


class _Clock:
    """The run's budget: ``left()`` seconds remain of ``budget_s`` from the start."""

    def __init__(self, budget_s: float) -> None:
        self.t0, self.budget_s = time.perf_counter(), budget_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float:
        return self.budget_s - self.elapsed()


def _target(s: GpuRunSettings, device: str) -> Any:
    """The default target in the run's dtype on ``device``: its real weights from ``s.gguf``,
    else the architecture with seeded random weights."""
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[s.dtype]
    if s.gguf is None:
        return random_target(CONFIG, dtype, device, s.seed)
    model = from_gguf(Path(s.gguf), dtype).to(device).eval()
    return model.requires_grad_(False)


def _pair(s: GpuRunSettings, device: str) -> ModelPair:
    pair = random_weights_pair(_target(s, device))
    if s.gguf is not None:  # the real target: its own tokenizer, the names say so
        pair.tokenizer = tokenizer_from_gguf(Path(s.gguf))
        pair.draft_name = f"trained draft ({DEFAULT_HEAD.name})"
        pair.target_name = f"SmolLM2-135M-Instruct ({Path(s.gguf).name}, dequantised)"
    return pair


def _prompt(pair: ModelPair, n: int) -> torch.Tensor:
    """``n`` prompt tokens: the benchmark's prompts if the pair has a tokenizer, else random ids."""
    if pair.tokenizer is not None:
        text = "\n\n".join(p["text"] for p in load_prompts(DEFAULT_PROMPTS))
        ids = pair.tokenizer(text, return_tensors="pt").input_ids[0]
        return ids[-n:].to(pair.device)
    g = torch.Generator().manual_seed(1)
    vocab = pair.target.config.vocab_size
    return torch.randint(min(100, vocab // 2), vocab, (n,), generator=g).to(pair.device)


def decoder_steps(pair: ModelPair, s: GpuRunSettings, clock: _Clock) -> dict[str, Any]:
    """Section 2: the decoders' steps, cell by cell (temperature, ``K``, shape), a short warm-up
    generation before each cell's timed ones; cells past the budget are listed as skipped."""
    prompt = _prompt(pair, s.context)
    rows, skipped = [], []
    for T in s.temperatures:
        ar = AutoregressiveDecoder(pair.target, temperature=T, seed=s.seed)
        ar.generate_ids(prompt, 2)
        times = [step_times(ar.generate_ids(prompt, s.new_tokens)) for _ in range(s.decoder_reps)]
        rows.append({"method": "autoregressive", "temperature": T, **_median_cell(times)})
        # K outermost: past the budget, the longest drafts of every shape go first, not a shape
        for K in range(1, s.K_max + 1):
            for name, tree in SHAPES.items():
                cell = {"method": "speculative", "shape": name, "tree": list(tree), "K": K}
                if clock.left() < 0:
                    skipped.append({**cell, "temperature": T})
                    continue
                dec = SpeculativeDecoder(
                    pair.draft, pair.target, K=K, temperature=T, seed=s.seed, tree=tree
                )
                dec.generate_ids(prompt, min(8, s.new_tokens))
                times = [
                    step_times(dec.generate_ids(prompt, s.new_tokens))
                    for _ in range(s.decoder_reps)
                ]
                rows.append({**cell, "temperature": T, **_median_cell(times)})
    return {
        "rows": rows,
        "skipped_over_budget": skipped,
        "prompt_tokens": s.context,
        "new_tokens": s.new_tokens,
        "statistic": "median over generations; step_s: wall time per step after the first",
    }


# CUDA runtime calls that launch a kernel and that wait for the device, as the profiler names them.
_LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
_SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def _profile_generation(decoder: Any, prompt: torch.Tensor, tokens: int, device: str) -> dict:
    """One generation under ``torch.profiler`` (after a warm-up one), summarised per step."""
    from torch.profiler import ProfilerActivity, profile

    decoder.generate_ids(prompt, tokens)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        result = decoder.generate_ids(prompt, tokens)
        synchronize(torch.device(device))
    steps = len(result.steps)
    events = prof.key_averages()

    def count(names: tuple[str, ...]) -> float:
        return sum(e.count for e in events if e.key in names) / steps

    def device_us(e: Any) -> float:  # the attribute's name changed across torch releases
        return float(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0)))

    ops = [e for e in events if e.key.startswith("aten::")]
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:12]
    return {
        "steps": steps,
        "tokens": len(result.tokens),
        "wall_ms_per_step": 1e3 * result.elapsed_s / steps,
        "aten_ops_per_step": sum(e.count for e in ops) / steps,
        "kernel_launches_per_step": count(_LAUNCHES),
        "syncs_per_step": count(_SYNCS),
        "device_busy_ms_per_step": sum(device_us(e) for e in events if e.device_type.name == "CUDA")
        / 1e3
        / steps,
        "top_host_ops": [
            {
                "name": e.key,
                "calls_per_step": e.count / steps,
                "self_host_ms_per_step": e.self_cpu_time_total / 1e3 / steps,
            }
            for e in top
        ],
    }


def step_profile(pair: ModelPair, s: GpuRunSettings, device: str) -> dict[str, Any]:
    """Section 4: per temperature, :func:`_profile_generation` of the autoregressive decoder and of
    the tree ``(4, 3)`` at ``K = 2``. The profiler's own cost is in the wall time: this says where a
    step's time goes, not how long a step takes."""
    prompt = _prompt(pair, s.context)
    rows = []
    for T in s.temperatures:
        ar = AutoregressiveDecoder(pair.target, temperature=T, seed=s.seed)
        rows.append(
            {"method": "autoregressive", "temperature": T}
            | _profile_generation(ar, prompt, s.profile_steps, device)
        )
        spec = SpeculativeDecoder(
            pair.draft,
            pair.target,
            K=PROFILED_K,
            temperature=T,
            seed=s.seed,
            tree=SHAPES[PROFILED_SHAPE],
        )
        rows.append(
            {"method": "speculative", "shape": PROFILED_SHAPE, "K": PROFILED_K, "temperature": T}
            | _profile_generation(spec, prompt, s.profile_steps, device)
        )
    return {"rows": rows, "prompt_tokens": s.context}


def _set_threads(threads: int | None) -> None:
    if threads is not None:
        torch.set_num_threads(threads)


def _exit_with_parent() -> None:
    """End this process when its parent is gone, so that no compile outlives a killed run."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _generate_child(s: GpuRunSettings, device: str, graphs: bool) -> dict[str, Any]:
    """In the child process: ``generate`` per token, and whether anything was compiled."""
    _exit_with_parent()
    _set_threads(s.threads)
    target = _target(s, device)
    t = generate_per_token(target, s.generate_tokens, graphs=graphs, reps=s.generate_reps)
    compiled = None
    if graphs:
        from torch._dynamo.utils import counters

        compiled = int(counters["stats"].get("unique_graphs", 0))
    return {"s_per_token": t, "compiled_graphs": compiled}


def generate_in_child(
    s: GpuRunSettings, device: str, *, graphs: bool, cap_s: float
) -> dict[str, Any]:
    """Run :func:`_generate_child` in its own process group, killed with all it started after
    ``cap_s`` seconds; the child prints one JSON line."""
    argv = [sys.executable, "-m", "specdec_lib.research.gpu_run", "--child-generate"]
    argv += ["--graphs" if graphs else "--no-graphs", "--device", device, "--dtype", s.dtype]
    argv += ["--generate-tokens", str(s.generate_tokens), "--generate-reps", str(s.generate_reps)]
    argv += ["--seed", str(s.seed), "--threads", str(s.threads).lower()]
    if s.gguf is not None:
        argv += ["--gguf", str(Path(s.gguf).resolve())]
    # The child finds this very library whatever its working folder or PYTHONPATH.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), *filter(None, [env.get("PYTHONPATH")])]
    )
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        process_group=0,  # no setsid: whatever ends this run's processes ends it too
    )
    try:
        out, err = proc.communicate(timeout=cap_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"status": f"stopped at the cap of {cap_s:.0f} s", "wall_s": cap_s}
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (err or "").strip().splitlines()[-3:]
        return {"status": f"failed (exit {proc.returncode}): {' | '.join(tail)}"[:600]}
    try:  # the child's last line; anything a library printed before it is ignored
        got = json.loads((out or "").strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"status": f"failed: no result in the child's output: {(out or '')[-300:]!r}"}
    return {"status": "measured", "wall_s": wall, **got}


def generate_section(pair: ModelPair, s: GpuRunSettings, device: str, clock: _Clock) -> dict:
    """Section 3: transformers' ``generate`` per token, eager here, then in a capped child: with
    CUDA graphs on a GPU, eager again on a CPU (the rehearsal of the child's plumbing)."""
    out: dict[str, Any] = {
        "eager_s_per_token": generate_per_token(
            pair.target, s.generate_tokens, reps=s.generate_reps
        ),
        "tokens": s.generate_tokens,
    }
    graphs = s.graphs and device == "cuda"
    if not graphs:
        why = "--no-graphs" if not s.graphs else "CUDA graphs need a CUDA device"
        out["cuda_graphs"] = {"status": f"not run: {why}"}
        if device == "cuda":
            return out
    key = "cuda_graphs" if graphs else "child_eager_rehearsal"
    cap = min(s.graphs_cap_s, clock.left())
    if cap < 1.0:
        out[key] = {"status": "not run: over the budget"}
    else:
        out[key] = generate_in_child(s, device, graphs=graphs, cap_s=cap)
    return out


def run(s: GpuRunSettings, out: str | Path) -> dict[str, Any]:
    """The whole run, writing ``<out>/gpu_run_<device>.json`` after every section."""
    settings = s.effective()
    clock = _Clock(settings.budget_s)
    _set_threads(settings.threads)
    device = resolve_device(settings.device)
    path = Path(out) / f"gpu_run_{device}.json"
    torch.manual_seed(settings.seed)
    pair = _pair(settings, device)
    prov = provenance(device=device, seed=settings.seed, settings=asdict(settings))
    if settings.commit:
        prov["git_commit_here"], prov["git_commit"] = prov["git_commit"], settings.commit
    prov["source_sha256"] = source_digest()
    # As the benchmark names the head: costs pair with acceptance measured with the same head.
    prov["head_sha256"] = hashlib.sha256(DEFAULT_HEAD.read_bytes()).hexdigest()[:16]
    result: dict[str, Any] = {
        "label": _label(device, settings.gguf is not None),
        "device": device,
        "dry_run": settings.dry_run,
        "complete": False,
        "pair": pair.describe(),
        "execution": "eager everywhere, except generate's cuda_graphs entry",
        "provenance": prov,
    }

    def save(section: str, value: Any) -> None:
        result[section] = value
        result["elapsed_s"] = clock.elapsed()
        atomic_write_json(path, result)
        print(f"{section}: done at {clock.elapsed():.0f} s", flush=True)

    for section in (name for name in SECTIONS if name in settings.sections):
        if section == "costs":
            value: Any = measure_pass_costs(
                pair, settings.n_max, context=settings.context, reps=settings.reps
            )
        elif section == "decoder":
            value = decoder_steps(pair, settings, clock)
        elif section == "generate":
            value = generate_section(pair, settings, device, clock)
            result["provenance"]["cuda_graphs"] = value.get("cuda_graphs", {}).get("status")
        else:
            value = step_profile(pair, settings, device)
        save(section, value)
    save("complete", True)
    return result


def _label(device: str, real: bool) -> str:
    """What the run's numbers are, in words."""
    if device != "cuda":
        weights = "the real weights" if real else "random weights"
        return f"a rehearsal on a CPU with {weights} (not a GPU measurement)"
    if real:
        return "measured on a GPU with the real weights: the decoder rows carry acceptance too"
    return "measured on a GPU with random weights; acceptance comes from the CPU runs"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    add_arguments(p, GpuRunSettings)
    p.add_argument("--out", help="folder for gpu_run_<device>.json (the run writes only there)")
    p.add_argument("--child-generate", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.out is None and not args.child_generate:
        parser.error("--out is required: the folder the result is written to")
    try:
        s = from_arguments(GpuRunSettings, args)
        if args.child_generate:
            device = resolve_device(s.device)
            print(json.dumps(_generate_child(s, device, s.graphs and device == "cuda")))
            return 0
        result = run(s, args.out)
    except ValueError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    print(f"{result['label']} ({result['provenance'].get('gpu') or result['provenance']['cpu']})")
    if "costs" in result:
        c = result["costs"]
        print(
            "t_target(n) ms, n = 1, 2, 4, 8, ...: "
            + " ".join(
                f"{c['t_target_s'][n - 1] * 1e3:.2f}"
                for n in (1, 2, 4, 8, 16, 32, 64, 128)
                if n <= len(c["t_target_s"])
            )
        )
        print(f"t_draft {c['t_draft_s'] * 1e3:.2f} ms, c = {c['c']:.3f}")

    def cell(row: dict[str, Any]) -> str:
        return row.get("shape", "autoregressive") + (f" K {row['K']}" if "K" in row else "")

    for row in result.get("decoder", {}).get("rows", []):
        what = cell(row)
        print(f"T {row['temperature']:g} {what}: step {row['step_s'] * 1e3:.2f} ms")
    if "generate" in result:
        print(f"generate: {json.dumps(result['generate'])}")
    for row in result.get("profile", {}).get("rows", []):
        what = cell(row)
        print(
            f"profile T {row['temperature']:g} {what}: per step {row['aten_ops_per_step']:.0f} "
            f"ops, {row['kernel_launches_per_step']:.0f} launches, "
            f"{row['syncs_per_step']:.1f} syncs, device busy {row['device_busy_ms_per_step']:.2f} "
            f"of {row['wall_ms_per_step']:.2f} ms"
        )
    print(f"wrote {Path(args.out) / ('gpu_run_' + result['device'] + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
