"""Populations side by side (`workbench compare POP_A POP_B ...`): a table and a PNG.

Each population's curve is the best score any of its policies had reached against the
env steps that policy was trained on: every result of every trial is a point (the
trial's ``num_env_steps_sampled_lifetime``, its score), and the curve is the running
maximum over the points in order of env steps. Under PBT a trial that cloned another
carries its donor's env steps, so a point counts the steps of the policy's whole
lineage. Beside the curves: each population's final evaluation, the best trial's
``eval/*`` (mean ± std over its episodes), and the population's totals (trials, env
steps of all trials, wall time from its ``population/*`` summary metrics)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from workbench.analysis.histories import metric_history
from workbench.analysis.leaderboards import Population, TrialRun, leaderboard
from workbench.analysis.populations import find_population
from workbench.errors import ExperimentError
from workbench.names import POPULATION_WALL_TIME_METRIC, STEPS_METRIC

DPI = 100


@dataclass
class PopulationCurve:
    """One population of the comparison."""

    name: str
    run_id: str
    trials: int
    curve: list[tuple[int, float]] = field(default_factory=list)  # (env steps, best so far)
    best_trial: str | None = None
    best_score: float = math.nan
    # The best evaluated trial's evaluation: (trial, mean, std, episodes).
    evaluation: tuple[str, float, float | None, int | None] | None = None
    env_steps: int = 0  # all trials' env steps together
    steps_reached: int = 0  # the most env steps any of its policies was trained on
    wall_time_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        evaluation = None
        if self.evaluation is not None:
            trial, mean, std, episodes = self.evaluation
            evaluation = {"trial": trial, "mean": mean, "std": std, "episodes": episodes}
        return {
            "population": self.name,
            "run_id": self.run_id,
            "trials": self.trials,
            "best_trial": self.best_trial,
            "best_score": None if math.isnan(self.best_score) else self.best_score,
            "evaluation": evaluation,
            "env_steps": self.env_steps,
            "wall_time_s": self.wall_time_s,
            "steps_reached": self.steps_reached,
            "curve": [[steps, score] for steps, score in self.curve],
        }


def _trial_points(client: Any, trial: TrialRun) -> list[tuple[int, float]]:
    """(env steps, score) of each of the trial's results that has both."""
    scores = {
        step: value for step, value, _ in metric_history(client, trial.run_id, trial.score_metric)
    }
    steps = {step: value for step, value, _ in metric_history(client, trial.run_id, STEPS_METRIC)}
    return [
        (int(steps[k]), scores[k])
        for k in sorted(scores.keys() & steps.keys())
        if not math.isnan(scores[k])
    ]


def best_curve(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """The running maximum of the scores in order of env steps: one point per change."""
    curve: list[tuple[int, float]] = []
    best = -math.inf
    for steps, score in sorted(points, key=lambda p: (p[0], -p[1])):
        if score > best:
            best = score
            curve.append((steps, score))
    return curve


def population_curve(client: Any, population: Population) -> PopulationCurve:
    points: list[tuple[int, float]] = []
    for trial in population.trials:
        points.extend(_trial_points(client, trial))
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
        best_trial=best.name if best else None,
        best_score=best.best_return if best else math.nan,
        evaluation=evaluation,
        env_steps=sum(t.env_steps for t in population.trials),
        steps_reached=max((steps for steps, _ in points), default=0),
        wall_time_s=parent.get(POPULATION_WALL_TIME_METRIC),
    )


def compare(client: Any, refs: list[str], uri: str) -> list[PopulationCurve]:
    """The populations `refs` name (run id, name, or MLflow experiment: its newest), in
    that order; naming one twice is refused."""
    chosen = [find_population(client, ref, uri) for ref in refs]
    seen: dict[str, str] = {}
    for ref, population in zip(refs, chosen, strict=True):
        if population.run_id in seen:
            raise ExperimentError.single(
                uri,
                "",
                f"{ref!r} and {seen[population.run_id]!r} are the same population "
                f"({population.name}); valid: different populations",
            )
        seen[population.run_id] = ref
    return [population_curve(client, p) for p in chosen]


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def comparison_rows(curves: list[PopulationCurve]) -> tuple[list[str], list[list[str]]]:
    """The table `workbench compare` prints: headers and one row per population."""
    headers = ["population", "trials", "env steps", "wall time s", "best score", "best trial"]
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


def plot_comparison(curves: list[PopulationCurve], path: str | os.PathLike[str]) -> Path:
    """A PNG: the best-score curves against env steps (left) and the final evaluations,
    mean ± std (right)."""
    figure = Figure(figsize=(13, 5), layout="constrained")
    curves_ax, evals_ax = figure.subplots(1, 2, width_ratios=[2, 1])
    colors = [f"C{i % 10}" for i in range(len(curves))]
    for curve, color in zip(curves, colors, strict=True):
        if curve.curve:
            xs = [steps for steps, _ in curve.curve]
            ys = [score for _, score in curve.curve]
            curves_ax.plot(xs[-1], ys[-1], "o", color=color)  # where its best was reached
            if curve.steps_reached > xs[-1]:  # flat on to the most steps it trained
                xs, ys = [*xs, curve.steps_reached], [*ys, ys[-1]]
            curves_ax.step(xs, ys, where="post", color=color, label=curve.name, linewidth=2)
    curves_ax.set_xlabel("env steps the policy was trained on")
    curves_ax.set_ylabel("best score so far")
    curves_ax.set_title("Best score against env steps")
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
