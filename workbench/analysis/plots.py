"""Headless PNG plots of a PBT run: learning curves, the lineage, a stitched schedule.

Figures are built with matplotlib's object API (`Figure` + `FigureCanvasAgg`), never
pyplot: pyplot keeps global state and picks a backend for the whole process, which
breaks in threads, on machines without a display, and for a caller that chose another
backend. Each function draws into its own Figure, writes the PNG and returns its path;
the `_..._figure` helpers return the Figure itself, for tests.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from workbench.analysis.lineage import ancestry, ancestry_exploits, describe_changes, format_value
from workbench.lineage_record import LineageRecord

DPI = 100
BEST = "#d62728"  # the best trial and its ancestry
EXPLOIT = "#1f77b4"
LEGEND_OUTSIDE = 8  # more curves than this: the legend goes beside the axes


def _save(figure: Figure, path: str | os.PathLike[str]) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(figure)
    figure.savefig(out, dpi=DPI, format="png")
    return out


def _note(ax: Axes, text: str) -> None:
    ax.text(
        0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.4", fontsize=12
    )


def _colors(count: int) -> list[Any]:
    """Distinct colours, none of them the red kept for the best trial."""
    cmap = matplotlib.colormaps["tab10" if count <= 9 else "tab20"]
    red = {3} if cmap.N == 10 else {6, 7}
    palette = [cmap(index) for index in range(cmap.N) if index not in red]
    return [palette[index % len(palette)] for index in range(count)]


# --- learning curves --------------------------------------------------------------------


def _curves_figure(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    *,
    title: str,
    xlabel: str = "env steps",
    ylabel: str = "episode return",
    highlight: str | None = None,
) -> Figure:
    drawn = {label: sorted(points) for label, points in curves.items() if points}
    outside = len(drawn) > LEGEND_OUTSIDE
    figure = Figure(figsize=(10.5 if outside else 8.0, 4.8), layout="constrained")
    ax = figure.add_subplot()
    for (label, points), color in zip(drawn.items(), _colors(len(drawn)), strict=True):
        best = label == highlight
        ax.plot(
            [x for x, _ in points],
            [y for _, y in points],
            label=f"{label} (best)" if best else label,
            color=BEST if best else color,
            linewidth=2.8 if best else 1.2,
            alpha=1.0 if best or highlight not in drawn else 0.65,
            zorder=3 if best else 2,
        )
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if not drawn:
        _note(ax, "no results yet")
    elif outside:
        figure.legend(loc="outside right upper", fontsize=8)
    else:
        ax.legend(loc="lower right", fontsize=8)
    return figure


def learning_curves(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    path: str | os.PathLike[str],
    *,
    title: str,
    xlabel: str = "env steps",
    ylabel: str = "episode return",
    highlight: str | None = None,
) -> Path:
    """One line per trial (label -> [(x, y)]); `highlight` (the best) drawn thicker."""
    figure = _curves_figure(curves, title=title, xlabel=xlabel, ylabel=ylabel, highlight=highlight)
    return _save(figure, path)


# --- lineage ------------------------------------------------------------------------------


def _lineage_figure(
    trials: Mapping[str, tuple[str, int]],
    records: Sequence[LineageRecord],
    *,
    best: str | None = None,
    title: str = "PBT lineage",
) -> Figure:
    """Lanes per trial (top to bottom by name), an arrow per exploit from the donor's
    checkpoint iteration to the iteration the target was stopped at."""
    known = dict(trials)
    for record in records:  # trials only the records know: up to the last iteration seen
        for trial, name, iteration in (
            (record.target, record.target_name, record.stopped_at),
            (record.source, record.source_name, record.restored_from),
        ):
            if trial not in trials:
                known[trial] = (name, max(iteration, known.get(trial, (name, 0))[1]))
    ids = sorted(known, key=lambda t: (known[t][0], t))
    lane = {trial: index for index, trial in enumerate(ids)}

    figure = Figure(figsize=(10.0, max(3.0, 1.6 + 0.5 * len(ids))), layout="constrained")
    ax = figure.add_subplot()
    ax.set_title(title)
    ax.set_xlabel("Tune iteration")
    if not ids:
        ax.set_yticks([])
        _note(ax, "no trials yet")
        return figure

    for trial in ids:
        ax.plot([1, max(1, known[trial][1])], [lane[trial]] * 2, color="0.75", linewidth=2.5)
    on_path: set[int] = set()
    if best is not None and best in known:
        for segment in ancestry(records, best, known[best][1]):
            y = lane[segment.trial_id]
            ax.plot(
                [segment.first_iteration, segment.last_iteration],
                [y, y],
                color=BEST,
                linewidth=5,
                solid_capstyle="butt",
                gid="ancestry",
                zorder=3,
            )
        on_path = {id(r) for r in ancestry_exploits(records, best, known[best][1])}

    labelled: dict[str, int] = {}  # lane -> labels so far: they alternate below / above
    for record in sorted(records, key=lambda r: (r.seq, r.time)):
        highlighted = id(record) in on_path
        color = BEST if highlighted else EXPLOIT
        target = (record.stopped_at, lane[record.target])
        ax.annotate(
            "",
            xy=target,
            xytext=(record.restored_from, lane[record.source]),
            arrowprops={
                "arrowstyle": "-|>",
                "color": color,
                "linewidth": 1.8 if highlighted else 1.0,
                "shrinkA": 2,
                "shrinkB": 2,
                "connectionstyle": "arc3,rad=0.15",
            },
            zorder=4,
        )
        count = labelled[record.target] = labelled.get(record.target, 0) + 1
        ax.annotate(
            describe_changes(record, limit=2 if highlighted else 1),
            xy=target,
            xytext=(4, -9 if count % 2 else 3),
            textcoords="offset points",
            fontsize=7 if highlighted else 6.5,
            color=color,
            zorder=5,
            annotation_clip=True,
            clip_on=True,
        )
    labels = [known[t][0] + (" (best)" if t == best else "") for t in ids]
    ax.set_yticks(range(len(ids)), labels=labels)
    ax.set_ylim(len(ids) - 0.4, -0.6)  # first trial on top
    ax.set_xlim(0.0, max(final for _, final in known.values()) + 1.5)
    ax.grid(True, axis="x", alpha=0.3)
    if not records:
        _note(ax, "no exploits yet")
    elif best is not None and best in known:
        figure.legend(
            handles=[
                Line2D([], [], color=BEST, linewidth=5, label="ancestry of the best"),
                Line2D([], [], color=EXPLOIT, linewidth=1, label="exploit (donor → clone)"),
            ],
            loc="outside lower center",
            ncols=2,
            fontsize=8,
        )
    return figure


def lineage_tree(
    trials: Mapping[str, tuple[str, int]],
    records: Sequence[LineageRecord],
    path: str | os.PathLike[str],
    *,
    best: str | None = None,
    title: str = "PBT lineage",
) -> Path:
    """Who cloned whom over the iterations; `trials` maps trial id -> (name, final
    iteration). The best trial's ancestry is drawn thick."""
    return _save(_lineage_figure(trials, records, best=best, title=title), path)


