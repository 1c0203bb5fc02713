"""Train a drafter (:mod:`specdec_lib.heads`) on on-policy data (:mod:`specdec_lib.distill`).

Two architectures share one pipeline: ``feature`` (a head reading the target's hidden states,
EAGLE-style) and ``layers`` (a small causal LM on tokens: the target's frozen embedding and output
rows around a few layers copied from the target, or random ones for a standalone draft).

Two stages, both resumable:

1. **Teacher pass.** The target is teacher-forced over every stored sequence once: its last hidden
   states ``h_j`` (all positions) and its distribution ``p_j`` at temperature 1 (the top ``top`` tokens
   of every generated position) go to a local cache (``.cache/specdec/teacher``, not committed: it is
   recomputed from the committed token ids). One file per data shard.
2. **Distillation.** The head reads ``(h_{j-1}, x_j)`` and is trained so that its ``q_j`` matches
   ``p_j``. The loss is the cross-entropy ``-sum_x p_j(x) log q_j(x)`` over the stored top tokens plus
   ``tv_weight`` times ``1 - sum_x min(p_j(x), q_j(x))`` (the rejection probability: DistillSpec's
   TV-style objective, the quantity speculative decoding actually pays for) plus ``feature_weight``
   times a smooth-L1 loss between ``ĥ_j`` and the target's ``h_j`` (EAGLE), which keeps the head's
   own features usable when it drafts several tokens in a row. Checkpoints (weights, optimiser,
   step, random state) are written atomically every ``checkpoint_every`` steps.

The acceptance rate of the result is measured by decoding (notebook 05, ``bench``), never taken
from the training loss.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .distill import iter_sequences, load_manifest
from .heads import rms_normalise
from .results import atomic_write, atomic_write_json, provenance

__all__ = ["ARCHS", "TrainSettings", "choose_subset", "teacher_pass", "train_drafter"]

ARCHS = ("feature", "layers")


def _default_cache() -> str:
    return os.environ.get("SPECDEC_CACHE", ".cache/specdec")


@dataclass
class TrainSettings:
    data: str = "data/drafter/onpolicy"
    out: str = "data/drafter/feature_head.safetensors"
    pair: str = "default"
    teacher_dtype: str = "bfloat16"
    top: int = 64  # teacher tokens kept per position
    subset_size: int = 8192  # tokens the head can propose
    arch: str = "feature"  # feature (reads target features) | layers (a small LM on tokens)
    n_layers: int = 1
    init_layer: int | None = -1  # feature head: the target layer its layers start from
    init_layers: tuple[int, ...] | None = (
        0,
        -1,
    )  # layers draft: target layers to copy (None: random)
    # Target layers whose outputs the teacher pass stores (-1, the last, is required: it is the
    # regression target), and the ones the head reads (a subset).
    teacher_layers: tuple[int, ...] = (2, 14, -1)
    # The defaults are the committed drafter's recipe (chosen by the pilot in notebook 05).
    feature_layers: tuple[int, ...] = (2, 14, -1)
    epochs: float = 3.0
    batch_sequences: int = 8
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup_steps: int = 50
    tv_weight: float = 1.0
    feature_weight: float = 0.1
    max_shards: int | None = None  # use only the first shards (learning curves)
    eval_shards: int = 2  # the last shards of the folder are held out
    seed: int = 0
    checkpoint_every: int = 200
    threads: int | None = None
    cache: str = field(
        default_factory=_default_cache
    )  # teacher pass and checkpoints (not committed)

    def __post_init__(self) -> None:
        for name in ("top", "subset_size", "n_layers", "batch_sequences", "checkpoint_every"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not (self.epochs > 0 and math.isfinite(self.epochs)):
            raise ValueError(f"epochs must be > 0, got {self.epochs!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")
        if self.init_layers is not None:
            self.init_layers = tuple(int(i) for i in self.init_layers)
        self.teacher_layers = tuple(int(i) for i in self.teacher_layers)
        self.feature_layers = tuple(int(i) for i in self.feature_layers)
        if -1 not in self.teacher_layers:
            raise ValueError(
                f"teacher_layers must include -1 (the last layer), got {self.teacher_layers}"
            )
        if not self.feature_layers or not set(self.feature_layers) <= set(self.teacher_layers):
            raise ValueError(
                f"feature_layers must be a non-empty subset of teacher_layers {self.teacher_layers}, "
                f"got {self.feature_layers}"
            )
        if (
            isinstance(self.eval_shards, bool)
            or not isinstance(self.eval_shards, int)
            or self.eval_shards < 0
        ):
            raise ValueError(
                f"eval_shards must be a non-negative integer, got {self.eval_shards!r}"
            )


# --------------------------------------------------------------------------------------------
# Stage 1: the teacher pass
# --------------------------------------------------------------------------------------------


def _teacher_dir(settings: TrainSettings) -> Path:
    m = load_manifest(settings.data)
    key = {
        "data": m["settings"],
        "pair": settings.pair,
        "dtype": settings.teacher_dtype,
        "top": settings.top,
        "layers": list(settings.teacher_layers),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return Path(settings.cache) / "teacher" / digest


@torch.inference_mode()
def _teacher_sequences(
    target: Any, seqs: list, top: int, layers: tuple[int, ...]
) -> list[dict[str, torch.Tensor]]:
    from .decoding import capture_features

    n = len(seqs)
    width = max(len(s.ids) for s in seqs)
    ids = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, : len(s.ids)] = torch.as_tensor(s.ids)
        mask[r, : len(s.ids)] = 1
    with capture_features(target, layers) as captured:
        logits = target(input_ids=ids, attention_mask=mask, use_cache=False).logits
    feats = captured[-1]
    out = []
    for r, s in enumerate(seqs):
        L, start = len(s.ids), max(s.prompt_len - 1, 0)
        p = torch.softmax(logits[r, start : L - 1].float(), dim=-1)
        top_p, top_i = p.topk(top, dim=-1)
        out.append(
            {
                "ids": torch.as_tensor(s.ids, dtype=torch.int32),
                "start": torch.tensor(start),
                "feats": feats[r, :L].to(torch.bfloat16).clone(),
                "top_i": top_i.to(torch.int32),
                "top_p": top_p.to(torch.float16),
            }
        )
    return out


def teacher_pass(settings: TrainSettings, *, progress: bool = True, pair: Any = None) -> Path:
    """Teacher-force the target over every shard not yet cached; return the cache folder."""
    from tqdm.auto import tqdm

    from .models import load_pair

    folder = _teacher_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    shards = [s["shard"] for s in load_manifest(settings.data)["shards"]]
    todo = [i for i in shards if not (folder / f"shard_{i:05d}.pt").is_file()]
    if not todo:
        return folder
    if pair is None:
        pair = load_pair(settings.pair, dtype=settings.teacher_dtype)
    for i in tqdm(todo, desc="teacher pass", unit="shard", disable=not progress):
        seqs = sorted(iter_sequences(settings.data, [i]), key=lambda s: len(s.ids))
        records = []
        for b in range(0, len(seqs), 8):
            records += _teacher_sequences(
                pair.target, seqs[b : b + 8], settings.top, settings.teacher_layers
            )
        _atomic_torch_save(records, folder / f"shard_{i:05d}.pt")
    return folder


def _load_records(folder: Path, shards: list[int]) -> list[dict[str, torch.Tensor]]:
    out = []
    for i in shards:
        out += torch.load(folder / f"shard_{i:05d}.pt", weights_only=True)
    return out


def choose_subset(records: list[dict[str, torch.Tensor]], size: int, vocab: int) -> torch.Tensor:
    """The ``size`` tokens with the most teacher probability mass over the training positions."""
    mass = torch.zeros(vocab, dtype=torch.float64)
    for r in records:
        mass.index_add_(0, r["top_i"].flatten().long(), r["top_p"].flatten().double())
    return mass.topk(min(size, vocab)).indices.sort().values


# --------------------------------------------------------------------------------------------
# Stage 2: distillation
# --------------------------------------------------------------------------------------------


def _columns(settings: TrainSettings, H: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Columns of the stored features that the head reads, and those of the last layer."""
    block = lambda i: torch.arange(i * H, (i + 1) * H)  # noqa: E731
    pos = {layer: i for i, layer in enumerate(settings.teacher_layers)}
    cols = torch.cat([block(pos[layer]) for layer in settings.feature_layers])
    return cols, block(pos[-1])


