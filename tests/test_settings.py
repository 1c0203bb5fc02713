"""Flags generated from settings dataclasses: parsing nothing gives the dataclass's defaults, every
field has a flag, values round-trip through the parser and back through ``command_line``."""

import argparse
import dataclasses

import pytest

from specdec_lib.bench import BenchSettings
from specdec_lib.research.device_costs import CostSettings
from specdec_lib.research.exactness import ExactnessSettings
from specdec_lib.settings import (
    add_arguments,
    command_line,
    from_arguments,
    from_command_line,
    setting,
)
from specdec_lib.training import DataSettings, EvalSettings, TrainSettings


@dataclasses.dataclass
class Toy:
    n: int = setting(3, "a count")
    xs: list[float] = setting([1.0, 0.5], "some numbers")
    layers: tuple[int, ...] | None = setting((0, -1), "layers, or none")
    maybe: int | None = setting(None, "an optional count")
    kind: str = setting("a", "a choice", choices=("a", "b"))
    flag: bool = setting(False, "a switch")


def _parse(cls, argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser, cls)
    return from_arguments(cls, parser.parse_args(argv))


@pytest.mark.parametrize(
    "cls",
    [
        BenchSettings,
        EvalSettings,
        DataSettings,
        TrainSettings,
        CostSettings,
        ExactnessSettings,
        Toy,
    ],
)
def test_no_flags_give_the_defaults(cls):
    assert _parse(cls, []) == cls()


def test_flags_parse_to_the_annotated_types():
    t = _parse(Toy, ["--n", "5", "--xs", "1", "0", "--layers", "none", "--maybe", "2", "--flag"])
    assert t == Toy(n=5, xs=[1.0, 0.0], layers=None, maybe=2, flag=True)
    assert _parse(Toy, ["--layers", "2", "-1"]).layers == (2, -1)
    with pytest.raises(SystemExit):
        _parse(Toy, ["--kind", "c"])
    with pytest.raises(SystemExit):
        _parse(Toy, ["--n", "x"])


def test_command_line_round_trips():
    t = Toy(n=4, xs=[2.0], layers=None, flag=True)
    flags = command_line(Toy, dataclasses.asdict(t))
    assert flags == ["--n 4", "--xs 2.0", "--layers none", "--flag"]
    assert _parse(Toy, " ".join(flags).split()) == t
    s = TrainSettings(epochs=1.0, teacher_layers=(0, -1), feature_layers=(-1,))
    argv = " ".join(command_line(TrainSettings, dataclasses.asdict(s))).split()
    assert _parse(TrainSettings, argv) == s


def test_a_stored_command_line_reads_back_to_its_settings():
    t = Toy(n=4, xs=[2.0], layers=None, flag=True)
    argv = ["toy", *" ".join(command_line(Toy, dataclasses.asdict(t))).split()]
    assert from_command_line(Toy, [*argv, "--out", "x.json", "--no-progress"]) == t
    assert from_command_line(Toy, ["toy"]) == Toy()


def test_validation_is_the_dataclass_s():
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        _parse(DataSettings, ["--batch-size", "0"])
