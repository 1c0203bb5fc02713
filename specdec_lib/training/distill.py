"""Distil a drafter (:mod:`specdec_lib.drafters.heads`) on on-policy data (:mod:`.data`). Stage 1
caches the target's hidden states ``h_j`` and top-``top`` distribution ``p_j`` per shard; stage 2
trains ``q_j`` on cross-entropy to ``p_j`` + ``tv_weight`` (1 - sum min(p, q)) + ``feature_weight``
smooth-L1 from ``ĥ_j`` to ``h_j`` (feature heads only). Both stages resume from their files."""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from transformers import get_cosine_schedule_with_warmup

from ..checks import non_negative_int, one_of, positive_int, real
from ..config import CACHE_DIR
from ..drafters.heads import FeatureHead, LayerDraft, load_head, rms_normalise, save_head
from ..lm import capture_features
from ..models import PAIRS, load_pair
from ..results import atomic_write, atomic_write_json, provenance
from ..settings import setting
from .data import iter_sequences, load_manifest

__all__ = [
    "ARCHS",
    "TrainSettings",
    "choose_subset",
    "teacher_pass",
    "train_drafter",
    "unrolled_hidden",
    "unrolled_mask",
]

ARCHS = ("feature", "layers")
# The teacher cache's record layout, part of its folder's key: a new layout never reads an old one.
TEACHER_FORMAT = 2


@dataclass
class TrainSettings:
    """What defines a trained draft (``train-drafter``'s flags; defaults: the committed one)."""

    data: str = setting("data/drafter/onpolicy", "on-policy data folder")
    out: str = setting("data/drafter/feature_head.safetensors", "where the weights go")
    pair: str = setting("default", "model pair whose target teaches", choices=PAIRS)
    teacher_dtype: str = setting(
        "bfloat16", "dtype of the teacher pass", choices=("float32", "bfloat16")
    )
    top: int = setting(64, "teacher tokens kept per position")
    subset_size: int = setting(8192, "tokens the draft can propose")
    arch: str = setting(
        "feature",
        "feature: a head on the target's hidden states; layers: a small LM on tokens",
        choices=ARCHS,
    )
    n_layers: int = setting(1, "decoder layers of the draft")
    init_layer: int | None = setting(-1, "feature head: the target layer its layers start from")
    init_layers: tuple[int, ...] | None = setting(
        (0, -1), "layers draft: the target layers copied (none: random, a standalone draft)"
    )
    teacher_layers: tuple[int, ...] = setting(
        (2, 14, -1), "target layers stored by the teacher pass (-1, the last, is required)"
    )
    feature_layers: tuple[int, ...] = setting(
        (2, 14, -1), "target layers the head reads (a subset of teacher_layers)"
    )
    epochs: float = setting(3.0, "passes over the training positions")
    batch_sequences: int = setting(8, "sequences per optimiser step")
    lr: float = setting(1e-3, "peak learning rate (AdamW)")
    weight_decay: float = setting(0.0, "AdamW weight decay")
    warmup_steps: int = setting(50, "linear warm-up steps before the cosine decay")
    tv_weight: float = setting(1.0, "weight of 1 - sum min(p, q)")
    feature_weight: float = setting(0.1, "weight of the smooth-L1 feature loss")
    ttt_steps: int = setting(
        1,
        "draft steps unrolled per position (EAGLE-3's training-time test): step d reads the "
        "head's own features of step d-1, as drafting does",
    )
    init_from: str | None = setting(
        None, "start from these saved weights (same subset and layers) instead of a target layer"
    )
    max_shards: int | None = setting(None, "train on the first N shards only (learning curves)")
    eval_shards: int = setting(2, "the last shards of the folder, held out")
    seed: int = setting(0, "seed of the initialisation and the batch order")
    checkpoint_every: int = setting(200, "steps between checkpoints and held-out evaluations")
    threads: int | None = setting(None, "torch threads (default: torch's)")
    cache: str = setting(str(CACHE_DIR), "teacher pass and checkpoints (local, not committed)")

    def __post_init__(self) -> None:
        for name in (
            "top",
            "subset_size",
            "n_layers",
            "batch_sequences",
            "checkpoint_every",
            "ttt_steps",
        ):
            positive_int(getattr(self, name), name)
        positive_int(self.warmup_steps, "warmup_steps")
        positive_int(self.max_shards, "max_shards", optional=True)
        positive_int(self.threads, "threads", optional=True)
        non_negative_int(self.eval_shards, "eval_shards", "the last shards held out")
        non_negative_int(self.seed, "seed")
        real(self.epochs, "epochs", low=0.0, low_open=True)
        real(self.lr, "lr", "learning rate", low=0.0, low_open=True)
        one_of(self.arch, "arch", ARCHS)
        if self.ttt_steps > 1 and self.arch != "feature":
            raise ValueError("ttt_steps > 1 needs arch='feature' (a head that reads features)")
        if self.init_from is not None and not Path(self.init_from).is_file():
            raise ValueError(f"init_from: no saved weights at {self.init_from!r}")
        one_of(self.pair, "pair", PAIRS)
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


