"""llama.cpp, the engine a user would run on the embedded GGUF file, beside the library.

:class:`LlamaCppLM` runs the file with llama.cpp's kernels behind the interface of a transformers
causal LM (``forward(input_ids, past_key_values, logits_to_keep)``, a cache that crops), so the
library's own decoders, rule and drafts run on it unchanged: :class:`~specdec_lib.decoding.
AutoregressiveDecoder` and :class:`~specdec_lib.decoding.SpeculativeDecoder` with a chain
(prompt lookup, or any draft that reads no target features). llama.cpp is built by ``make peers``
(the copy vendored in the pinned llama-cpp-python source) and read through that package's ctypes
bindings. :func:`llama_bench` runs llama.cpp's own benchmark on the same file.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from ..config import REPO_ROOT

__all__ = [
    "LLAMA_CPP_VERSION",
    "LlamaCppCache",
    "LlamaCppLM",
    "PeerUnavailableError",
    "bindings",
    "llama_bench",
    "tool",
]

LLAMA_CPP_VERSION = "0.3.36"  # llama-cpp-python's source, which vendors llama.cpp (Makefile: peers)
PEERS = REPO_ROOT / ".cache" / "peers"
BIN = PEERS / "build" / "bin"
SOURCE = PEERS / f"llama_cpp_python-{LLAMA_CPP_VERSION}"


class PeerUnavailableError(ValueError):
    """llama.cpp is not built on this machine (``make peers`` builds it)."""


def bindings() -> Any:
    """llama-cpp-python's ctypes bindings (``llama_cpp``) over the library ``make peers`` built."""
    if not (BIN / "libllama.so").exists() or not SOURCE.is_dir():
        raise PeerUnavailableError(
            f"llama.cpp is not built here ({BIN} has no libllama.so): run `make peers` "
            "(downloads the pinned llama-cpp-python source once and builds it with cmake)"
        )
    os.environ["LLAMA_CPP_LIB_PATH"] = str(BIN)
    if str(SOURCE) not in sys.path:
        sys.path.insert(0, str(SOURCE))
    import llama_cpp

    return llama_cpp


@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def _quiet(level: int, text: bytes, user_data: Any) -> None:  # llama.cpp's log, dropped
    pass


class LlamaCppCache:
    """The KV cache of a :class:`LlamaCppLM` pass, as the decoders' ``KVState`` uses one: its
    length, and ``crop`` (a negative count removes that many entries from the end)."""

    def __init__(self, lm: LlamaCppLM) -> None:
        self.lm, self.length = lm, 0

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, n: int) -> None:
        keep = self.length + n if n < 0 else min(n, self.length)
        self.lm.remove_after(keep)
        self.length = keep


