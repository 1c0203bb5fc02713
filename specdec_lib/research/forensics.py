"""Why greedy bfloat16 speculative output can differ from the autoregressive output (notebook 02):
:func:`near_tie_evidence` measures near-ties at each first difference."""

from __future__ import annotations

from typing import Any

import torch

from ..bench import against_baseline
from ..lm import model_forward
from ..models import ModelPair

__all__ = ["near_tie_evidence"]


@torch.inference_mode()
def near_tie_evidence(pair: ModelPair, result: dict[str, Any], K: int) -> list[dict[str, Any]]:
    """For each speculative cell of a greedy ``result`` at ``K`` that differs from the
    autoregressive one: the target's logits at the first differing position ``j``, from a one-token
    pass and as the last row of a ``K + 1``-token verification pass. Returns per divergence
    ``top2_gap`` of the one-token pass and ``max_logit_difference`` between the passes: a near-tie
    when the gap is within that difference."""
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
