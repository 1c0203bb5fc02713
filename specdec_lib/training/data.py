"""On-policy data: the target's samples as token ids. A folder holds ``manifest.json`` (settings,
provenance, one entry per shard with its ``sampler``: ``"own"``, :func:`sample_batch`, or ``"hf"``)
and ``shard_NNNNN.npz`` (``tokens`` uint16, ``offsets`` int64 ``n + 1``, ``prompt_lens``,
``prompt_index``). A shard is a pure function of (seed, number, settings); runs resume."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..checks import non_negative_int, one_of, positive_int, real
from ..lm import cache_kwargs
from ..models import PAIRS, load_pair
from ..results import atomic_write, atomic_write_json, load_prompts, provenance, read_json
from ..sampling import sample
from ..settings import setting

__all__ = [
    "DataSettings",
    "Sequence",
    "generate_onpolicy",
    "iter_sequences",
    "load_manifest",
    "sample_batch",
    "summary",
]

MANIFEST = "manifest.json"
TOKEN_DTYPE = np.uint16


@dataclass
class DataSettings:
    """What defines a data folder (``gen-data``'s flags); a resumed run must match it exactly."""

    pair: str = setting("default", "model pair whose target samples the data", choices=PAIRS)
    dtype: str = setting("bfloat16", "dtype of the target", choices=("float32", "bfloat16"))
    prompts: str = setting("data/drafter/train_prompts.json", "prompts to continue (JSON)")
    batch_size: int = setting(64, "sequences sampled together")
    max_new_tokens: int = setting(256, "tokens sampled per sequence (fewer at EOS)")
    temperature: float = setting(1.0, "sampling temperature (> 0)")
    seed: int = setting(0, "seed; shard i is a pure function of (seed, i, settings)")
    threads: int | None = setting(None, "torch threads (default: torch's)")

    def __post_init__(self) -> None:
        one_of(self.pair, "pair", PAIRS)
        positive_int(self.batch_size, "batch_size")
        positive_int(self.max_new_tokens, "max_new_tokens")
        real(self.temperature, "temperature", "sampling", low=0.0, low_open=True)
        non_negative_int(self.seed, "seed")
        positive_int(self.threads, "threads", optional=True)

    def key(self) -> dict[str, Any]:
        """The settings that determine the data (threads only change the speed)."""
        d = asdict(self)
        d.pop("threads")
        return d


@dataclass
class Sequence:
    """One stored sequence: ``ids[:prompt_len]`` is the prompt, the rest the target's sample."""

    ids: np.ndarray
    prompt_len: int
    prompt_index: int = -1
    shard: int = -1
    extra: dict[str, Any] = field(default_factory=dict)


def _atomic_savez(path: Path, **arrays: np.ndarray) -> None:
    atomic_write(path, lambda f: np.savez_compressed(f, **arrays), binary=True)


def load_manifest(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise ValueError(f"{str(folder)!r} holds no {MANIFEST}: not an on-policy data folder")
    return read_json(path)


def shard_path(folder: str | Path, i: int) -> Path:
    return Path(folder) / f"shard_{i:05d}.npz"


def iter_sequences(folder: str | Path, shards: Any = None) -> Iterator[Sequence]:
    """A data folder's sequences, shard by shard (``shards``: shard numbers; default: all)."""
    manifest = load_manifest(folder)
    numbers = [s["shard"] for s in manifest["shards"]] if shards is None else list(shards)
    for i in numbers:
        with np.load(shard_path(folder, i)) as z:
            tokens, offsets = z["tokens"], z["offsets"]
            plens, pidx = z["prompt_lens"], z["prompt_index"]
        for j in range(len(plens)):
            yield Sequence(
                ids=tokens[offsets[j] : offsets[j + 1]].astype(np.int64),
                prompt_len=int(plens[j]),
                prompt_index=int(pidx[j]),
                shard=i,
            )


def _shard_prompts(n_prompts: int, batch_size: int, seed: int, shard: int) -> np.ndarray:
    # Every prompt equally often over a run: walk seeded permutations of the prompt list.
    per_epoch = max(1, n_prompts // batch_size) if n_prompts >= batch_size else 1
    epoch, pos = divmod(shard, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n_prompts)
    if n_prompts >= batch_size:
        return order[pos * batch_size : (pos + 1) * batch_size]
    return np.resize(order, batch_size)


def _left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts as one left-padded ``[n, width]`` batch of ids, and its mask."""
    n, width = len(prompts), max(map(len, prompts))
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, width - len(p) :] = torch.tensor(p)
        mask[r, width - len(p) :] = 1
    return ids, mask


@torch.inference_mode()
def sample_batch(
    model: Any,
    prompts: list[list[int]],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    eos: set[int] | frozenset[int] = frozenset(),
    pad_id: int = 0,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Sample continuations of ``prompts`` from ``model`` at ``temperature`` (plain softmax, via
    :func:`~specdec_lib.sampling.sample`), batched with a KV cache and left padding; a row leaves
    at EOS (kept) or ``max_new_tokens``. Returns prompt + continuation per row."""
    from transformers import DynamicCache

    ids, mask = _left_pad(prompts, pad_id)
    n, width = ids.shape
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=pos,
        use_cache=True,
        **cache_kwargs(cache),
        logits_to_keep=1,
    )
    rows = torch.arange(n)  # which prompt each live batch row belongs to
    last_pos = pos[:, -1]
    new: list[list[int]] = [[] for _ in range(n)]
    eos_t = torch.tensor(sorted(eos), dtype=torch.long)
    for step in range(max_new_tokens):
        probs = torch.softmax(out.logits[:, -1].float() / temperature, dim=-1)
        x = sample(probs, generator)
        for r, t in zip(rows.tolist(), x.tolist(), strict=True):
            new[r].append(t)
        done = torch.isin(x, eos_t) if len(eos_t) else torch.zeros_like(x, dtype=torch.bool)
        if step + 1 == max_new_tokens or bool(done.all()):
            break
        if bool(done.any()):
            keep = torch.nonzero(~done).view(-1)
            cache.batch_select_indices(keep)
            rows, x, mask, last_pos = rows[keep], x[keep], mask[keep], last_pos[keep]
        mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype)], dim=1)
        last_pos = last_pos + 1
        out = model(
            input_ids=x.view(-1, 1),
            attention_mask=mask,
            position_ids=last_pos.view(-1, 1),
            use_cache=True,
            **cache_kwargs(cache),
            logits_to_keep=1,
        )
    return [p + c for p, c in zip(prompts, new, strict=True)]


