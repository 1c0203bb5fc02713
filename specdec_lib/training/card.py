"""Model cards for trained drafts, written from the training record and an ``eval-drafter``
evaluation (no hand-typed number)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..models import repo_relative
from ..settings import command_line
from .data import load_manifest, summary
from .distill import TrainSettings
from .evaluate import EvalSettings

__all__ = ["model_card"]


def model_card(
    weights: str | Path, train_record: dict[str, Any], evaluation: dict[str, Any]
) -> str:
    """A markdown model card for a trained draft from its training record and evaluation."""
    s = train_record["settings"]
    data = summary(s["data"])
    dm = load_manifest(s["data"])["settings"]
    size_mb = Path(weights).stat().st_size / 1e6
    weights = repo_relative(weights)
    default = Path(weights).name == "feature_head.safetensors"
    usage = "draft='trained'" if default else f"draft='trained', head='{weights}'"
    lines = [
        f"# Model card: `{Path(weights).name}`",
        "",
        "A draft for speculative decoding with the embedded default target, SmolLM2-135M-Instruct "
        f"(`load_pair('default', {usage})`). Exact like any draft: the output of speculative "
        "decoding follows the target's distribution whatever the draft proposes (notebooks 01-02).",
        "",
        *_recipe_lines(s, train_record["subset_mass"], size_mb),
        *_data_lines(s, train_record, data, dm),
        *_compute_lines(train_record),
        *_measured_lines(evaluation),
        "## Limitations",
        "",
        *_limitations(s),
        "",
        "## Rebuild",
        "",
        "```",
        _gen_data_command(s["data"], data, dm),
        _train_command(s, weights),
        _eval_command(weights, evaluation["provenance"]["settings"]),
        "```",
        "",
    ]
    return "\n".join(lines)


def _recipe_lines(s: dict[str, Any], subset_mass: float, size_mb: float) -> list[str]:
    return [
        "## Recipe",
        "",
        _architecture_line(s, subset_mass),
        _loss_line(s),
        f"- Size: {size_mb:.1f} MB on disk (its own weights only; the embedding, final norm and "
        "output rows are read from the target).",
        "",
    ]


def _architecture_line(s: dict[str, Any], subset_mass: float) -> str:
    if s["arch"] == "feature":
        init = (
            f"the saved head `{s['init_from']}`"
            if s.get("init_from")
            else f"target layer {s['init_layer']}"
        )
        layers = (
            f", {s['n_layers']} Llama layer(s) initialised from {init}, "
            f"reading target layers {list(s['feature_layers'])}"
        )
    else:
        layers = f", layers copied from target layers {s['init_layers']}"
    return (
        f"- Architecture: `{s['arch']}`{layers}; proposes only the {s['subset_size']:,} tokens "
        f"with the most teacher mass ({subset_mass:.1%} of the held-out teacher mass within its "
        f"top {s['top']})."
    )


def _loss_line(s: dict[str, Any]) -> str:
    features = f" + {s['feature_weight']} x smooth-L1 on features" if s["arch"] == "feature" else ""
    unrolled = (
        f", summed over {s['ttt_steps']} unrolled draft steps (training-time test: step d "
        "reads the head's own features of step d-1)"
        if s.get("ttt_steps", 1) > 1
        else ""
    )
    shards = f" of the first {s['max_shards']} shards" if s.get("max_shards") else ""
    return (
        f"- Loss: cross-entropy to the teacher's top {s['top']} tokens + {s['tv_weight']} x "
        f"(1 - sum min(p, q)){features}{unrolled}; AdamW, lr {s['lr']}, cosine, "
        f"{s['epochs']} epochs{shards}, {s['batch_sequences']} sequences per step, "
        f"seed {s['seed']}."
    )


def _data_lines(
    s: dict[str, Any], train_record: dict[str, Any], data: dict[str, Any], dm: dict[str, Any]
) -> list[str]:
    return [
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
    ]


def _compute_lines(train_record: dict[str, Any]) -> list[str]:
    prov = train_record["provenance"]
    hist = train_record["history"]
    last = hist[-1] if hist else {}
    seconds, runs = training_time(hist)
    resumed = (
        f" (wall clock, over {runs} runs, each resuming the last one's checkpoint)"
        if runs > 1
        else ""
    )
    return [
        "## Compute",
        "",
        f"- Distillation: {last.get('step', 0)} steps in {seconds / 60:.0f} min{resumed}"
        f" on {prov.get('device', 'cpu')}, torch {prov.get('torch')}, transformers "
        f"{prov.get('transformers')}, commit {str(prov.get('git_commit'))[:10]}, "
        f"{prov.get('date')}.",
        "",
    ]


def _measured_lines(evaluation: dict[str, Any]) -> list[str]:
    ep = evaluation["provenance"]
    c = evaluation["costs"]
    return [
        f"## Measured (by decoding, {_measured_how(ep['settings'])}, held-out prompts)",
        "",
        *_acceptance_table(evaluation),
        "",
        f"Cost: c = t_draft / t_target(1) = {c['c']:.3f} ({c['t_draft_s'] * 1e3:.1f} ms / "
        f"{c['t_target_s'][0] * 1e3:.1f} ms, {evaluation['pair']['dtype']}), measured "
        f"{ep.get('date')} on {ep.get('device', 'cpu')}.",
        f"Held-out prompts: `{ep['settings'].get('prompts')}`.",
        "",
    ]


def _acceptance_table(evaluation: dict[str, Any]) -> list[str]:
    """The Measured table: a row per temperature, with rates by depth when a step drafts more."""
    es = evaluation["provenance"]["settings"]
    chain = es.get("K", 1) > 1
    # a tree's steps: its first candidates form the chain, whose rates by depth the record keeps
    column = (
        "the first candidate's acceptance by depth"
        if es.get("tree")
        else "acceptance by draft position"
    )
    lines = (
        [f"| temperature | alpha | accepted / proposed | {column} |", "|---|---|---|---|"]
        if chain
        else ["| temperature | alpha | accepted / proposed |", "|---|---|---|"]
    )
    for T, r in evaluation["by_temperature"].items():
        label = "greedy" if float(T) == 0 else T
        row = f"| {label} | {r['alpha']:.3f} | {r['accepted']:,} / {r['proposed']:,} |"
        if chain:
            rates = r["tree_rates"]["beta"] if es.get("tree") else r.get("by_position", [])
            row += " " + " / ".join(f"{a:.3f}" for a in rates) + " |"
        lines.append(row)
    return lines


def training_time(history: list[dict[str, Any]]) -> tuple[float, int]:
    """The wall-clock seconds of a training record's steps and the runs they took. Older records
    restart ``seconds`` at each resume (no ``run``); their segments are summed."""
    total, prev, resets = 0.0, 0.0, 0
    for row in history:
        seconds = float(row.get("seconds", 0.0))
        if seconds < prev:
            total, resets = total + prev, resets + 1
        prev = seconds
    runs = max(1 + resets, max((int(row.get("run", 1)) for row in history), default=1))
    return total + prev, runs


def _limitations(s: dict[str, Any]) -> list[str]:
    out = []
    if s["arch"] == "feature":
        fused = len(s["feature_layers"]) > 1
        steps = s.get("ttt_steps", 1)
        out += [
            (
                "- Trained for one draft step: beyond the first drafted token the head reads its "
                "own output instead of the target's features"
                + (" (one layer's worth, where it was trained on fused ones)" if fused else "")
                + ", so acceptance falls along a longer draft."
                if steps == 1
                else f"- Trained on {steps} unrolled draft steps (beyond the first drafted token "
                "the head reads its own output instead of the target's features"
                + (", one layer's worth" if fused else "")
                + f"): a draft longer than {steps} tokens feeds it inputs it was never trained on."
            ),
            "- It needs the target's hidden states: the first step of a request drafts nothing, "
            "and transformers' assisted generation cannot drive it (it drives causal-LM drafts).",
        ]
    out.append(
        "- It can propose only its token subset (q = 0 elsewhere): still exact, but acceptance "
        "is bounded by the target's mass on the subset."
    )
    return out


def _measured_how(e: dict[str, Any]) -> str:
    """How the card's table was measured: the draft length, and the tree and int8 weights if so."""
    how = f"K = {e.get('K', 1)}"
    if e.get("tree"):
        how += f", the tree ({', '.join(map(str, e['tree']))})"
    if e.get("draft") == "trained-int8":
        how += ", int8 weights"
    return how