# Stage 1: the teacher pass


def _teacher_dir(settings: TrainSettings) -> Path:
    m = load_manifest(settings.data)
    key = {
        "data": m["settings"],
        "pair": settings.pair,
        "dtype": settings.teacher_dtype,
        "top": settings.top,
        "layers": list(settings.teacher_layers),
        "format": TEACHER_FORMAT,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return Path(settings.cache) / "teacher" / digest


@torch.inference_mode()
def _teacher_sequences(
    target: Any, seqs: list, top: int, layers: tuple[int, ...]
) -> list[dict[str, torch.Tensor]]:
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
        teacher_probs, teacher_ids = p.topk(top, dim=-1)
        out.append(
            {
                "ids": torch.as_tensor(s.ids, dtype=torch.int32),
                "start": torch.tensor(start),
                "feats": feats[r, :L].to(torch.bfloat16).clone(),
                "teacher_ids": teacher_ids.to(torch.int32),
                "teacher_probs": teacher_probs.to(torch.float16),
            }
        )
    return out


def _shard_split(settings: TrainSettings) -> tuple[list[int], list[int]]:
    """The training shards and the held-out ones (the folder's last ``eval_shards``)."""
    shards = [s["shard"] for s in load_manifest(settings.data)["shards"]]
    n_eval = min(settings.eval_shards, max(len(shards) - 1, 0))
    eval_shards = shards[len(shards) - n_eval :] if n_eval else []
    train_shards = shards[: len(shards) - n_eval]
    if settings.max_shards is not None:
        train_shards = train_shards[: settings.max_shards]
    return train_shards, eval_shards


def teacher_pass(settings: TrainSettings, *, progress: bool = True, pair: Any = None) -> Path:
    """Teacher-force the target over every uncached shard the run reads; return the cache folder."""
    from tqdm.auto import tqdm

    folder = _teacher_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    train_shards, eval_shards = _shard_split(settings)
    todo = [i for i in train_shards + eval_shards if not (folder / f"shard_{i:05d}.pt").is_file()]
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
        mass.index_add_(0, r["teacher_ids"].flatten().long(), r["teacher_probs"].flatten().double())
    return mass.topk(min(size, vocab)).indices.sort().values


# Stage 2: distillation


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
    n_pos = max(len(r["ids"]) for r in records) - 1
    H = len(last)
    top = records[0]["teacher_ids"].shape[-1]
    feats = torch.zeros(n, n_pos, len(cols), dtype=dtype)
    toks = torch.zeros(n, n_pos, dtype=torch.long)
    next_h = torch.zeros(n, n_pos, H, dtype=dtype)
    hmask = torch.zeros(n, n_pos, dtype=torch.bool)
    teacher_idx = torch.zeros(
        n, n_pos, top, dtype=torch.long
    )  # subset index of each teacher token (-1: none)
    teacher_p = torch.zeros(n, n_pos, top)
    pmask = torch.zeros(n, n_pos, dtype=torch.bool)
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
            teacher_idx[r, rows - 1] = remap[rec["teacher_ids"][src].long()]
            teacher_p[r, rows - 1] = rec["teacher_probs"][src].float()
            pmask[r, rows - 1] = True
    return feats, toks, next_h, hmask, teacher_idx, teacher_p, pmask


def _distill_terms(logq, teacher_idx, teacher_p, pmask) -> dict[str, torch.Tensor]:
    """Cross-entropy to the teacher's top tokens and the acceptance ``sum min(p, q)`` over them."""
    valid = teacher_idx >= 0
    lq = torch.gather(logq, -1, teacher_idx.clamp(min=0)) * valid
    p = teacher_p * valid
    ce = -(p * lq).sum(-1)
    alpha = torch.minimum(p, lq.exp() * valid).sum(-1)
    m = pmask.float()
    n_pos = m.sum().clamp(min=1)
    return {"ce": (ce * m).sum() / n_pos, "alpha": (alpha * m).sum() / n_pos}


def unrolled_mask(n: int, step: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The additive mask ``[1, 1, n, step * n]`` of unrolled draft step ``step`` (1-based).

    Keys are laid out step by step, as a cache fills. Position ``r`` at step ``d`` drafts from
    ``m = r - d + 1``: key ``i`` of step 1 is visible when ``i <= m``, key ``i`` of step
    ``e >= 2`` when ``i == r - d + e``. Step 1 is the causal mask."""
    r = torch.arange(n).view(n, 1)
    i = torch.arange(n).view(1, n)
    blocks = [i <= r - (step - 1)]
    blocks += [i == r - (step - e) for e in range(2, step + 1)]
    allowed = torch.cat(blocks, dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, float("-inf"))
    return mask.view(1, 1, n, step * n)


def unrolled_hidden(head, feats, toks, pos, steps: int) -> list[torch.Tensor]:
    """The head's features ``ĥ`` for draft steps ``1..steps`` (training-time test): step ``d``
    reads at ``r`` its own step ``d - 1`` feature of ``r - 1`` and attends as :func:`unrolled_mask`
    says. Gradients flow through every step."""
    from transformers import DynamicCache

    if steps == 1:
        return [head(feats, toks, position_ids=pos)[0]]
    n = feats.shape[1]
    cache = DynamicCache()
    dtype = next(head.parameters()).dtype
    hs = [head(feats, toks, cache=cache, position_ids=pos)[0]]
    for d in range(2, steps + 1):
        h = hs[-1]
        own = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)
        mask = unrolled_mask(n, d, dtype).to(h.device)
        hs.append(head(own, toks, cache=cache, position_ids=pos, attention_mask=mask)[0])
    return hs


def _losses(head, batch, settings: TrainSettings) -> dict[str, torch.Tensor]:
    if settings.arch == "layers":
        ids, teacher_idx, teacher_p, pmask = batch
        hidden, _ = head.hidden(ids)
        logq = torch.log_softmax(head.logits(hidden).float(), dim=-1)
        out = _distill_terms(logq, teacher_idx, teacher_p, pmask)
        out["loss"] = out["ce"] + settings.tv_weight * (1 - out["alpha"])
        return out
    feats, toks, next_h, hmask, teacher_idx, teacher_p, pmask = batch
    n_pos = feats.shape[1]
    pos = torch.arange(1, n_pos + 1).unsqueeze(0).expand(feats.shape[0], n_pos)
    hs = unrolled_hidden(head, feats, toks, pos, settings.ttt_steps)
    hidden = hs[0]
    logq = torch.log_softmax(head.logits(hidden).float(), dim=-1)  # [n, n_pos, |S|]
    out = _distill_terms(logq, teacher_idx, teacher_p, pmask)
    distill = out["ce"] + settings.tv_weight * (1 - out["alpha"])
    for d, h in enumerate(hs[1:], start=2):
        # Step d at position r drafts from the known positions up to r - d + 1 (>= 1).
        valid = pmask.clone()
        valid[:, : d - 1] = False
        logq_d = torch.log_softmax(head.logits(h).float(), dim=-1)
        terms = _distill_terms(logq_d, teacher_idx, teacher_p, valid)
        out[f"ce_{d}"], out[f"alpha_{d}"] = terms["ce"], terms["alpha"]
        distill = distill + terms["ce"] + settings.tv_weight * (1 - terms["alpha"])
    # On RMS-normalised features: the final norm (and the head's input norm) ignore the scale.
    feat = F.smooth_l1_loss(
        rms_normalise(hidden.float()), rms_normalise(next_h.float()), reduction="none"
    ).mean(-1)
    out["feature"] = (feat * hmask).sum() / hmask.sum().clamp(min=1)
    out["loss"] = distill + settings.feature_weight * out["feature"]
    return out


def _batch_tokens(records: list[dict[str, torch.Tensor]], remap: torch.Tensor):
    """Pad a batch for a token-level draft: ids, and the teacher's p_j at position j."""
    n = len(records)
    n_pos = max(len(r["ids"]) for r in records) - 1
    top = records[0]["teacher_ids"].shape[-1]
    ids = torch.zeros(n, n_pos, dtype=torch.long)
    teacher_idx = torch.zeros(n, n_pos, top, dtype=torch.long)
    teacher_p = torch.zeros(n, n_pos, top)
    pmask = torch.zeros(n, n_pos, dtype=torch.bool)
    for r, rec in enumerate(records):
        L, s = len(rec["ids"]), int(rec["start"])
        ids[r, : L - 1] = rec["ids"][: L - 1].long()
        teacher_idx[r, s : L - 1] = remap[rec["teacher_ids"].long()]
        teacher_p[r, s : L - 1] = rec["teacher_probs"].float()
        pmask[r, s : L - 1] = True
    return ids, teacher_idx, teacher_p, pmask


def _make_batch(settings: TrainSettings, records, remap, columns):
    if settings.arch == "layers":
        return _batch_tokens(records, remap)
    return _batch(records, remap, torch.float32, columns)


def _new_draft(
    settings: TrainSettings, target: Any, subset: torch.Tensor, *, init: bool, scale: float = 1.0
):
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

    if settings.threads:
        torch.set_num_threads(settings.threads)
    if pair is None:
        pair = load_pair(settings.pair, dtype=settings.teacher_dtype)
    cache = teacher_pass(settings, progress=progress, pair=pair)
    train_shards, eval_shards = _shard_split(settings)
    train = _load_records(cache, train_shards)
    evals = _load_records(cache, eval_shards)
    start, subset = _starting_point(settings, pair.target, train)
    remap = torch.full((pair.target.config.vocab_size,), -1, dtype=torch.long)
    remap[subset] = torch.arange(len(subset))

    torch.manual_seed(settings.seed)
    head, columns, scale = _initial_draft(settings, pair.target, subset, start, train)
    del start
    optim = _optimisation(settings, head, len(train))
    ckpt, step, history = _resume(settings, head, optim, log)
    rng = np.random.default_rng(settings.seed)
    orders = [rng.permutation(len(train)) for _ in range(math.ceil(settings.epochs) + 1)]
    if step == 0 and evals:  # where training starts from, on the held-out shards
        history.append(
            {"step": 0, "epoch": 0.0, "seconds": 0.0}
            | evaluate(head, evals, remap, settings, columns)
        )
        _log_row(log, history[-1])
    head.train()
    # a resumed run carries the seconds of training on, and counts itself (the card reads both)
    t0 = time.perf_counter() - (history[-1]["seconds"] if history else 0.0)
    run = history[-1].get("run", 1) + 1 if step else 1
    bar = tqdm(total=optim.total, initial=step, desc="distil", unit="step", disable=not progress)
    while step < optim.total:
        epoch, b = divmod(step, optim.steps_per_epoch)
        idx = orders[epoch][b * settings.batch_sequences : (b + 1) * settings.batch_sequences]
        batch = _make_batch(settings, [train[i] for i in idx], remap, columns)
        losses = _losses(head, batch, settings)
        _optimiser_step(optim, losses)
        step += 1
        bar.update(1)
        bar.set_postfix(alpha=f"{losses['alpha'].item():.3f}", ce=f"{losses['ce'].item():.2f}")
        if step % settings.checkpoint_every == 0 or step == optim.total:
            row = _history_row(step, optim, time.perf_counter() - t0, run, losses)
            row.update(evaluate(head, evals, remap, settings, columns))
            history.append(row)
            _log_row(log, row)
            _save_checkpoint(ckpt, settings, head, optim, step, history)
    bar.close()
    head.eval()
    record = _training_record(settings, history, train, evals, (train_shards, eval_shards), remap)
    _save_draft(settings, pair.target, subset, scale, head, record)
    return record


def _starting_point(
    settings: TrainSettings, target: Any, train: list[dict[str, torch.Tensor]]
) -> tuple[Any, torch.Tensor]:
    """The saved draft to start from (``init_from``, else None) and the token subset to propose."""
    V = target.config.vocab_size
    if settings.init_from is not None:
        start = load_head(settings.init_from, target)
        return start, start.subset.cpu()
    return None, choose_subset(train, settings.subset_size, V)


def _initial_draft(
    settings: TrainSettings,
    target: Any,
    subset: torch.Tensor,
    start: Any,
    train: list[dict[str, torch.Tensor]],
) -> tuple[Any, tuple[torch.Tensor, torch.Tensor], float]:
    """The float32 draft to train (from ``start`` if given), its feature columns and scale."""
    columns = _columns(settings, target.config.hidden_size)
    scale = _feature_scale(train, columns[1])
    if start is not None:
        scale = float(start.config_dict.get("scale", 1.0))
        if start.config_dict.get("feature_layers", [-1]) != list(settings.feature_layers):
            raise ValueError(
                f"init_from: its feature_layers {start.config_dict.get('feature_layers')} "
                f"differ from feature_layers {list(settings.feature_layers)}"
            )
    head = _new_draft(settings, target, subset, init=start is None, scale=scale)
    if start is not None:
        head.load_state_dict(
            {k: v.float() if v.is_floating_point() else v for k, v in start.state_dict().items()}
        )
    head.float()
    head.frozen_float32()
    return head, columns, scale


@dataclass
class _Optimisation:
    """The draft's optimiser and learning-rate schedule, and the steps they were built for."""

    params: list[torch.nn.Parameter]
    opt: torch.optim.Optimizer
    sched: Any
    steps_per_epoch: int
    total: int


def _optimisation(settings: TrainSettings, head: Any, n_train: int) -> _Optimisation:
    """AdamW on the draft's trainable parameters, warmed up then cosine-decayed over the run."""
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
    steps_per_epoch = math.ceil(n_train / settings.batch_sequences)
    total = max(1, int(settings.epochs * steps_per_epoch))
    sched = get_cosine_schedule_with_warmup(opt, settings.warmup_steps, total)
    return _Optimisation(params, opt, sched, steps_per_epoch, total)


def _optimiser_step(optim: _Optimisation, losses: dict[str, torch.Tensor]) -> None:
    optim.opt.zero_grad(set_to_none=True)
    losses["loss"].backward()
    torch.nn.utils.clip_grad_norm_(optim.params, 1.0)
    optim.opt.step()
    optim.sched.step()


def _resume(
    settings: TrainSettings, head: Any, optim: _Optimisation, log: Any
) -> tuple[Path, int, list[dict[str, float]]]:
    """The checkpoint path, and the step and history to go on from (0 and none unless a
    checkpoint with the same settings exists, which is loaded into ``head`` and ``optim``)."""
    ckpt_dir = Path(settings.cache) / "train" / Path(settings.out).stem
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    ckpt = ckpt_dir / "checkpoint.pt"
    history: list[dict[str, float]] = []
    step = 0
    if ckpt.is_file():
        state = torch.load(ckpt, weights_only=False)
        if state["settings"] == asdict(settings):
            head.load_state_dict(state["head"])
            optim.opt.load_state_dict(state["opt"])
            optim.sched.load_state_dict(state["sched"])
            step, history = state["step"], state["history"]
            torch.set_rng_state(state["rng"])
            log(f"resumed at step {step} of {optim.total}")
    return ckpt, step, history


def _save_checkpoint(
    ckpt: Path,
    settings: TrainSettings,
    head: Any,
    optim: _Optimisation,
    step: int,
    history: list[dict[str, float]],
) -> None:
    """Everything a killed run needs to go on from ``step`` as if it had not stopped."""
    _atomic_torch_save(
        {
            "settings": asdict(settings),
            "head": head.state_dict(),
            "opt": optim.opt.state_dict(),
            "sched": optim.sched.state_dict(),
            "step": step,
            "history": history,
            "rng": torch.get_rng_state(),
        },
        ckpt,
    )


def _history_row(
    step: int, optim: _Optimisation, seconds: float, run: int, losses: dict[str, torch.Tensor]
) -> dict[str, float]:
    """A checkpoint's history row before its held-out terms, with the last batch's losses."""
    row = {"step": step, "epoch": step / optim.steps_per_epoch, "seconds": seconds, "run": run}
    row.update({f"train_{k}": float(v.detach()) for k, v in losses.items()})
    return row


def _log_row(log: Any, row: dict[str, float]) -> None:
    log(json.dumps({k: round(v, 4) for k, v in row.items()}))


def _training_record(
    settings: TrainSettings,
    history: list[dict[str, float]],
    train: list[dict[str, torch.Tensor]],
    evals: list[dict[str, torch.Tensor]],
    shards: tuple[list[int], list[int]],
    remap: torch.Tensor,
) -> dict[str, Any]:
    """The training record written next to the weights (and read by the model card)."""
    train_shards, eval_shards = shards
    return {
        "settings": asdict(settings),
        "history": history,
        "train_sequences": len(train),
        "train_tokens": int(sum(len(r["teacher_probs"]) for r in train)),
        "eval_tokens": int(sum(len(r["teacher_probs"]) for r in evals)),
        # which shards, by number: "the last N" depends on the folder at the time
        "train_shards": [int(x) for x in train_shards],
        "heldout_shards": [int(x) for x in eval_shards],
        "subset_mass": _subset_mass(evals, remap),
        "provenance": provenance(device="cpu", seed=settings.seed, settings=asdict(settings)),
    }


def _save_draft(
    settings: TrainSettings,
    target: Any,
    subset: torch.Tensor,
    scale: float,
    head: Any,
    record: dict[str, Any],
) -> None:
    """Save the trained weights as a fresh draft of the saved layout, and the record beside them."""
    out = Path(settings.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    head_out = _new_draft(settings, target, subset, init=False, scale=scale)
    head_out.load_state_dict(head.state_dict())
    if settings.arch == "layers":
        head_out.config_dict["init_layers"] = head.config_dict["init_layers"]
    save_head(head_out, out, {"train_tokens": record["train_tokens"]})
    atomic_write_json(out.with_suffix(".train.json"), record)


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
        w = sum(len(r["teacher_probs"]) for r in chunk)
        for k, v in out.items():
            sums[k] = sums.get(k, 0.0) + float(v) * w
        n += w
    head.train(was)
    return {f"eval_{k}": v / n for k, v in sums.items()}


def _subset_mass(records, remap) -> float:
    """Mean teacher mass (within the stored top tokens) that falls in the subset."""
    tot = inside = 0.0
    for r in records:
        p = r["teacher_probs"].double()
        tot += float(p.sum())
        inside += float((p * (remap[r["teacher_ids"].long()] >= 0)).sum())
    return inside / tot if tot else float("nan")