class LlamaCppLM(torch.nn.Module):
    """A GGUF file run by llama.cpp, as a causal LM for the library's decoders (chains only).

    One llama.cpp context holds one sequence's KV cache: a pass with a cache it did not make
    (``None``, or another's) starts a new sequence. Logits come back as float32 ``[1, n, V]``
    for the last ``logits_to_keep`` positions. A draft tree's masked pass is not supported.
    """

    def __init__(
        self, path: str | Path, *, threads: int = 2, n_ctx: int = 2048, n_batch: int = 512
    ):
        super().__init__()
        ll = self._ll = bindings()
        ll.llama_log_set(_quiet, None)
        ll.llama_backend_init()
        self._model = ll.llama_model_load_from_file(
            str(path).encode(), ll.llama_model_default_params()
        )
        if not self._model:
            raise ValueError(f"llama.cpp cannot load {path}")
        params = ll.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
        params.n_threads = params.n_threads_batch = threads
        self._ctx = ll.llama_init_from_model(self._model, params)
        self._mem = ll.llama_get_memory(self._ctx)
        vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(self._model))
        self.config = SimpleNamespace(vocab_size=vocab, max_position_embeddings=n_ctx)
        self.path, self.threads, self.n_batch = Path(path), threads, n_batch
        self.weight_bytes = int(ll.llama_model_size(self._model))  # what one pass streams
        self._batch = ll.llama_batch_init(n_batch, 0, 1)
        self._owner: LlamaCppCache | None = None

    def tokenize(self, text: str) -> list[int]:
        """``text`` as llama.cpp's tools tokenize a prompt (special tokens added and parsed)."""
        raw = text.encode()
        vocab = self._ll.llama_model_get_vocab(self._model)
        out = (self._ll.llama_token * (len(raw) + 8))()
        n = self._ll.llama_tokenize(vocab, raw, len(raw), out, len(out), True, True)
        if n < 0:
            raise ValueError(f"llama_tokenize needs {-n} tokens for {text!r}")
        return list(out[:n])

    def remove_after(self, n: int) -> None:
        """Drop the cache entries from position ``n`` on."""
        self._ll.llama_memory_seq_rm(self._mem, 0, n, -1)

    def forward(
        self, input_ids: torch.Tensor, past_key_values: Any = None, logits_to_keep: Any = 1, **kw
    ) -> SimpleNamespace:
        if kw.get("attention_mask") is not None or kw.get("position_ids") is not None:
            raise ValueError("LlamaCppLM runs causal passes only (a chain), not a draft tree")
        if input_ids.dim() == 2 and input_ids.shape[0] > 1:  # a batch: one fresh pass per row
            rows = [self.forward(row, None, logits_to_keep).logits for row in input_ids]
            return SimpleNamespace(logits=torch.cat(rows), past_key_values=None, cache=None)
        cache = kw.get("cache", past_key_values)  # the keyword by transformers' version
        if not isinstance(cache, LlamaCppCache) or cache is not self._owner:
            self._ll.llama_memory_clear(self._mem, True)
            cache = self._owner = LlamaCppCache(self)
        ids = input_ids.view(-1).tolist()
        keep = logits_to_keep if isinstance(logits_to_keep, int) else int(logits_to_keep.numel())
        rows = []
        for lo in range(0, len(ids), self.n_batch):
            chunk = ids[lo : lo + self.n_batch]
            first_kept = len(ids) - keep - lo  # chunk positions from here on return logits
            rows.append(self._decode(chunk, cache.length, first_kept))
            cache.length += len(chunk)
        logits = torch.from_numpy(np.concatenate(rows)).unsqueeze(0)
        return SimpleNamespace(logits=logits, past_key_values=cache, cache=cache)

    def _decode(self, chunk: list[int], past: int, first_kept: int) -> np.ndarray:
        """One llama_decode of ``chunk`` at positions ``past..``; the logits of the positions from
        ``first_kept`` on, ``[n, V]``."""
        b, n = self._batch, len(chunk)
        for i, token in enumerate(chunk):
            b.token[i], b.pos[i], b.n_seq_id[i] = token, past + i, 1
            b.seq_id[i][0] = 0
            b.logits[i] = i >= first_kept
        b.n_tokens = n
        if (rc := self._ll.llama_decode(self._ctx, b)) != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        n_out = n - max(first_kept, 0) if first_kept < n else 0
        if n_out == 0:
            return np.zeros((0, self.config.vocab_size), dtype=np.float32)
        ptr = self._ll.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_out, self.config.vocab_size)).copy()

    def __del__(self) -> None:
        ll = getattr(self, "_ll", None)
        if ll is not None and getattr(self, "_ctx", None):
            ll.llama_batch_free(self._batch)
            ll.llama_free(self._ctx)
            ll.llama_model_free(self._model)
            self._ctx = None


def tool(name: str) -> Path:
    """The path of llama.cpp's built tool ``name``; :class:`PeerUnavailableError` if not built."""
    exe = BIN / name
    if not exe.exists():
        raise PeerUnavailableError(f"{exe} is not built: run `make peers`")
    return exe


