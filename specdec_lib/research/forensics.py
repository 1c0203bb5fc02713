"""Forensics of greedy outputs: why greedy bfloat16 speculative output can differ from the
autoregressive output (notebook 02, section 8).

:func:`specdec_lib.bench.identical_outputs` counts, in a stored greedy run, the cells whose tokens
differ from the baseline's and where; :func:`near_tie_evidence` reruns the target at each first
difference, as each decoder saw it, and measures the gap between the top two logits against the
rounding difference between a one-token pass and a verification pass.
"""

from __future__ import annotations

from typing import Any

import torch

from ..bench import against_baseline
from ..lm import model_forward
from ..models import ModelPair

__all__ = ["near_tie_evidence"]


@torch.inference_mode()
def near_tie_evidence(pair: ModelPair, result: dict[str, Any], K: int) -> list[dict[str, Any]]:
    """Why greedy bfloat16 speculative output can differ from autoregressive output.

    For each speculative cell of a greedy ``result`` (run at ``K``) whose tokens differ from the
    autoregressive cell's, take the prefix up to the first differing position ``j`` (prompt plus
    the shared tokens) and compute the target's logits for position ``j`` twice, as the two
    decoders do: from a pass over the last token alone (autoregressive) and as the last row of a
    pass over the last ``K + 1`` tokens (a verification pass). Returns, per divergence, the gap
    between the top two logits of the one-token pass and the largest difference between the two
    passes' logits: a divergence is a near-tie when the gap is within that difference."""
    prompts = [
        pair.tokenizer(p["text"], return_tensors="pt").input_ids[0] for p in result["prompts"]
    ]
    rows = []
    for method, k, p, ref, j in against_baseline(result):
        if method != "speculative" or k != K or j is None:
            continue
        prefix = torch.cat([prompts[p], torch.tensor(ref[:j], dtype=torch.long)])
        prefix = prefix.to(pair.device)
        one, _ = model_forward(pair.target, prefix[-1:], _cache_over(pair.target, prefix[:-1]), 1)
        many, _ = model_forward(
            pair.target, prefix[-(K + 1) :], _cache_over(pair.target, prefix[: -(K + 1)]), 1
        )
        top2 = one[-1].float().topk(2).values
        rows.append(
            {
                "prompt": p,
                "position": j,
                "top2_gap": float(top2[0] - top2[1]),
                "max_logit_difference": float((one[-1].float() - many[-1].float()).abs().max()),
                "argmax_differs": bool(one[-1].argmax() != many[-1].argmax()),
            }
        )
    return rows


def _cache_over(model: Any, ids: torch.Tensor) -> Any:
    """A KV cache over ``ids`` (``None`` for an empty prefix)."""
    if ids.numel() == 0:
        return None
    _, cache = model_forward(model, ids, None, 1)
    return cache