# --- schedules --------------------------------------------------------------------------


def _numeric(values: Sequence[Any]) -> bool:
    return all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values)


def _schedule_figure(
    schedule: Mapping[str, Sequence[tuple[int, Any]]],
    *,
    title: str,
    exploits: Sequence[int] | None = None,
    last_iteration: int | None = None,
) -> Figure:
    names = [name for name, points in schedule.items() if points]
    exploits = list(exploits or [])
    rows = max(1, len(names))
    figure = Figure(figsize=(8.0, 1.0 + 1.9 * rows), layout="constrained")
    axes = figure.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    figure.suptitle(title)
    ends = [it for n in names for it, _ in schedule[n]] + exploits + [1]
    end = max([*ends, last_iteration or 1])
    for ax, name in zip(axes, names, strict=False):
        points = sorted(schedule[name], key=lambda point: point[0])
        xs = [it for it, _ in points] + [end]
        values = [value for _, value in points]
        if _numeric(values):
            ys = [float(v) for v in values]
            finite = [y for y in ys if math.isfinite(y)]
            ax.step(xs, [*ys, ys[-1]], where="post", color=EXPLOIT, gid="steps")
            ax.plot(xs[:-1], ys, "o", color=EXPLOIT, markersize=3)
            if finite and min(finite) > 0 and max(finite) / min(finite) > 10:
                ax.set_yscale("log")
        else:
            categories = list(dict.fromkeys(format_value(v) for v in values))
            ys_cat = [categories.index(format_value(v)) for v in values]
            ax.step(xs, [*ys_cat, ys_cat[-1]], where="post", color=EXPLOIT, gid="steps")
            ax.plot(xs[:-1], ys_cat, "o", color=EXPLOIT, markersize=3)
            ax.set_yticks(range(len(categories)), labels=categories)
            ax.set_ylim(-0.5, len(categories) - 0.5)
        ax.set_ylabel(name, fontsize=9)
        ax.grid(True, alpha=0.3)
    if not names:
        _note(axes[0], "no hyperparameter schedule yet")
        axes[0].set_yticks([])
    for ax in axes:
        for iteration in exploits:
            ax.axvline(iteration, color="0.5", linestyle=":", linewidth=1, gid="exploit")
    axes[-1].set_xlabel("Tune iteration")
    return figure


