"""Argument checks: each returns the (converted) value or raises a ``ValueError`` naming the
argument, e.g. ``self.K = positive_int(K, "K", "draft tokens per step")``."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

__all__ = ["non_negative_int", "one_of", "positive_int", "probability", "real"]


def _what(what: str | None) -> str:
    return f" ({what})" if what else ""


def _int_at_least(low: int, kind: str, value: Any, name: str, what: str | None, optional: bool):
    if optional and value is None:
        return None
    # numbers.Integral admits numpy's integers; a bool is never a count.
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        extra = " or None" if optional else ""
        raise ValueError(f"{name} must be a {kind} integer{extra}{_what(what)}, got {value!r}")
    return int(value)


def positive_int(value: Any, name: str, what: str | None = None, *, optional: bool = False):
    """``value`` as an ``int >= 1`` (``None`` passes when ``optional``)."""
    return _int_at_least(1, "positive", value, name, what, optional)


def non_negative_int(value: Any, name: str, what: str | None = None, *, optional: bool = False):
    """``value`` as an ``int >= 0`` (``None`` passes when ``optional``)."""
    return _int_at_least(0, "non-negative", value, name, what, optional)


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
    is_real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    v = float(value) if is_real else math.nan
    too_low = low is not None and (v < low or (low_open and v == low))
    too_high = high is not None and (v > high or (high_open and v == high))
    if not math.isfinite(v) or too_low or too_high:
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
