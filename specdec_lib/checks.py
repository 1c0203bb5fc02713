"""Argument checks at the library's boundary, each raising a ``ValueError`` that names the argument.

One place for "is this a positive integer" and its kin, so that every function, settings dataclass
and command-line flag says the same thing about the same mistake. Each check returns the value
(converted where that is harmless, e.g. an int to a float) so that it can be used inline::

    self.K = positive_int(K, "K", "draft tokens per step")
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

__all__ = ["non_negative_int", "one_of", "positive_int", "probability", "real"]


def _what(what: str | None) -> str:
    return f" ({what})" if what else ""


def _is_int(value: Any) -> bool:
    # numbers.Integral takes numpy's integers too; a bool is an Integral but never a count.
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_int(value: Any, name: str, what: str | None = None, *, optional: bool = False):
    """``value`` as an ``int >= 1`` (``None`` passes when ``optional``)."""
    if optional and value is None:
        return None
    if not _is_int(value) or value < 1:
        extra = " or None" if optional else ""
        raise ValueError(f"{name} must be a positive integer{extra}{_what(what)}, got {value!r}")
    return int(value)


def non_negative_int(value: Any, name: str, what: str | None = None, *, optional: bool = False):
    """``value`` as an ``int >= 0`` (``None`` passes when ``optional``)."""
    if optional and value is None:
        return None
    if not _is_int(value) or value < 0:
        extra = " or None" if optional else ""
        raise ValueError(
            f"{name} must be a non-negative integer{extra}{_what(what)}, got {value!r}"
        )
    return int(value)


def real(
    value: Any,
    name: str,
    what: str | None = None,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    optional: bool = False,
) -> float | None:
    """``value`` as a finite ``float`` within the given bounds (open or closed at each end)."""
    if optional and value is None:
        return None
    lo = "" if low is None else ("(" if low_open else "[") + f"{low:g}"
    hi = "" if high is None else f"{high:g}" + (")" if high_open else "]")
    where = f" in {lo or '(-inf'}, {hi or 'inf)'}" if (lo or hi) else ""
    message = f"{name} must be a finite number{where}{' or None' if optional else ''}{_what(what)}"
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise ValueError(f"{message}, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{message}, got {value!r}")
    if low is not None and (v < low or (low_open and v == low)):
        raise ValueError(f"{message}, got {value!r}")
    if high is not None and (v > high or (high_open and v == high)):
        raise ValueError(f"{message}, got {value!r}")
    return v


def probability(
    value: Any, name: str, what: str | None = None, *, one: bool = True, optional: bool = False
) -> float | None:
    """``value`` in ``(0, 1]`` (``(0, 1)`` when ``one`` is false)."""
    return real(
        value, name, what, low=0.0, high=1.0, low_open=True, high_open=not one, optional=optional
    )


def one_of(value: Any, name: str, choices: Iterable[Any]) -> Any:
    """``value`` if it is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value