def _batch(
    records: list[dict[str, torch.Tensor]],
    remap: torch.Tensor,
    dtype: torch.dtype,
    columns: tuple[torch.Tensor, torch.Tensor],
):
    """Pad a batch: head inputs (h_{j-1}, x_j) for j = 1..L-1, and the teacher targets."""
    cols, last = columns
    n = len(records)
    T = max(len(r["ids"]) for r in records) - 1
    H = len(last)
    top = records[0]["top_i"].shape[-1]
    feats = torch.zeros(n, T, len(cols), dtype=dtype)
    toks = torch.zeros(n, T, dtype=torch.long)
    next_h = torch.zeros(n, T, H, dtype=dtype)
    hmask = torch.zeros(n, T, dtype=torch.bool)
    t_idx = torch.zeros(
        n, T, top, dtype=torch.long
    )  # subset index of each teacher token (-1: none)
    t_p = torch.zeros(n, T, top)
    pmask = torch.zeros(n, T, dtype=torch.bool)
    for r, rec in enumerate(records):
        L = len(rec["ids"])
        f = rec["feats"].to(dtype)
        feats[r, : L - 1] = f[: L - 1, cols]
        toks[r, : L - 1] = rec["ids"][1:].long()
        next_h[r, : L - 2] = f[1 : L - 1, last]
        hmask[r, : L - 2] = True
        # q at head position j (row j-1) predicts x_{j+1}: the teacher's p_j, stored from `start`.
        s = int(rec["start"])
        rows = torch.arange(max(s, 1), L - 1)
        if len(rows):
            src = rows - s
            t_idx[r, rows - 1] = remap[rec["top_i"][src].long()]
            t_p[r, rows - 1] = rec["top_p"][src].float()
            pmask[r, rows - 1] = True
    return feats, toks, next_h, hmask, t_idx, t_p, pmask


