"""Reading and writing the project's data: provenance and atomic writes for every measured number,
results files, prompt lists."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch

from .config import DEFAULT_PROMPTS, REPO_ROOT

__all__ = [
    "atomic_write",
    "atomic_write_json",
    "device_info",
    "git_commit",
    "load_prompts",
    "provenance",
    "read_json",
]


def git_commit() -> str:
    """The repository's HEAD commit, with ``+dirty`` if tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info(device: str | torch.device | None = None) -> dict[str, Any]:
    """What the numbers were measured on."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    info: dict[str, Any] = {
        "device": str(dev),
        "cpu": _cpu_name(),
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
    }


def atomic_write(path: str | Path, write: Any, *, binary: bool = False) -> Path:
    """Call ``write(f)`` on a temporary file in the same folder, fsync, then rename over ``path``.

    A reader sees the old file or the new one, never a truncated one, even if the writer is
    killed mid-write. The file is left readable by all (0644).
    """
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


def read_json(path: str | Path) -> Any:
    """Read a results file, with a clear error if it is missing or malformed."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{path}: no such results file") from err
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from err


def load_prompts(path: str | Path | None = None) -> list[dict[str, str]]:
    """Read ``{"prompts": [{"category": ..., "text": ...}, ...]}``, with a clear error if malformed."""
    path = Path(path) if path is not None else DEFAULT_PROMPTS
    if not path.is_file():
        raise ValueError(f"prompts file {str(path)!r} does not exist")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"prompts file {str(path)!r} is not valid JSON: {err}") from err
    prompts = data.get("prompts") if isinstance(data, dict) else None
    if not isinstance(prompts, list) or not prompts:
        raise ValueError(
            f'prompts file {str(path)!r} must hold {{"prompts": [{{"category": ..., "text": ...}}, ...]}}'
        )
    for i, p in enumerate(prompts):
        if not (isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"].strip()):
            raise ValueError(f"prompts file {str(path)!r}: prompt {i} needs a non-empty 'text'")
        if not isinstance(p.get("category", ""), str):
            raise ValueError(f"prompts file {str(path)!r}: prompt {i} has a non-string 'category'")
    return [{"category": p.get("category", "uncategorised"), "text": p["text"]} for p in prompts]
