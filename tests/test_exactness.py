"""The exactness grid (``specdec_lib.exactness``) on the tiny random pair: a correct configuration
passes the chi-square test against the target's exact law, the failing arms do not."""

import pytest

from specdec_lib.exactness import Config, as_frame, shipped_grid


def test_grid_passes_the_right_decoder_and_rejects_the_faults(tiny_pair):
    result = shipped_grid(
        {"tiny model draft": Config("model", "float32")},
        faults={
            "prototype's correction": "tiny model draft",
            "uncropped target cache": "tiny model draft",
            "bonus from the wrong row": "tiny model draft",
        },
        n=4000,
        prompt="abc",
        first=None,
        K=1,
        length=2,
        load=lambda c: tiny_pair,
    )
    df = as_frame(result).set_index("name")
    assert df.loc["tiny model draft", "p"] > 1e-3
    assert df.loc["prototype's correction", "p"] < 1e-4
    assert df.loc["uncropped target cache", "p"] < 1e-6
    assert df.loc["bonus from the wrong row", "p"] < 1e-6
    assert (df.bins >= 2).all() and df.loc["tiny model draft", "bonus_steps"] > 0


def test_grid_refuses_an_unknown_failing_arm(tiny_pair):
    with pytest.raises(ValueError, match="faults"):
        shipped_grid(
            {"tiny": Config("model", "float32")},
            faults={"a typo": "tiny"},
            n=10,
            prompt="abc",
            first=None,
            K=1,
            length=2,
            load=lambda c: tiny_pair,
        )