def _distill_terms(logq, t_idx, t_p, pmask) -> dict[str, torch.Tensor]:
    """Cross-entropy to the teacher's top tokens and the acceptance ``sum min(p, q)`` over them."""
    valid = t_idx >= 0
    lq = torch.gather(logq, -1, t_idx.clamp(min=0)) * valid
    p = t_p * valid
    ce = -(p * lq).sum(-1)
    alpha = torch.minimum(p, lq.exp() * valid).sum(-1)
    m = pmask.float()
    n_pos = m.sum().clamp(min=1)
    return {"ce": (ce * m).sum() / n_pos, "alpha": (alpha * m).sum() / n_pos}


def _losses(head, batch, settings: TrainSettings) -> dict[str, torch.Tensor]:
    if settings.arch == "layers":
        ids, t_idx, t_p, pmask = batch
        hidden, _ = head.hidden(ids)
        logq = torch.log_softmax(head.logits(hidden).float(), dim=-1)
        out = _distill_terms(logq, t_idx, t_p, pmask)
        out["loss"] = out["ce"] + settings.tv_weight * (1 - out["alpha"])
        return out
    feats, toks, next_h, hmask, t_idx, t_p, pmask = batch
    T = feats.shape[1]
    pos = torch.arange(1, T + 1).unsqueeze(0).expand(feats.shape[0], T)
    hidden, _ = head(feats, toks, position_ids=pos)
    logq = torch.log_softmax(head.logits(hidden).float(), dim=-1)  # [n, T, |S|]
    out = _distill_terms(logq, t_idx, t_p, pmask)
    # On RMS-normalised features: the final norm (and the head's input norm) ignore the scale.
    feat = F.smooth_l1_loss(
        rms_normalise(hidden.float()), rms_normalise(next_h.float()), reduction="none"
    ).mean(-1)
    out["feature"] = (feat * hmask).sum() / hmask.sum().clamp(min=1)
    out["loss"] = (
        out["ce"]
        + settings.tv_weight * (1 - out["alpha"])
        + settings.feature_weight * out["feature"]
    )
    return out