def _eval_command(weights: str, e: dict[str, Any]) -> str:
    """The ``eval-drafter`` command of the card's table (flags that differ from the defaults)."""
    draft = e.get("draft", "trained")
    flags = (
        [f"--draft {draft}", f"--head {weights}"]
        if draft == "trained-int8"
        else [f"--draft {weights}"]
    )
    if "temperatures" in e:
        flags.append("--temperatures " + " ".join(f"{float(t):g}" for t in e["temperatures"]))
    flags += command_line(EvalSettings, e, skip=("draft", "head", "temperatures", "threads"))
    return " ".join(["python -m specdec_lib eval-drafter", *flags, "--out <results.json>"])


def _train_command(s: dict[str, Any], weights: str | Path) -> str:
    flags = command_line(TrainSettings, s, skip=("out", "cache", "threads"))
    return " ".join(["python -m specdec_lib train-drafter", f"--out {weights}", *flags])


def _gen_data_command(folder: str, data: dict[str, Any], dm: dict[str, Any]) -> str:
    """The ``gen-data`` command that rebuilds the card's data folder to the same size."""
    return (
        "python -m specdec_lib gen-data --out {data} --tokens {tok} --batch-size {b} "
        "--max-new-tokens {m} --seed {seed}".format(
            data=folder,
            tok=data["generated_tokens"],
            b=dm["batch_size"],
            m=dm["max_new_tokens"],
            seed=dm["seed"],
        )
    )
