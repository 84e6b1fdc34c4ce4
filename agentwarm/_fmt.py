"""Small text formatting rules shared by the CLI's and the renderers' output."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ("NA", "ms", "pct", "plural", "reasons")

NA = "—"
"""What a figure reads when it is unknown or does not apply."""


def plural(n: int, noun: str, plural_form: str | None = None) -> str:
    """``"1 run"``, ``"2 runs"``, ``"0 runs"``; ``plural_form`` for irregular nouns."""
    return f"{n} {noun if n == 1 else plural_form or noun + 's'}"


def pct(rate: float | None, digits: int = 0) -> str:
    """A rate as a percentage (``"50%"``), :data:`NA` when unknown."""
    return NA if rate is None else f"{rate:.{digits}%}"


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds with one decimal (``"38.8"``), :data:`NA` when unknown."""
    return NA if seconds is None else f"{seconds * 1000:.1f}"


def reasons(counts: Mapping[str, int]) -> str:
    """Miss reasons with a count, ``reason count`` joined by `` · `` (``none`` without any)."""
    shown = [f"{reason} {n}" for reason, n in counts.items() if n]
    return " · ".join(shown) if shown else "none"
