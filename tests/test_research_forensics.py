"""Near-tie forensics of greedy outputs (``specdec_lib.research.forensics``) on the tiny pair."""

from specdec_lib.research.forensics import near_tie_evidence


def test_near_tie_evidence_at_each_first_difference(tiny_pair):
    result = {
        "prompts": [{"text": "abc"}, {"text": "hello"}],
        "cells": {
            "autoregressive|0|0|0": {"tokens": [5, 6, 7, 8]},
            "speculative|2|0|0": {"tokens": [5, 6, 9, 8]},  # differs at position 2
            "autoregressive|0|1|0": {"tokens": [4, 4, 4]},
            "speculative|2|1|0": {"tokens": [4, 4, 4]},  # identical: nothing to explain
            "speculative|3|0|0": {"tokens": [9]},  # another K: not asked for
        },
    }
    rows = near_tie_evidence(tiny_pair, result, K=2)
    assert [(r["prompt"], r["position"]) for r in rows] == [(0, 2)]
    row = rows[0]
    assert row["top2_gap"] >= 0 and row["max_logit_difference"] >= 0
    # float32: the one-token pass and the verification pass agree to rounding
    assert row["max_logit_difference"] < 1e-3 and not row["argmax_differs"]
