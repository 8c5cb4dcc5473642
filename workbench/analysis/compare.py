"""Populations side by side (`workbench compare POP_A POP_B ...`): a table and a PNG.

Each population's curve is the best score any of its policies had reached against the
env steps that policy was trained on: every result of every trial is a point (the
trial's ``num_env_steps_sampled_lifetime``, its score), and the curve is the running
maximum over the points in order of env steps. Under PBT a trial that cloned another
carries its donor's env steps, so a point counts the steps of the policy's whole
lineage. The same curve against wall-clock time puts each result at the seconds since its
population started (when MLflow logged it; a resumed population's pause between sessions
counts). Each member's own running best can be drawn behind its population's. Beside the
curves: each population's final evaluation, the best trial's ``eval/*`` (mean ± std over
its episodes), and the population's totals (trials, env steps of all trials, wall time
from its ``population/*`` summary metrics).

Populations may come from different stores (``POPULATION@STORE``: a laptop's results
beside a cluster's)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from workbench.analysis.histories import metric_history
from workbench.analysis.leaderboards import Population, TrialRun, leaderboard
from workbench.analysis.populations import find_population
from workbench.errors import ExperimentError
from workbench.names import POPULATION_WALL_TIME_METRIC, STEPS_METRIC
from workbench.tracking.store import open_store

DPI = 100
X = TypeVar("X", int, float)  # a curve's x: env steps or seconds
AXES = {"env-steps": "env steps the policy was trained on", "wall-clock": "wall-clock seconds"}
STORE_SEPARATOR = "@"  # POPULATION@STORE; population names cannot hold it


@dataclass
class PopulationCurve:
    """One population of the comparison."""

    name: str
    run_id: str
    trials: int
    curve: list[tuple[int, float]] = field(default_factory=list)  # (env steps, best so far)
    # (seconds since the population started, best so far)
    wall_curve: list[tuple[float, float]] = field(default_factory=list)
    # each member's own running best: trial -> [(env steps, best), ...] and by wall clock
    members: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    wall_members: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    store: str = ""  # the tracking URI it was read from
    best_trial: str | None = None
    best_score: float = math.nan
    # The best evaluated trial's evaluation: (trial, mean, std, episodes).
    evaluation: tuple[str, float, float | None, int | None] | None = None
    env_steps: int = 0  # all trials' env steps together
    steps_reached: int = 0  # the most env steps any of its policies was trained on
    wall_time_s: float | None = None
    seconds_reached: float = 0.0  # its last result, in seconds since it started

    def to_json(self) -> dict[str, Any]:
        evaluation = None
        if self.evaluation is not None:
            trial, mean, std, episodes = self.evaluation
            evaluation = {"trial": trial, "mean": mean, "std": std, "episodes": episodes}
        return {
            "population": self.name,
            "store": self.store,
            "run_id": self.run_id,
            "trials": self.trials,
            "best_trial": self.best_trial,
            "best_score": None if math.isnan(self.best_score) else self.best_score,
            "evaluation": evaluation,
            "env_steps": self.env_steps,
            "wall_time_s": self.wall_time_s,
            "steps_reached": self.steps_reached,
            "curve": [[steps, score] for steps, score in self.curve],
            "wall_curve": [[seconds, score] for seconds, score in self.wall_curve],
            "members": {t: [list(p) for p in c] for t, c in self.members.items()},
            "wall_members": {t: [list(p) for p in c] for t, c in self.wall_members.items()},
        }


def _trial_points(client: Any, trial: TrialRun, start_ms: int) -> list[tuple[int, float, float]]:
    """(env steps, seconds since `start_ms`, score) of each of the trial's results that has
    a score and env steps; the seconds are when MLflow logged the score."""
    scores = {
        step: (value, ms)
        for step, value, ms in metric_history(client, trial.run_id, trial.score_metric)
    }
    steps = {step: value for step, value, _ in metric_history(client, trial.run_id, STEPS_METRIC)}
    return [
        (int(steps[k]), max(0.0, (scores[k][1] - start_ms) / 1000.0), scores[k][0])
        for k in sorted(scores.keys() & steps.keys())
        if not math.isnan(scores[k][0])
    ]


def best_curve(points: list[tuple[X, float]]) -> list[tuple[X, float]]:
    """The running maximum of the scores in order of x (env steps or seconds): one point
    per change."""
    curve: list[tuple[X, float]] = []
    best = -math.inf
    for x, score in sorted(points, key=lambda p: (p[0], -p[1])):
        if score > best:
            best = score
            curve.append((x, score))
    return curve


def population_curve(client: Any, population: Population, store: str = "") -> PopulationCurve:
    points: list[tuple[int, float]] = []
    wall_points: list[tuple[float, float]] = []
    members: dict[str, list[tuple[int, float]]] = {}
    wall_members: dict[str, list[tuple[float, float]]] = {}
    for trial in population.trials:
        own = _trial_points(client, trial, population.start_ms)
        points.extend((steps, score) for steps, _, score in own)
        wall_points.extend((seconds, score) for _, seconds, score in own)
        members[trial.name] = best_curve([(steps, score) for steps, _, score in own])
        wall_members[trial.name] = best_curve([(seconds, score) for _, seconds, score in own])
    ranked = leaderboard(population)
    best = ranked[0] if ranked and not math.isnan(ranked[0].best_return) else None
    evaluated = [t for t in population.trials if t.evaluation is not None]
    evaluation = None
    if evaluated:
        top = max(evaluated, key=lambda t: t.evaluation[0] if t.evaluation else -math.inf)
        assert top.evaluation is not None
        evaluation = (top.name, *top.evaluation)
    parent = client.get_run(population.run_id).data.metrics
    return PopulationCurve(
        name=population.name,
        run_id=population.run_id,
        trials=len(population.trials),
        curve=best_curve(points),
        wall_curve=best_curve(wall_points),
        members=members,
        wall_members=wall_members,
        store=store,
        best_trial=best.name if best else None,
        best_score=best.best_return if best else math.nan,
        evaluation=evaluation,
        env_steps=sum(t.env_steps for t in population.trials),
        steps_reached=max((steps for steps, _ in points), default=0),
        wall_time_s=parent.get(POPULATION_WALL_TIME_METRIC),
        seconds_reached=max((seconds for seconds, _ in wall_points), default=0.0),
    )


def split_ref(ref: str) -> tuple[str, str | None]:
    """``POPULATION@STORE`` as (population, store); a plain reference has no store of its
    own (None: the command's --store)."""
    population, sep, store = ref.partition(STORE_SEPARATOR)
    return (population, store) if sep and population and store else (ref, None)


def compare(refs: list[str], store: str | None) -> list[PopulationCurve]:
    """The populations `refs` name (run id, name, or MLflow experiment: its newest; each
    in `store`, or in its own as ``POPULATION@STORE``), in that order; naming one twice is
    refused."""
    opened: dict[str | None, tuple[str, Any]] = {}
    chosen = []
    for ref in refs:
        name, own_store = split_ref(ref)
        where = own_store if own_store is not None else store
        if where not in opened:
            opened[where] = open_store(where)
        uri, client = opened[where]
        chosen.append((uri, client, find_population(client, name, uri)))
    seen: dict[tuple[str, str], str] = {}
    for ref, (uri, _, population) in zip(refs, chosen, strict=True):
        key = (uri, population.run_id)
        if key in seen:
            raise ExperimentError.single(
                uri,
                "",
                f"{ref!r} and {seen[key]!r} are the same population "
                f"({population.name}); valid: different populations",
            )
        seen[key] = ref
    return [population_curve(client, p, uri) for uri, client, p in chosen]


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def comparison_rows(curves: list[PopulationCurve]) -> tuple[list[str], list[list[str]]]:
    """The table `workbench compare` prints: headers and one row per population."""
    stores = len({c.store for c in curves}) > 1
    headers = ["population", *(["store"] if stores else [])]
    headers += ["trials", "env steps", "wall time s", "best score", "best trial"]
    headers += ["eval mean ± std (n)", "steps to best"]
    rows = []
    for c in curves:
        if c.evaluation is not None:
            trial, mean, std, episodes = c.evaluation
            spread = "" if std is None else f" ± {std:.1f}"
            count = "" if episodes is None else f" ({episodes})"
            shown = f"{mean:.1f}{spread}{count} {trial}"
        else:
            shown = "-"
        rows.append(
            [
                c.name,
                *([c.store] if stores else []),
                str(c.trials),
                str(c.env_steps),
                _num(c.wall_time_s),
                _num(c.best_score),
                c.best_trial or "-",
                shown,
                str(c.curve[-1][0]) if c.curve else "-",
            ]
        )
    return headers, rows


def plot_comparison(
    curves: list[PopulationCurve],
    path: str | os.PathLike[str],
    *,
    x_axis: str = "env-steps",
    members: bool = False,
) -> Path:
    """A PNG: the best-score curves against env steps or wall-clock seconds (`x_axis`),
    each member's own behind them when `members`, (left) and the final evaluations,
    mean ± std (right)."""
    if x_axis not in AXES:
        raise ValueError(f"x_axis: one of {', '.join(AXES)}, not {x_axis!r}")
    figure = Figure(figsize=(13, 5), layout="constrained")
    curves_ax, evals_ax = figure.subplots(1, 2, width_ratios=[2, 1])
    colors = [f"C{i % 10}" for i in range(len(curves))]
    wall = x_axis == "wall-clock"
    for curve, color in zip(curves, colors, strict=True):
        line: list[tuple[Any, float]] = list(curve.wall_curve if wall else curve.curve)
        reached: float = curve.seconds_reached if wall else curve.steps_reached
        if members:
            for own in (curve.wall_members if wall else curve.members).values():
                if own:
                    xs = [x for x, _ in own] + [reached]
                    ys = [y for _, y in own] + [own[-1][1]]
                    curves_ax.step(xs, ys, where="post", color=color, linewidth=0.8, alpha=0.35)
        if line:
            xs = [x for x, _ in line]
            ys = [y for _, y in line]
            curves_ax.plot(xs[-1], ys[-1], "o", color=color)  # where its best was reached
            if reached > xs[-1]:  # flat on to its last result
                xs, ys = [*xs, reached], [*ys, ys[-1]]
            curves_ax.step(xs, ys, where="post", color=color, label=curve.name, linewidth=2)
    curves_ax.set_xlabel(
        "wall-clock seconds since the population started" if wall else AXES[x_axis]
    )
    curves_ax.set_ylabel("best score so far")
    against = "wall-clock time" if wall else "env steps"
    thin = " (thin: each member's own)" if members else ""
    curves_ax.set_title(f"Best score against {against}{thin}")
    curves_ax.grid(alpha=0.3)
    if any(c.curve for c in curves):
        curves_ax.legend(loc="lower right")
    names = [c.name for c in curves]
    means = [c.evaluation[1] if c.evaluation else math.nan for c in curves]
    errors = [
        (c.evaluation[2] or 0.0) if c.evaluation and c.evaluation[2] is not None else 0.0
        for c in curves
    ]
    positions = list(range(len(curves)))
    evals_ax.bar(
        positions,
        [0.0 if math.isnan(m) else m for m in means],
        yerr=errors,
        color=colors,
        capsize=6,
    )
    for x, mean, error in zip(positions, means, errors, strict=True):
        label = "not evaluated" if math.isnan(mean) else f"{mean:.1f}"
        evals_ax.annotate(
            label,
            (x, 0.0 if math.isnan(mean) else mean + error),
            ha="center",
            va="bottom",
            xytext=(0, 4),
            textcoords="offset points",
        )
    evals_ax.set_xticks(positions, names, rotation=20, ha="right")
    evals_ax.set_ylabel("evaluated return (mean ± std)")
    evals_ax.set_title("Final evaluation of the best evaluated trial")
    evals_ax.grid(alpha=0.3, axis="y")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(figure)
    figure.savefig(out, dpi=DPI, format="png")
    return out
