"""llama.cpp's own speculative sampling under the exact-law test, as a peer.

``llama-speculative``, the example llama.cpp ships for speculative decoding with a draft model
(it verifies stochastically when the temperature is above 0), decodes the embedded GGUF file with
another quantization of the same model as its draft, made by llama.cpp's ``llama-quantize``. Each
draw is one process with its own seed; the tokens it emits are read from its debug log. The first
two tokens are tested against two exact laws computed on llama.cpp's own passes:

- the target's, which a lossless sampler follows;
- the law of the rule as the example applies it: it proposes the draft's *most probable* token
  (not a draw from the draft), accepts it with ``min(1, p/q)`` and otherwise draws from
  ``norm(max(0, p - q))``. That is the rule of :mod:`specdec_lib.sampling` with ``x ~ q``
  replaced by ``x = argmax q``, which is exact only where ``q`` is one-hot.

The first token comes from the target alone (the prompt's pass); the second is the first the
speculative step decides.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from ..sampling import residual
from .peer import PEERS, LlamaCppLM, tool

__all__ = ["argmax_draft_law", "exact_laws", "quantized_draft", "sampler_test", "speculative_draws"]

PROMPT = "The capital of France is"
# The tokens the example emits, in order: each accepted draft token, then the step's last token
# (drawn from the residual, or the bonus), which it logs whether or not a draft was accepted.
EMITTED = re.compile(
    r"draft token \d+ of sequence \d+ \((\d+), '.*?'\) (accepted|rejected)"
    r"|the sampled target token \((\d+),",
    re.S,
)


def quantized_draft(target: str | Path, kind: str = "Q4_0") -> Path:
    """The target GGUF file requantized to ``kind`` by ``llama-quantize`` (once, into
    ``.cache/peers/drafts``): the same model at another precision, a draft whose law differs."""
    out = PEERS / "drafts" / f"{Path(target).stem}.{kind}.gguf"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        part = out.with_suffix(".part")
        cmd = [str(tool("llama-quantize")), "--allow-requantize", str(target), str(part), kind]
        subprocess.run(cmd, capture_output=True, check=True)
        os.replace(part, out)
    return out


def emitted_tokens(log: str) -> list[int]:
    """The token ids ``llama-speculative -v`` emitted, in order, read from its debug log."""
    tokens = []
    for m in EMITTED.finditer(log):
        if m.group(3) is not None:
            tokens.append(int(m.group(3)))
        elif m.group(2) == "accepted":
            tokens.append(int(m.group(1)))
    return tokens


def speculative_draws(
    target: str | Path,
    draft: str | Path,
    seeds: range,
    *,
    prompt: str = PROMPT,
    n_draft: int = 4,
    threads: int = 2,
    progress: bool = True,
) -> list[tuple[int, int]]:
    """The first two tokens ``llama-speculative`` emits at T = 1 (no top-k, top-p or min-p), one
    process per seed, drafting ``n_draft`` tokens a step."""
    from tqdm.auto import tqdm

    cmd = [str(tool("llama-speculative")), "-m", str(target), "-md", str(draft), "-p", prompt]
    cmd += ["-n", "1", "--temp", "1", "--top-k", "0", "--top-p", "1", "--min-p", "0"]
    cmd += ["--spec-draft-n-max", str(n_draft), "-t", str(threads), "-td", str(threads)]
    cmd += ["-c", "256", "-v"]
    draws = []
    for seed in tqdm(seeds, desc="llama-speculative", disable=not progress):
        run = subprocess.run(
            cmd + ["-s", str(seed)], capture_output=True, text=True, errors="replace", check=True
        )
        tokens = emitted_tokens(run.stderr)
        if len(tokens) < 2:
            raise RuntimeError(f"llama-speculative (seed {seed}) emitted {tokens}: log changed?")
        draws.append((tokens[0], tokens[1]))
    return draws


def argmax_draft_law(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The law of one position when the draft proposes ``a = argmax q`` instead of a draw from
    ``q``: ``a`` accepted with ``min(1, p(a)/q(a))``, else a draw from ``norm(max(0, p - q))``."""
    a = int(q.argmax())
    accept = min(1.0, float(p[a] / q[a]))
    law = torch.zeros_like(p)
    if accept < 1.0:
        law += (1.0 - accept) * residual(p, q)
    law[a] += accept
    return law


@torch.inference_mode()
def exact_laws(
    target: LlamaCppLM, draft: LlamaCppLM, ids: list[int], *, min_prob: float = 1e-4
) -> dict[str, Any]:
    """The first two tokens after ``ids`` at T = 1, from uncached passes of both engines: the
    target's law and the example's (``"target"``, ``"rule"``; pairs under ``min_prob`` left
    unlisted, pooled by :func:`~specdec_lib.research.stats.chisquare_law`), the draft's most
    probable second token after each listed first (``"favourite"``) and the target's probability
    that the second token is it (``"favourite_mass"``)."""

    def probs(lm: LlamaCppLM, tokens: list[int]) -> torch.Tensor:
        logits = lm(torch.tensor([tokens])).logits[0, -1]
        return torch.softmax(logits.double(), -1)

    p1 = probs(target, ids)
    out: dict[str, Any] = {"target": {}, "rule": {}, "favourite": {}, "favourite_mass": 0.0}
    for t1 in torch.nonzero(p1 >= min_prob).view(-1).tolist():
        p2, q2 = probs(target, ids + [t1]), probs(draft, ids + [t1])
        a = out["favourite"][t1] = int(q2.argmax())
        out["favourite_mass"] += float(p1[t1] * p2[a])
        for name, row in (("target", p2), ("rule", argmax_draft_law(p2, q2))):
            mass = p1[t1] * row
            for t2 in torch.nonzero(mass >= min_prob).view(-1).tolist():
                out[name][(t1, t2)] = float(mass[t2])
    return out


def sampler_test(
    n: int = 200, *, kind: str = "Q4_0", n_draft: int = 4, seed: int = 0, progress: bool = True
) -> dict[str, Any]:
    """``n`` draws of ``llama-speculative`` on the embedded file with its ``kind`` requantization
    as the draft, tested (chi-square) against the target's law and the example's own."""
    from ..models import find_smollm2_gguf
    from .stats import chisquare_law, tv

    target = find_smollm2_gguf()
    draft = quantized_draft(target, kind)
    t_lm, d_lm = LlamaCppLM(target, n_ctx=256), LlamaCppLM(draft, n_ctx=256)
    ids = t_lm.tokenize(PROMPT)
    laws = exact_laws(t_lm, d_lm, ids)
    seeds = range(seed, seed + n)
    draws = speculative_draws(target, draft, seeds, n_draft=n_draft, progress=progress)
    counts = Counter(draws)
    keys = sorted(set(laws["target"]) | set(laws["rule"]))
    law_tv = tv(*(torch.tensor([laws[w].get(k, 0.0) for k in keys]) for w in ("target", "rule")))
    favourite = sum(laws["favourite"].get(t1) == t2 for t1, t2 in draws) / n
    return {
        "prompt": PROMPT,
        "prompt_ids": ids,
        "draft": {"kind": kind, "file": draft.name, "n_draft": n_draft},
        "n": n,
        "seeds": [seed, seed + n],
        "draws": [list(d) for d in draws],
        "tv_target_vs_rule": law_tv,
        "second_is_drafts_favourite": {"observed": favourite, "target": laws["favourite_mass"]},
        "tests": {
            name: vars(chisquare_law(counts, laws[law]))
            for name, law in (("target_law", "target"), ("argmax_draft_law", "rule"))
        },
    }
