"""How the command line shows numbers, times and tables (printing is the CLI's job)."""

from __future__ import annotations

import datetime as dt
import math


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns, two spaces apart, no trailing blanks."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def num(value: float | int | None, digits: int = 4) -> str:
    """A number to `digits` significant digits; whole numbers as integers; "-" for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.{digits}g}"
    return str(int(value))


def shown(value: object) -> str:
    """A table cell: floats through `num`, anything else as text, "-" for none."""
    if value is None:
        return "-"
    return num(value) if isinstance(value, float) else str(value)


def when(ms: int | None) -> str:
    """An MLflow timestamp (ms since the epoch) in local time; "-" for none."""
    if not ms:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")
