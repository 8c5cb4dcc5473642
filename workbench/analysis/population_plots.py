"""A population's PNGs rendered from what the store holds: learning curves, the lineage
tree and the best ancestry's schedule."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from workbench.analysis.histories import lineage_records, metric_history, trial_ancestry
from workbench.analysis.leaderboards import Population
from workbench.analysis.lineage import read_jsonl
from workbench.analysis.plots import learning_curves, lineage_tree, schedules
from workbench.analysis.populations import _population, trial_runs
from workbench.names import LINEAGE_FILE, PARENT, PLOTS_DIR, RETURN_METRIC, STEPS_METRIC


def render_population_pngs(client: Any, runs: dict[str, str], results_dir: Path) -> list[Path]:
    """Learning curves, lineage tree and the best ancestry's schedule, as PNG files."""
    parent = client.get_run(runs[PARENT])
    exp_name = client.get_experiment(parent.info.experiment_id).name
    population = _population(client, parent, {parent.info.experiment_id: exp_name})
    population.trials = trial_runs(client, population)
    return population_pngs(client, population, results_dir / PLOTS_DIR)


def population_pngs(client: Any, population: Population, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    best = population.best()
    curves = {}
    for trial in population.trials:
        steps = {s: v for s, v, _ in metric_history(client, trial.run_id, STEPS_METRIC)}
        curves[trial.name] = [
            (steps.get(s, float(s)), v)
            for s, v, _ in metric_history(client, trial.run_id, RETURN_METRIC)
            if not math.isnan(v)
        ]
    out = [
        learning_curves(
            curves,
            folder / "learning_curves.png",
            title=f"{population.name}: episode return",
            highlight=best.name if best else None,
        )
    ]
    local = Path(population.results_dir) / LINEAGE_FILE if population.results_dir else None
    records = (
        read_jsonl(local)
        if local is not None and local.exists()
        else lineage_records(client, population)
    )
    trials = {t.trial_id: (t.name, t.iteration) for t in population.trials}
    out.append(
        lineage_tree(
            trials,
            records,
            folder / "lineage.png",
            best=best.trial_id if best else None,
            title=f"{population.name}: who cloned whom",
        )
    )
    if best is not None:
        segments, schedule = trial_ancestry(client, population, records, best)
        if schedule:
            out.append(
                schedules(
                    schedule,
                    folder / "best_schedule.png",
                    title=f"{population.name}: hyperparameters along {best.name}'s ancestry",
                    exploits=[seg.first_iteration - 1 for seg in segments[1:]],
                    last_iteration=best.iteration,
                )
            )
    return out
