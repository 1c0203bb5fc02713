"""Numbers as the series writes them in prose: a speedup with its interval, a range of values."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["interval", "span"]


def interval(value: float, low: float, high: float) -> str:
    """A speedup and its 95 % interval: ``1.16× [1.08, 1.23]``."""
    return f"{value:.2f}× [{low:.2f}, {high:.2f}]"


def span(values: Iterable[float], fmt: str = ".2f") -> str:
    """``a–b`` for the range of ``values``, or ``a`` alone when both ends read the same."""
    values = list(values)
    lo, hi = f"{min(values):{fmt}}", f"{max(values):{fmt}}"
    return lo if lo == hi else f"{lo}–{hi}"