def _batch_tokens(records: list[dict[str, torch.Tensor]], remap: torch.Tensor):
    """Pad a batch for a token-level draft: ids, and the teacher's p_j at position j."""
    n = len(records)
    T = max(len(r["ids"]) for r in records) - 1
    top = records[0]["top_i"].shape[-1]
    ids = torch.zeros(n, T, dtype=torch.long)
    t_idx = torch.zeros(n, T, top, dtype=torch.long)
    t_p = torch.zeros(n, T, top)
    pmask = torch.zeros(n, T, dtype=torch.bool)
    for r, rec in enumerate(records):
        L, s = len(rec["ids"]), int(rec["start"])
        ids[r, : L - 1] = rec["ids"][: L - 1].long()
        t_idx[r, s : L - 1] = remap[rec["top_i"].long()]
        t_p[r, s : L - 1] = rec["top_p"].float()
        pmask[r, s : L - 1] = True
    return ids, t_idx, t_p, pmask


def _make_batch(settings: TrainSettings, records, remap, columns):
    if settings.arch == "layers":
        return _batch_tokens(records, remap)
    return _batch(records, remap, torch.float32, columns)


def _new_draft(
    settings: TrainSettings, target: Any, subset: torch.Tensor, *, init: bool, scale: float = 1.0
):
    from .heads import FeatureHead, LayerDraft

    if settings.arch == "layers":
        layers = settings.init_layers
        if init or layers is None:
            return LayerDraft(target, subset, init_layers=layers, n_layers=settings.n_layers)
        return LayerDraft(target, subset, init_layers=None, n_layers=len(layers))
    return FeatureHead(
        target,
        subset,
        n_layers=settings.n_layers,
        feature_layers=settings.feature_layers,
        init_layer=settings.init_layer if init else None,
        scale=scale,
    )


def _feature_scale(records: list[dict[str, torch.Tensor]], last: torch.Tensor) -> float:
    """The median RMS of the target's last hidden state over (up to) 200 training sequences."""
    rms = [r["feats"][:, last].float().pow(2).mean(-1).sqrt() for r in records[:200]]
    return float(torch.cat(rms).median()) if rms else 1.0


def _atomic_torch_save(obj: Any, path: Path) -> None:
    atomic_write(path, lambda f: torch.save(obj, f), binary=True)