def schedules(
    schedule: Mapping[str, Sequence[tuple[int, Any]]],
    path: str | os.PathLike[str],
    *,
    title: str,
    exploits: Sequence[int] | None = None,
    last_iteration: int | None = None,
) -> Path:
    """One step plot per hyperparameter (name -> [(iteration, value)] at change points),
    dotted lines at `exploits` (iterations); the last values run on to `last_iteration`
    (the trial's final one: change points alone do not say how long the last one held)."""
    figure = _schedule_figure(
        schedule, title=title, exploits=exploits, last_iteration=last_iteration
    )
    return _save(figure, path)


# --- where the time goes ---------------------------------------------------------------------

TIME_SPLIT_PARTS = ("sampling", "learner update", "weight sync", "rest")
TIME_SPLIT_COLORS = ("#2ca02c", "#1f77b4", "#ff7f0e", "#c7c7c7")


def _time_split_figure(
    shares: Mapping[str, Sequence[tuple[float, float, float, float, float]]],
    *,
    title: str,
    subtitles: Mapping[str, str] | None = None,
) -> Figure:
    labels = [label for label, rows in shares.items() if rows] or ["-"]
    cols = min(4, len(labels))
    rows = math.ceil(len(labels) / cols)
    figure = Figure(figsize=(3.6 * cols + 1.6, 1.2 + 2.4 * rows), layout="constrained")
    axes = figure.subplots(rows, cols, sharey=True, squeeze=False).ravel()
    figure.suptitle(title)
    for ax, label in zip(axes, labels, strict=False):
        points = sorted(shares.get(label, []))
        ax.set_title(f"{label}: {subtitles[label]}" if subtitles and label in subtitles else label)
        ax.set_ylim(0, 1)
        ax.grid(True, alpha=0.3)
        if not points:
            _note(ax, "no timing figures yet")
            continue
        xs = [p[0] for p in points]
        parts = [[p[i + 1] for p in points] for i in range(len(TIME_SPLIT_PARTS))]
        if len(xs) == 1:  # one iteration: a bar instead of an area with no width
            bottom = 0.0
            for part, color in zip(parts, TIME_SPLIT_COLORS, strict=True):
                ax.bar(xs, part, bottom=bottom, color=color, width=0.6)
                bottom += part[0]
        else:
            ax.stackplot(xs, *parts, colors=TIME_SPLIT_COLORS, alpha=0.9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("iteration (result of the trial's run)", fontsize=8)
    for ax in axes[len(labels) :]:
        ax.set_visible(False)
    for ax in axes[::cols]:
        ax.set_ylabel("share of the iteration's wall time", fontsize=8)
    handles = [
        Patch(color=color, label=part)
        for part, color in zip(TIME_SPLIT_PARTS, TIME_SPLIT_COLORS, strict=True)
    ]
    figure.legend(handles=handles, loc="outside right upper", fontsize=8)
    return figure


def time_split(
    shares: Mapping[str, Sequence[tuple[float, float, float, float, float]]],
    path: str | os.PathLike[str],
    *,
    title: str,
    subtitles: Mapping[str, str] | None = None,
) -> Path:
    """One stacked-area panel per trial: label -> [(iteration, sampling, learner update,
    weight sync, rest)], each a share of that iteration's wall time; `subtitles` (the
    verdicts) go next to the labels."""
    return _save(_time_split_figure(shares, title=title, subtitles=subtitles), path)