def llama_bench(
    path: str | Path, *, threads: int = 2, n_gen: int = 64, depth: int = 128, reps: int = 5
) -> dict[str, Any]:
    """llama.cpp's own benchmark of decoding (``llama-bench -p 0 -n n_gen -d depth``): tokens/s
    of ``n_gen`` one-token passes after a context of ``depth`` tokens, ``reps`` repetitions."""
    cmd = [
        str(tool("llama-bench")),
        "-m",
        str(path),
        "-t",
        str(threads),
        "-p",
        "0",
        "-n",
        str(n_gen),
    ]
    cmd += ["-d", str(depth), "-r", str(reps), "-o", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    (row,) = json.loads(out)
    return {
        "command": " ".join(["llama-bench", *cmd[1:]]),
        "tokens_per_s": float(row["avg_ts"]),
        "tokens_per_s_sd": float(row["stddev_ts"]),
        "samples_ts": [float(x) for x in row.get("samples_ts", [])],
        "build_commit": row.get("build_commit"),
        "cpu_info": row.get("cpu_info"),
        "model_size": int(row.get("model_size", 0)),
    }


# The engines' methods, beside the library's own (bench.run.CellRunner's): llama.cpp's kernels
# under this library's decoders, one token a pass and with prompt lookup drafting a chain.
ENGINE_METHODS = ("llamacpp_autoregressive", "llamacpp_lookup")
LIBRARY_METHODS = ("autoregressive", "speculative", "hf_autoregressive")


def weight_bytes(model: torch.nn.Module) -> int:
    """The bytes of a model's distinct weights, each read once by a one-token pass (a tied output
    layer counted once; the embedding table too, of which a pass reads one row: an upper bound)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if t.data_ptr() not in seen and t.dim() >= 2:  # weights, not norms' vectors
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


class EngineRunner:
    """Runs one cell of an engine method on a :class:`LlamaCppLM`, as ``CellRunner`` runs the
    library's: ``run(method, K, ids, seed)`` -> the stored cell."""

    def __init__(self, engine: LlamaCppLM, settings: Any, K_lookup: int) -> None:
        from ..decoding import AutoregressiveDecoder, SpeculativeDecoder
        from ..drafters import NgramDrafter

        w = settings.warp
        warps = dict(temperature=w.temperature, top_k=w.top_k, top_p=w.top_p)
        self.n = settings.max_new_tokens
        self.decoders = {
            "llamacpp_autoregressive": AutoregressiveDecoder(engine, **warps),
            "llamacpp_lookup": SpeculativeDecoder(
                NgramDrafter(engine.config.vocab_size), engine, K=K_lookup, **warps
            ),
        }

    def run(self, method: str, K: int, ids: torch.Tensor, seed: int) -> dict[str, Any]:
        r = self.decoders[method].generate_ids(ids.cpu(), self.n, None, seed=seed)
        fields = ("tokens", "elapsed_s", "n_steps", "n_proposed", "n_accepted")
        return {name: getattr(r, name) for name in fields} | {"prefill_ms": r.steps[0].target_ms}


def _plan(settings: Any, K_best: int, K_lookup: int, n_prompts: int) -> list[tuple[str, int]]:
    """Every (method, K), in an order rotated per prompt and repeat (drift spreads over all)."""
    configs = [(m, 0) for m in ENGINE_METHODS[:1]] + [("llamacpp_lookup", K_lookup)]
    configs += [("autoregressive", 0), ("speculative", K_best), ("hf_autoregressive", 0)]
    todo = []
    for rep in range(settings.repeats):
        for p in range(n_prompts):
            shift = (p + rep * n_prompts) % len(configs)
            todo += [(m, K, p, rep) for m, K in configs[shift:] + configs[:shift]]
    return todo


def side_by_side(
    settings: Any, out: str | Path, *, K_lookup: int = 4, progress: bool = True
) -> dict[str, Any]:
    """llama.cpp and the library on the embedded GGUF file, cell by cell on the same prompts,
    seeds, token counts and threads, stored at ``out``: llama.cpp's kernels one token a pass and
    with prompt lookup (:class:`EngineRunner`), the library's autoregressive baseline, its
    speculative decoding at ``settings``' first ``K`` (the tree its start-up chooses) and
    transformers' ``generate``; then llama.cpp's own benchmark, the machine's bandwidth and each
    engine's roofline (bandwidth over the bytes one token's pass reads)."""
    from tqdm.auto import tqdm

    from ..bench.run import CellRunner, start_up, timing_context
    from ..bench.settings import settings_record
    from ..models import find_smollm2_gguf, load_pair
    from ..results import atomic_write_json, load_prompts, memory_bandwidth_gbs, provenance

    if settings.pair != "default" or settings.device not in (None, "cpu"):
        raise ValueError("the peer run decodes the embedded GGUF file on the CPU (pair 'default')")
    prompts = load_prompts(settings.prompts)
    pair = load_pair(settings.pair, draft=settings.draft, dtype=settings.dtype, pack=settings.pack)
    engine = LlamaCppLM(find_smollm2_gguf(), threads=settings.threads or torch.get_num_threads())
    encoded = [pair.tokenizer(p["text"], return_tensors="pt").input_ids[0] for p in prompts]
    result: dict[str, Any] = {
        "status": "partial",
        "settings": settings_record(settings) | {"K_lookup": K_lookup},
        "pair": pair.describe(),
        "dtype_choice": settings.choice.record() if settings.choice is not None else None,
        "prompts": prompts,
        "costs": None,
        "cells": {},
    }
    result["provenance"] = provenance(
        device=pair.device, seed=settings.seed, settings=result["settings"]
    )
    context = timing_context(settings, [ids.numel() for ids in encoded])
    trees = start_up(pair, settings, result, Path(out), context)
    K = settings.K[0]
    runners = dict.fromkeys(ENGINE_METHODS, EngineRunner(engine, settings, K_lookup))
    runners |= dict.fromkeys(LIBRARY_METHODS, CellRunner(pair, settings, trees))
    for m, k in [("llamacpp_autoregressive", 0), ("llamacpp_lookup", K_lookup)] + [
        ("autoregressive", 0),
        ("speculative", K),
    ]:  # warm-up, unrecorded
        runners[m].run(m, k, encoded[0][:16], seed=0)
    for m, k, p, rep in tqdm(_plan(settings, K, K_lookup, len(encoded)), disable=not progress):
        cell = runners[m].run(m, k, encoded[p], seed=settings.seed * 1_000_003 + 1_000 * rep + p)
        result["cells"][f"{m}|{k}|{p}|{rep}"] = cell
    result["tree"] = list(trees[K])
    result |= _limits(engine, pair, settings, context, memory_bandwidth_gbs())
    result["summary"] = summarize_peers(result)
    result["status"] = "complete"
    atomic_write_json(out, result)
    return result


def _limits(engine: LlamaCppLM, pair: Any, settings: Any, context: int, bandwidth: float):
    """llama.cpp's own benchmark at the run's context and token count, and each engine's
    roofline: the measured bandwidth over the bytes a one-token pass reads."""
    lib_bytes = weight_bytes(pair.target)
    return {
        "llama_bench": llama_bench(
            engine.path, threads=engine.threads, n_gen=settings.max_new_tokens, depth=context
        ),
        "bandwidth_gb_s": bandwidth,
        "roofline": {
            "llamacpp": {
                "bytes_per_token": engine.weight_bytes,
                "tokens_per_s": bandwidth * 1e9 / engine.weight_bytes,
            },
            "library": {"bytes_per_token": lib_bytes, "tokens_per_s": bandwidth * 1e9 / lib_bytes},
        },
    }


def summarize_peers(result: dict[str, Any], seed: int = 0) -> list[dict[str, Any]]:
    """Per (method, K): tokens/s pooled over the cells, with a 95% bootstrap interval over
    prompts, and its speedup over llama.cpp's autoregressive cells (BCa, paired by prompt)."""
    from ..bench.analysis import speedup_interval

    groups: dict[tuple[str, int], dict[int, np.ndarray]] = {}
    for key, cell in result["cells"].items():
        m, k, p, _ = key.split("|")
        row = groups.setdefault((m, int(k)), {}).setdefault(int(p), np.zeros(4))
        prefill = cell.get("prefill_ms", np.nan) / 1e3  # the prompt's pass, which gives a token
        row += (
            len(cell["tokens"]),
            cell["elapsed_s"],
            len(cell["tokens"]) - 1,
            cell["elapsed_s"] - prefill,
        )
    rng, rows = np.random.default_rng(seed), []
    for (m, k), by_prompt in groups.items():
        sums = np.array(list(by_prompt.values()))
        draws = rng.integers(0, len(sums), (2000, len(sums)))
        boot = sums[draws, 0].sum(1) / sums[draws, 1].sum(1)
        rec = {"method": m, "K": k, "tokens_per_s": float(sums[:, 0].sum() / sums[:, 1].sum())}
        rec["tokens_per_s_ci"] = [float(x) for x in np.percentile(boot, [2.5, 97.5])]
        if np.isfinite(sums[:, 3]).all():  # after the prompt's pass: decoding alone
            rec["decode_tokens_per_s"] = float(sums[:, 2].sum() / sums[:, 3].sum())
        if m != "llamacpp_autoregressive" and len(sums) > 1:
            base = "llamacpp_autoregressive"
            rec["vs_llamacpp_ci"] = list(speedup_interval(result, m, k, baseline=base))
        rows.append(rec)
    return rows
