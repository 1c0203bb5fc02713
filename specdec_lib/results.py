"""Provenance, atomic writes, results files and prompt lists."""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import os
import platform
import re
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from .config import DEFAULT_PROMPTS, REPO_ROOT

__all__ = [
    "NOT_CODE",
    "code_changes",
    "code_commit",
    "atomic_write",
    "atomic_write_json",
    "check_same_machine",
    "device_info",
    "git_commit",
    "isa_limits",
    "load_prompts",
    "machine_info",
    "describe_machine",
    "machine_key",
    "machine_slug",
    "memory_bandwidth_gbs",
    "provenance",
    "read_json",
    "repo_relative",
    "results_read",
]


# Paths that do not count as code: they may change without changing what measured a result.
NOT_CODE = ("data/**", "figures/**", "notebooks/**", "**/*.md")


def _git(repo: Path, *args: str) -> str:
    run = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return run.stdout


def _code_paths() -> list[str]:
    return ["--", "."] + [f":(exclude,glob){p}" for p in NOT_CODE]


def code_changes(repo: Path = REPO_ROOT) -> list[str]:
    """The tracked code files (not :data:`NOT_CODE`) that differ from HEAD."""
    out = _git(repo, "status", "--porcelain", "--untracked-files=no", *_code_paths())
    return [line[3:] for line in out.splitlines() if line.strip()]