def generate_onpolicy(
    folder: str | Path,
    n_tokens: int,
    settings: DataSettings | None = None,
    *,
    progress: bool = True,
    pair: Any = None,
) -> dict[str, Any]:
    """Sample from the target until ``folder`` holds ``n_tokens`` generated tokens, resuming at
    the next shard; raises ``ValueError`` for a folder made with other settings."""
    from tqdm.auto import tqdm

    positive_int(n_tokens, "n_tokens", "generated tokens wanted")
    settings = settings or DataSettings()
    folder = Path(folder)
    prompts = load_prompts(settings.prompts)
    manifest = _open_manifest(folder, settings)
    generated = sum(s["generated_tokens"] for s in manifest["shards"])
    if generated >= n_tokens:
        return manifest
    if settings.threads:
        torch.set_num_threads(settings.threads)
    if pair is None:
        pair = load_pair(settings.pair, dtype=settings.dtype)
    encoded = _EncodedPrompts.of(pair.tokenizer, prompts)
    manifest["provenance"].append(
        provenance(
            device="cpu", seed=settings.seed, settings={**asdict(settings), "n_tokens": n_tokens}
        )
    )
    folder.mkdir(parents=True, exist_ok=True)
    bar = tqdm(
        total=n_tokens, initial=generated, unit="tok", disable=not progress, desc="on-policy data"
    )
    shard = max((s["shard"] for s in manifest["shards"]), default=-1) + 1
    while generated < n_tokens:
        entry = _generate_shard(folder, shard, pair.target, encoded, settings)
        manifest["shards"].append(entry)
        atomic_write_json(folder / MANIFEST, manifest)
        generated += entry["generated_tokens"]
        bar.update(entry["generated_tokens"])
        shard += 1
    bar.close()
    return manifest


def _open_manifest(folder: Path, settings: DataSettings) -> dict[str, Any]:
    """The folder's manifest to extend (refused if made with other settings), or a new one."""
    manifest_path = folder / MANIFEST
    if manifest_path.is_file():
        manifest = read_json(manifest_path)
        if manifest["settings"] != settings.key():
            raise ValueError(
                f"{str(folder)!r} was generated with other settings ({manifest['settings']}); "
                "use another folder, or the same settings to extend it"
            )
        return manifest
    return {"settings": settings.key(), "shards": [], "provenance": []}


@dataclass
class _EncodedPrompts:
    """The prompts as token ids, with the tokenizer's EOS (which ends a sample) and padding."""

    ids: list[list[int]]
    eos: set[int]
    pad_id: int

    @classmethod
    def of(cls, tok: Any, prompts: list[dict[str, Any]]) -> _EncodedPrompts:
        ids = [tok(p["text"], return_tensors="pt").input_ids[0].tolist() for p in prompts]
        eos = {int(tok.eos_token_id)} if tok.eos_token_id is not None else set()
        pad_id = int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id or 0)
        return cls(ids, eos, pad_id)


def _generate_shard(
    folder: Path, shard: int, target: Any, encoded: _EncodedPrompts, settings: DataSettings
) -> dict[str, Any]:
    """Sample shard number ``shard``, save it, and return its manifest entry."""
    t0 = time.perf_counter()
    chosen = _shard_prompts(len(encoded.ids), settings.batch_size, settings.seed, shard)
    shard_seed = settings.seed * 1_000_003 + shard
    seqs = sample_batch(
        target,
        [encoded.ids[i] for i in chosen],
        settings.max_new_tokens,
        temperature=settings.temperature,
        eos=encoded.eos,
        pad_id=encoded.pad_id,
        generator=torch.Generator().manual_seed(shard_seed),
    )
    lens = np.array([len(s) for s in seqs])
    plens = np.array([len(encoded.ids[i]) for i in chosen], dtype=np.int32)
    _atomic_savez(
        shard_path(folder, shard),
        tokens=np.concatenate([np.asarray(s, dtype=TOKEN_DTYPE) for s in seqs]),
        offsets=np.r_[0, np.cumsum(lens)].astype(np.int64),
        prompt_lens=plens,
        prompt_index=chosen.astype(np.int32),
    )
    return {
        "shard": shard,
        "sampler": "own",
        "sequences": len(seqs),
        "generated_tokens": int((lens - plens).sum()),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def summary(folder: str | Path) -> dict[str, Any]:
    """Counts of a data folder: shards, sequences, generated tokens, tokens per second."""
    m = load_manifest(folder)
    shards = m["shards"]
    seconds = sum(s["seconds"] for s in shards)
    tokens = sum(s["generated_tokens"] for s in shards)
    return {
        "shards": len(shards),
        "sequences": sum(s["sequences"] for s in shards),
        "generated_tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds if seconds else float("nan"),
    }