def train_drafter(
    settings: TrainSettings, *, progress: bool = True, pair: Any = None, log: Any = print
) -> dict[str, Any]:
    """Teacher pass, then distillation; returns the training log (also written next to ``out``)."""
    from tqdm.auto import tqdm

    from .heads import save_head
    from .models import load_pair

    if settings.threads:
        torch.set_num_threads(settings.threads)
    if pair is None:
        pair = load_pair(settings.pair, dtype=settings.teacher_dtype)
    cache = teacher_pass(settings, progress=progress, pair=pair)
    shards = [s["shard"] for s in load_manifest(settings.data)["shards"]]
    n_eval = min(settings.eval_shards, max(len(shards) - 1, 0))
    eval_shards = shards[len(shards) - n_eval :] if n_eval else []
    train_shards = shards[: len(shards) - n_eval]
    if settings.max_shards is not None:
        train_shards = train_shards[: settings.max_shards]
    train = _load_records(cache, train_shards)
    evals = _load_records(cache, eval_shards)
    V = pair.target.config.vocab_size
    subset = choose_subset(train, settings.subset_size, V)
    remap = torch.full((V,), -1, dtype=torch.long)
    remap[subset] = torch.arange(len(subset))

    torch.manual_seed(settings.seed)
    # The head trains in float32 on top of a float32 copy of the frozen parts of the target.
    columns = _columns(settings, pair.target.config.hidden_size)
    scale = _feature_scale(train, columns[1])
    head = _new_draft(settings, pair.target, subset, init=True, scale=scale)
    head.float()
    head.frozen_float32()
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
    steps_per_epoch = math.ceil(len(train) / settings.batch_sequences)
    total = max(1, int(settings.epochs * steps_per_epoch))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            min(1.0, (s + 1) / settings.warmup_steps)
            * 0.5
            * (1 + math.cos(math.pi * min(s, total) / total))
        ),
    )
    ckpt_dir = Path(settings.cache) / "train" / Path(settings.out).stem
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    ckpt = ckpt_dir / "checkpoint.pt"
    history: list[dict[str, float]] = []
    step = 0
    if ckpt.is_file():
        state = torch.load(ckpt, weights_only=False)
        if state["settings"] == asdict(settings):
            head.load_state_dict(state["head"])
            opt.load_state_dict(state["opt"])
            sched.load_state_dict(state["sched"])
            step, history = state["step"], state["history"]
            torch.set_rng_state(state["rng"])
            log(f"resumed at step {step} of {total}")
    rng = np.random.default_rng(settings.seed)
    orders = [rng.permutation(len(train)) for _ in range(math.ceil(settings.epochs) + 1)]
    head.train()
    t0 = time.perf_counter()
    bar = tqdm(total=total, initial=step, desc="distil", unit="step", disable=not progress)
    while step < total:
        epoch, b = divmod(step, steps_per_epoch)
        idx = orders[epoch][b * settings.batch_sequences : (b + 1) * settings.batch_sequences]
        batch = _make_batch(settings, [train[i] for i in idx], remap, columns)
        losses = _losses(head, batch, settings)
        opt.zero_grad(set_to_none=True)
        losses["loss"].backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        step += 1
        bar.update(1)
        bar.set_postfix(alpha=f"{losses['alpha'].item():.3f}", ce=f"{losses['ce'].item():.2f}")
        if step % settings.checkpoint_every == 0 or step == total:
            row = {
                "step": step,
                "epoch": step / steps_per_epoch,
                "seconds": time.perf_counter() - t0,
            }
            row.update({f"train_{k}": float(v.detach()) for k, v in losses.items()})
            row.update(evaluate(head, evals, remap, settings, columns))
            history.append(row)
            log(json.dumps({k: round(v, 4) for k, v in row.items()}))
            _atomic_torch_save(
                {
                    "settings": asdict(settings),
                    "head": head.state_dict(),
                    "opt": opt.state_dict(),
                    "sched": sched.state_dict(),
                    "step": step,
                    "history": history,
                    "rng": torch.get_rng_state(),
                },
                ckpt,
            )
    bar.close()
    head.eval()
    record = {
        "settings": asdict(settings),
        "history": history,
        "train_sequences": len(train),
        "train_tokens": int(sum(len(r["top_p"]) for r in train)),
        "eval_tokens": int(sum(len(r["top_p"]) for r in evals)),
        # which shards, by number: "the last N" depends on the folder at the time
        "train_shards": [int(x) for x in train_shards],
        "heldout_shards": [int(x) for x in eval_shards],
        "subset_mass": _subset_mass(evals, remap),
        "provenance": provenance(device="cpu", seed=settings.seed, settings=asdict(settings)),
    }
    out = Path(settings.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    head_out = _new_draft(settings, pair.target, subset, init=False, scale=scale)
    head_out.load_state_dict(head.state_dict())
    if settings.arch == "layers":
        head_out.config_dict["init_layers"] = head.config_dict["init_layers"]
    save_head(head_out, out, {"train_tokens": record["train_tokens"]})
    atomic_write_json(out.with_suffix(".train.json"), record)
    return record


@torch.no_grad()
def evaluate(
    head, records, remap, settings: TrainSettings, columns, batch: int = 16
) -> dict[str, float]:
    """Mean loss terms on held-out records (``alpha`` here is a lower bound: top tokens only)."""
    if not records:
        return {}
    was = head.training
    head.eval()
    sums: dict[str, float] = {}
    n = 0
    for b in range(0, len(records), batch):
        chunk = records[b : b + batch]
        out = _losses(head, _make_batch(settings, chunk, remap, columns), settings)
        w = sum(len(r["top_p"]) for r in chunk)
        for k, v in out.items():
            sums[k] = sums.get(k, 0.0) + float(v) * w
        n += w
    head.train(was)
    return {f"eval_{k}": v / n for k, v in sums.items()}


def _subset_mass(records, remap) -> float:
    """Mean teacher mass (within the stored top tokens) that falls in the subset."""
    tot = inside = 0.0
    for r in records:
        p = r["top_p"].double()
        tot += float(p.sum())
        inside += float((p * (remap[r["top_i"].long()] >= 0)).sum())
    return inside / tot if tot else float("nan")


def model_card(
    weights: str | Path, train_record: dict[str, Any], evaluation: dict[str, Any]
) -> str:
    """A markdown model card for a trained draft, from its training record and an evaluation
    (``eval-drafter`` output): recipe, data, compute, acceptance, cost, and the rebuild commands."""
    from .distill import load_manifest, summary

    s = train_record["settings"]
    prov = train_record["provenance"]
    data = summary(s["data"])
    dm = load_manifest(s["data"])["settings"]
    hist = train_record["history"]
    last = hist[-1] if hist else {}
    size_mb = Path(weights).stat().st_size / 1e6
    lines = [
        f"# Model card: `{Path(weights).name}`",
        "",
        "A draft for speculative decoding with the embedded default target, SmolLM2-135M-Instruct "
        "(`load_pair('default', draft='trained')`). Exact like any draft: the output of speculative "
        "decoding follows the target's distribution whatever the draft proposes (notebooks 01-02).",
        "",
        "## Recipe",
        "",
        f"- Architecture: `{s['arch']}`"
        + (
            f", {s['n_layers']} Llama layer(s) initialised from target layer {s['init_layer']}, "
            f"reading target layers {list(s['feature_layers'])}"
            if s["arch"] == "feature"
            else f", layers copied from target layers {s['init_layers']}"
        )
        + f"; proposes only the {s['subset_size']:,} tokens with the most teacher mass "
        f"({train_record['subset_mass']:.1%} of the held-out teacher mass within its top "
        f"{s['top']}).",
        f"- Loss: cross-entropy to the teacher's top {s['top']} tokens + {s['tv_weight']} x "
        f"(1 - sum min(p, q))"
        + (f" + {s['feature_weight']} x smooth-L1 on features" if s["arch"] == "feature" else "")
        + f"; AdamW, lr {s['lr']}, cosine, {s['epochs']} epochs, {s['batch_sequences']} "
        f"sequences per step, seed {s['seed']}.",
        f"- Size: {size_mb:.1f} MB on disk (its own weights only; the embedding, final norm and "
        "output rows are read from the target).",
        "",
        "## Data",
        "",
        f"- On-policy: {data['generated_tokens']:,} tokens in {data['sequences']:,} sequences "
        f"sampled from the target ({dm['dtype']}, T = {dm['temperature']}, "
        f"{dm['max_new_tokens']} new tokens per prompt) after the prompts of `{dm['prompts']}`; "
        f"generation took {data['seconds'] / 3600:.2f} h ({data['tokens_per_s']:.0f} tokens/s).",
        f"- Training positions: {train_record['train_tokens']:,}; held-out positions "
        f"{train_record['eval_tokens']:,} (the last {s['eval_shards']} shards).",
        "- Teacher distributions recomputed by teacher-forcing the target "
        f"({s['teacher_dtype']}); only token ids are stored (`{s['data']}`).",
        "",
        "## Compute",
        "",
        f"- Distillation: {last.get('step', 0)} steps in {last.get('seconds', 0) / 60:.0f} min "
        f"on {prov.get('device', 'cpu')}, torch {prov.get('torch')}, transformers "
        f"{prov.get('transformers')}, commit {str(prov.get('git_commit'))[:10]}, "
        f"{prov.get('date')}.",
        "",
        "## Measured (by decoding, K = 1, held-out prompts)",
        "",
        "| temperature | alpha | accepted / proposed |",
        "|---|---|---|",
    ]
    for T, r in evaluation["by_temperature"].items():
        label = "greedy" if float(T) == 0 else T
        lines.append(f"| {label} | {r['alpha']:.3f} | {r['accepted']:,} / {r['proposed']:,} |")
    c = evaluation["costs"]
    ep = evaluation["provenance"]
    lines += [
        "",
        f"Cost: c = t_draft / t_target(1) = {c['c']:.3f} ({c['t_draft_s'] * 1e3:.1f} ms / "
        f"{c['t_target_s'][0] * 1e3:.1f} ms, {evaluation['pair']['dtype']}), measured "
        f"{ep.get('date')} on {ep.get('device', 'cpu')}.",
        f"Held-out prompts: `{ep['settings'].get('prompts')}`.",
        "",
        "## Limitations",
        "",
        *_limitations(s),
        "",
        "## Rebuild",
        "",
        "```",
        "python -m specdec_lib gen-data --out {data} --tokens {tok} --batch-size {b} "
        "--max-new-tokens {m} --seed {seed}".format(
            data=s["data"],
            tok=data["generated_tokens"],
            b=dm["batch_size"],
            m=dm["max_new_tokens"],
            seed=dm["seed"],
        ),
        _train_command(s, weights),
        f"python -m specdec_lib eval-drafter --draft {weights} --out <results.json>",
        "```",
        "",
    ]
    return "\n".join(lines)


def _limitations(s: dict[str, Any]) -> list[str]:
    out = []
    if s["arch"] == "feature":
        fused = len(s["feature_layers"]) > 1
        out += [
            "- Trained for one draft step: beyond the first drafted token the head reads its own "
            "output instead of the target's features"
            + (" (one layer's worth, where it was trained on fused ones)" if fused else "")
            + ", so acceptance falls along a longer draft.",
            "- It needs the target's hidden states: the first step of a request drafts nothing, "
            "and transformers' assisted generation cannot drive it (it drives causal-LM drafts).",
        ]
    out.append(
        "- It can propose only its token subset (q = 0 elsewhere): still exact, but acceptance "
        "is bounded by the target's mass on the subset."
    )
    return out


def _train_command(s: dict[str, Any], weights: str | Path) -> str:
    defaults = asdict(TrainSettings())
    skip = {"out", "cache", "threads"}
    parts = ["python -m specdec_lib train-drafter", f"--out {weights}"]
    for k, v in s.items():
        if (
            k in skip
            or v == defaults.get(k)
            or (isinstance(v, list) and tuple(v) == defaults.get(k))
        ):
            continue
        flag = "--" + k.replace("_", "-")
        if k == "init_layers":
            parts.append(f"{flag} {'none' if v is None else ','.join(map(str, v))}")
        elif isinstance(v, (list, tuple)):
            parts.append(f"{flag} {' '.join(map(str, v))}")
        else:
            parts.append(f"{flag} {v}")
    return " ".join(parts)
