"""How the command line shows numbers, times and tables (printing is the CLI's job)."""

from __future__ import annotations

import datetime as dt
import math
import shutil
import textwrap
from collections.abc import Callable, Iterable

from workbench.names import (
    EVAL_EPISODES_METRIC,
    EVAL_METRIC_PREFIX,
    EVAL_RETURN_METRIC,
    EVAL_STD_METRIC,
    RETURN_METRIC,
    SCORE_EPISODES_METRIC,
    SCORE_METRIC,
    SCORE_STD_METRIC,
    STEP_METRIC,
    STEPS_METRIC,
    USER_EVAL_METRIC_PREFIX,
)


def counted(count: int, noun: str) -> str:
    """'1 hyperparameter', '2 hyperparameters': a count with its noun."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def terminal_width() -> int:
    """The columns output should fit: COLUMNS, else the terminal's, else 100."""
    return shutil.get_terminal_size((100, 24)).columns


def table(
    headers: list[str], rows: list[list[str]], *, width: int | None = None, keep: int = 1
) -> str:
    """Left-aligned columns, two spaces apart, no trailing blanks.

    Wider than ``width``: wrapped into blocks one under the other, each within ``width``
    and each starting with the first ``keep`` columns (the rows' names); None: one block,
    however wide."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    blocks = [list(range(len(headers)))]
    if width is not None and _span(widths, blocks[0]) > width:
        key = list(range(min(keep, len(headers))))
        blocks = []
        current = list(key)
        for i in range(len(key), len(headers)):
            if len(current) > len(key) and _span(widths, [*current, i]) > width:
                blocks.append(current)
                current = list(key)
            current.append(i)
        blocks.append(current)
    return "\n\n".join(_block(headers, rows, widths, block) for block in blocks)


def _span(widths: list[int], columns: list[int]) -> int:
    return sum(widths[i] for i in columns) + 2 * (len(columns) - 1)


def _block(headers: list[str], rows: list[list[str]], widths: list[int], columns: list[int]) -> str:
    lines = ["  ".join(headers[i].ljust(widths[i]) for i in columns)]
    lines += ["  ".join(r[i].ljust(widths[i]) for i in columns) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def num(value: float | int | None, digits: int = 4) -> str:
    """A number to `digits` significant digits; whole numbers as integers; "-" for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.{digits}g}"
    return str(int(value))


def mean_std(evaluation: tuple[float, float | None, int | None] | None) -> str:
    """An evaluation as mean ± std over n episodes ("-" for none): 490 ± 12.5 (n=100)."""
    if evaluation is None:
        return "-"
    mean, std, episodes = evaluation
    text = num(mean)
    if std is not None:
        text += f" ± {num(std, 3)}"
    if episodes is not None:
        text += f" (n={episodes})"
    return text


def shown(value: object) -> str:
    """A table cell: floats through `num`, anything else as text, "-" for none."""
    if value is None:
        return "-"
    return num(value) if isinstance(value, float) else str(value)


def when(ms: int | None, *, short: bool = False) -> str:
    """An MLflow timestamp (ms since the epoch) in local time (``short``: to the minute,
    without the year); "-" for none."""
    if not ms:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000).strftime(
        "%m-%d %H:%M" if short else "%Y-%m-%d %H:%M:%S"
    )


def param_text(text: str) -> str:
    """An MLflow param (text) as `num` shows a number, when it is one."""
    try:
        value = float(text)
    except ValueError:
        return text
    return num(value) if math.isfinite(value) else text


_UNDER = str.maketrans({"└": " ", "─": " ", "*": " "})


def wrapped(lines: list[str], width: int | None) -> list[str]:
    """Each line wrapped to ``width`` (None: as it is), its continuation indented under
    its text (past a leading "-> " too)."""
    if width is None:
        return list(lines)
    out: list[str] = []
    for line in lines:
        body = line.lstrip(" *│├└─")  # past a tree's branches too (`workbench lineage`)
        lead = line[: len(line) - len(body)]
        # The continuation: under the text, a branch that goes on still drawn.
        hang = lead.replace("├", "│").translate(_UNDER) + (
            "   " if body.startswith("-> ") else "  "
        )
        out += textwrap.wrap(
            body,
            width=width,
            initial_indent=lead,
            subsequent_indent=hang,
            break_long_words=False,
            break_on_hyphens=False,
        ) or [line]
    return out


# `workbench show`'s metric groups, in the order a person reads them: each group's known
# keys first, in this order, then its other keys alphabetically.
METRIC_GROUPS: tuple[tuple[str, tuple[str, ...], Callable[[str], bool]], ...] = (
    (
        "return",
        (
            SCORE_METRIC,
            SCORE_STD_METRIC,
            SCORE_EPISODES_METRIC,
            RETURN_METRIC,
            "env_runners/episode_return_max",
            "env_runners/episode_return_min",
            "env_runners/episode_len_mean",
            "env_runners/num_episodes",
        ),
        lambda k: k.startswith(("score/", "env_runners/episode_")),
    ),
    (
        "evaluation",
        (EVAL_RETURN_METRIC, EVAL_STD_METRIC, EVAL_EPISODES_METRIC),
        lambda k: k.startswith((EVAL_METRIC_PREFIX, USER_EVAL_METRIC_PREFIX, "evaluation/")),
    ),
    (
        "progress and throughput",
        (
            STEP_METRIC,
            STEPS_METRIC,
            "time_total_s",
            "time_this_iter_s",
            "env_runners/num_env_steps_sampled_lifetime_throughput/throughput_since_last_reduce",
            "learners/__all_modules__/num_env_steps_trained_lifetime",
            "learners/__all_modules__/num_env_steps_trained_throughput",
        ),
        lambda k: "throughput" in k or k.endswith("_lifetime"),
    ),
    ("learning", (), lambda k: k.startswith("learners/") and "timer" not in k),
    (
        "time split and timers",
        (),
        lambda k: (
            k.startswith(("workbench/", "timers/", "perf/"))
            or "timer" in k
            or k == "env_runners/sample"
        ),
    ),
    ("other", (), lambda k: True),
)
# Shown without --wide.
FIRST_GROUPS = 4


def metric_groups(keys: Iterable[str]) -> list[tuple[str, list[str]]]:
    """The metric keys (hp/* left out: they are hyperparameters) by group, ranked; only
    the groups that have any."""
    left = sorted(k for k in keys if not k.startswith("hp/"))
    out = []
    for name, ranked, belongs in METRIC_GROUPS:
        mine = [k for k in left if k in ranked or belongs(k)]
        if not mine:
            continue
        order = {k: i for i, k in enumerate(ranked)}
        mine.sort(key=lambda k: (order.get(k, len(order)), k))
        out.append((name, mine))
        left = [k for k in left if k not in mine]
    return out


def aligned(rows: list[list[str]], width: int | None = None) -> str:
    """(name, value) rows as two columns, without a header line; within ``width`` a name
    too long to share a line with the values has its value on the next line, under the
    others'."""
    if not rows:
        return ""
    if width is not None:
        values = max(len(v) for _, v in rows)
        room = width - values - 2
        short = [n for n, _ in rows if len(n) <= room]
        if len(short) < len(rows) and short:
            column = max(len(n) for n in short)
            out = []
            for name, value in rows:
                if len(name) <= room:
                    out.append(f"{name.ljust(column)}  {value}".rstrip())
                else:
                    lead = len(name) - len(name.lstrip(" "))
                    out += [name, " " * max(column + 2, lead + 2) + value]
            return "\n".join(out)
    return table(["", ""], rows).split("\n", 1)[1]