def git_commit(repo: Path = REPO_ROOT) -> str:
    """HEAD's commit, with ``+dirty`` if :func:`code_changes` finds any; ``"unknown"`` on error."""
    try:
        return _git(repo, "rev-parse", "HEAD").strip() + ("+dirty" if code_changes(repo) else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def code_commit(repo: Path = REPO_ROOT) -> str:
    """The last commit that changed code (not :data:`NOT_CODE`)."""
    try:
        return _git(repo, "log", "-1", "--format=%H", *_code_paths()).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def repo_relative(path: str | Path) -> str:
    """``path`` relative to the repository if inside it, else as given."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(REPO_ROOT.resolve()))
    except ValueError:
        return str(path)


# The /proc/cpuinfo flags that decide which CPU kernels a pass runs.
ISA_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_bf16", "amx_bf16", "amx_tile", "avx_vnni")
# Environment variables limiting torch's, oneDNN's and MKL's kernels: part of a machine's identity.
ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def isa_limits() -> dict[str, str]:
    """The :data:`ISA_LIMITS` set in this process's environment, with their values."""
    return {k: os.environ[k] for k in ISA_LIMITS if k in os.environ}


def _cpuinfo() -> dict[str, str]:
    """The first processor's /proc/cpuinfo fields (if any) and ``cpu``, its model name."""
    try:
        first = Path("/proc/cpuinfo").read_text().split("\n\n", 1)[0]
    except OSError:
        first = ""
    fields = (line.split(":", 1) for line in first.splitlines() if ":" in line)
    info = {k.strip(): v.strip() for k, v in fields}
    info["cpu"] = info.get("model name") or platform.processor() or platform.machine()
    return info


@functools.cache
def memory_bandwidth_gbs(megabytes: int = 256, reps: int = 5) -> float:
    """Memory bandwidth in GB/s: the best of ``reps`` copies of a ``megabytes`` float32 tensor,
    with torch's threads; measured once per process."""
    src = torch.ones(megabytes * 2**18)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch the pages
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return round(2 * src.numel() * 4 / best / 1e9, 1)


def machine_info() -> dict[str, Any]:
    """This machine: CPU model (with family, model, stepping), usable cores, :data:`ISA_FLAGS`,
    :func:`isa_limits`, torch threads and :func:`memory_bandwidth_gbs`."""
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    return {
        "cpu": info["cpu"],
        "vendor": info.get("vendor_id", ""),
        "family_model_stepping": "/".join(
            info.get(k, "?") for k in ("cpu family", "model", "stepping")
        ),
        "cores": cores,
        "isa": sorted(f for f in ISA_FLAGS if f in flags),
        "isa_limits": isa_limits(),
        "torch_threads": torch.get_num_threads(),
        "memory_bandwidth_gbs": memory_bandwidth_gbs(),
    }


def machine_key(prov: dict[str, Any]) -> str:
    """The machine a provenance names, as a comparable string (without the bandwidth); CPU name
    and core count where it has no ``machine``."""
    m = prov.get("machine")
    if m is None:
        return f"{prov.get('cpu', '?')}, {prov.get('cpu_count', '?')} cores"
    limits = ", ".join(f"{k}={v}" for k, v in sorted(m["isa_limits"].items()))
    return (
        f"{m['cpu']} ({m['vendor']} {m['family_model_stepping']}), {m['cores']} cores, "
        f"{' '.join(m['isa']) or 'no listed ISA'}"
        + (f", kernels limited: {limits}" if limits else "")
    )


def machine_slug(machine: dict[str, Any]) -> str:
    """A :func:`machine_info` record as a folder name, e.g. ``amd-epyc-26-2-1-2cores`` or
    ``intel-xeon-processor-6-167-8-2cores-limited-avx2``."""
    name = re.sub(r"\((r|tm)\)", "", machine["cpu"], flags=re.IGNORECASE)
    parts = [name, machine["family_model_stepping"], f"{machine['cores']}cores"]
    limits = sorted({v.lower() for v in machine.get("isa_limits", {}).values()})
    if limits:
        parts += ["limited", *limits]
    return re.sub(r"[^a-z0-9]+", "-", " ".join(parts).lower()).strip("-")


def describe_machine(machine: dict[str, Any]) -> str:
    """A :func:`machine_info` record in words, e.g. "Intel(R) Xeon(R) Processor (6/167/8, AMX),
    2 cores, 26.1 GB/s"."""
    isa = set(machine["isa"])
    kind = (
        "AMX"
        if "amx_bf16" in isa
        else "AVX-512 BF16"
        if "avx512_bf16" in isa
        else "AVX-512, bfloat16 emulated"
        if "avx512f" in isa
        else "AVX2, bfloat16 emulated"
        if "avx2" in isa
        else "no AVX2"
    )
    limits = ", ".join(f"{k}={v}" for k, v in sorted(machine.get("isa_limits", {}).items()))
    return (
        f"{machine['cpu']} ({machine['family_model_stepping']}, {kind}"
        + (f", kernels limited by {limits}" if limits else "")
        + f"), {machine['cores']} cores, {machine['memory_bandwidth_gbs']} GB/s"
    )


def check_same_machine(records: Iterable[dict[str, Any]], what: str) -> str:
    """The one :func:`machine_key` of stored results ``records``; raises ``ValueError`` naming
    ``what`` if they come from several machines."""
    keys = sorted({machine_key(r.get("provenance", {})) for r in records})
    if len(keys) > 1:
        raise ValueError(
            f"{what}: the results come from {len(keys)} machines, and a comparison across "
            "machines is meaningless; measure them in one campaign on one machine. Machines: "
            + "; ".join(keys)
        )
    return keys[0] if keys else ""


def device_info(device: str | torch.device | None = None) -> dict[str, Any]:
    """What the numbers were measured on."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    info: dict[str, Any] = {
        "device": str(dev),
        "cpu": _cpuinfo()["cpu"],
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
    }
    if dev.type == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(dev)
        info["cuda"] = torch.version.cuda
    return info


def provenance(
    *, device=None, seed: int | None = None, settings: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Device, versions, commit, date, seed and settings: attached to every stored result."""
    import transformers

    return {
        **device_info(device),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "git_commit": git_commit(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "seed": seed,
        "settings": settings or {},
        "machine": machine_info(),
    }


def atomic_write(path: str | Path, write: Any, *, binary: bool = False) -> Path:
    """Call ``write(f)`` on a temporary file beside ``path``, fsync, and rename it over ``path``
    (mode 0644): readers never see a truncated file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    """Write JSON atomically (see :func:`atomic_write`)."""

    def write(f) -> None:
        json.dump(obj, f, indent=1, allow_nan=True, default=_jsonable)
        f.write("\n")

    return atomic_write(path, write)


def _jsonable(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (torch.dtype, torch.device, Path)):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


# Every file read_json has read in this process: repo-relative path -> SHA-256 of its bytes.
_READ: dict[str, str] = {}


def read_json(path: str | Path) -> Any:
    """Read a results file, noting its digest for :func:`results_read`. Raises
    ``FileNotFoundError`` or ``ValueError``."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{path}: no such results file") from err
    _READ[repo_relative(path)] = hashlib.sha256(data).hexdigest()
    try:
        return json.loads(data)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from err


def results_read() -> str:
    """The files :func:`read_json` has read, one per line with their SHA-256, sorted by path."""
    return "\n".join(f"sha256:{h[:16]}  {name}" for name, h in sorted(_READ.items())) or "none"


def load_prompts(path: str | Path | None = None) -> list[dict[str, str]]:
    """Read ``{"prompts": [{"category": ..., "text": ...}, ...]}``; raises ``ValueError``."""
    path = Path(path) if path is not None else DEFAULT_PROMPTS
    where = f"prompts file {str(path)!r}"
    if not path.is_file():
        raise ValueError(f"{where} does not exist")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{where} is not valid JSON: {err}") from err
    prompts = data.get("prompts") if isinstance(data, dict) else None
    if not isinstance(prompts, list) or not prompts:
        raise ValueError(
            f'{where} must hold {{"prompts": [{{"category": ..., "text": ...}}, ...]}}'
        )
    for i, p in enumerate(prompts):
        if not (isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"].strip()):
            raise ValueError(f"{where}: prompt {i} needs a non-empty 'text'")
        if not isinstance(p.get("category", ""), str):
            raise ValueError(f"{where}: prompt {i} has a non-string 'category'")
    return [{"category": p.get("category", "uncategorised"), "text": p["text"]} for p in prompts]
