"""What a population's trials went through, read back from MLflow: metric and searched-value
histories, exploits and ancestry, and the views built on them (one trial in detail for
`workbench show`, a population's lineage for `workbench lineage`)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.analysis.leaderboards import (
    Population,
    TrialRun,
    finite_or_none,
    hp_value,
    metric_value,
)
from workbench.analysis.lineage import (
    Schedule,
    Segment,
    ancestry,
    parse_jsonl,
    render_tree,
    stitched_schedule,
)
from workbench.analysis.populations import find_population, find_trial_and_population
from workbench.lineage_record import LineageRecord
from workbench.names import LINEAGE_FILE, STEP_METRIC
from workbench.tracking.location import artifact_names, download_artifact


def metric_history(client: Any, run_id: str, key: str) -> list[tuple[int, float, int]]:
    """(step, value, timestamp ms), ordered by step."""
    return sorted((m.step, m.value, m.timestamp) for m in client.get_metric_history(run_id, key))


def hyperparameter_history(client: Any, trial: TrialRun) -> dict[str, list[tuple[int, Any]]]:
    """hp -> [(iteration, value)]: the value each Tune iteration was trained with.

    After an exploit a trial repeats iterations (it continues from its donor's);
    the later values win, which is the history its final policy went through.
    """
    iteration_at = {s: int(v) for s, v, _ in metric_history(client, trial.run_id, STEP_METRIC)}
    out: dict[str, list[tuple[int, Any]]] = {}
    for key in sorted(k for k in trial.metrics if k.startswith("hp/")):
        by_iteration: dict[int, float] = {}
        for step, value, _ in metric_history(client, trial.run_id, key):
            by_iteration[iteration_at.get(step, step)] = hp_value(key[3:], value)
        out[key[3:]] = sorted(by_iteration.items())
    for key, text in trial.tags.items():
        if key.startswith("hp/") and key[3:] not in out:
            out[key[3:]] = [(1, text)]
    return out


def step_schedule(client: Any, trial: TrialRun) -> list[tuple[int, int, dict[str, float]]]:
    """(step, iteration, values) at every step where a searched value changed."""
    iteration_at = {s: int(v) for s, v, _ in metric_history(client, trial.run_id, STEP_METRIC)}
    keys = sorted(k for k in trial.metrics if k.startswith("hp/"))
    values: dict[int, dict[str, float]] = {}
    for key in keys:
        for step, value, _ in metric_history(client, trial.run_id, key):
            values.setdefault(step, {})[key[3:]] = hp_value(key[3:], value)
    out: list[tuple[int, int, dict[str, float]]] = []
    last: dict[str, float] | None = None
    for step in sorted(values):
        if values[step] != last:
            out.append((step, iteration_at.get(step, step), values[step]))
            last = values[step]
    return out


def lineage_records(client: Any, population: Population) -> list[LineageRecord]:
    """The population's exploits, from the parent run's lineage.jsonl artifact."""
    if LINEAGE_FILE not in artifact_names(client, population.run_id):
        return []
    with tempfile.TemporaryDirectory() as tmp:
        path = download_artifact(client, population.run_id, LINEAGE_FILE, tmp)
        return parse_jsonl(Path(path).read_text())


def trial_ancestry(
    client: Any, population: Population, records: list[LineageRecord], trial: TrialRun
) -> tuple[list[Any], dict[str, list[tuple[int, Any]]]]:
    """The segments the trial's final policy went through, and its stitched schedule."""
    segments = ancestry(records, trial.trial_id, trial.iteration, name=trial.name)
    by_id = {t.trial_id: t for t in population.trials}
    histories = {
        seg.trial_id: hyperparameter_history(client, by_id[seg.trial_id])
        for seg in segments
        if seg.trial_id in by_id
    }
    return segments, stitched_schedule(segments, histories)


def metric_histories(client: Any, trial: TrialRun, prefix: str) -> dict[int, dict[str, float]]:
    """step -> {name without the prefix: value} for every metric of the trial's run under
    ``prefix`` (for example ``workbench/``: the per-iteration time split)."""
    out: dict[int, dict[str, float]] = {}
    for key in sorted(k for k in trial.metrics if k.startswith(prefix)):
        for step, value, _ in metric_history(client, trial.run_id, key):
            out.setdefault(step, {})[key[len(prefix) :]] = value
    return dict(sorted(out.items()))


@dataclass
class TrialDetail:
    """One trial in detail (`workbench show`): its run, its population, where its searched
    values changed and the ancestry its final policy went through."""

    trial: TrialRun
    population: Population
    schedule: list[tuple[int, int, dict[str, float]]]  # (step, iteration, values)
    segments: list[Segment]
    stitched: Schedule

    def to_json(self) -> dict[str, Any]:
        trial = self.trial
        return {
            "run_id": trial.run_id,
            "name": trial.name,
            "trial_id": trial.trial_id,
            "status": trial.status,
            "population": self.population.name,
            "params": trial.params,
            "metrics": {k: metric_value(k, v) for k, v in trial.metrics.items()},
            "best_return": finite_or_none(trial.best_return),
            "error": trial.error,
            "schedule": [{"step": s, "iteration": i, "values": v} for s, i, v in self.schedule],
            "ancestry": [
                {
                    "trial_id": seg.trial_id,
                    "name": seg.trial_name,
                    "first_iteration": seg.first_iteration,
                    "last_iteration": seg.last_iteration,
                }
                for seg in self.segments
            ],
            "stitched_schedule": self.stitched,
        }


def trial_detail(client: Any, ref: str, population_ref: str | None, uri: str) -> TrialDetail:
    """A trial by run id, or by name / trial id within a population, in detail."""
    trial, population = find_trial_and_population(client, ref, population_ref, uri)
    records = lineage_records(client, population)
    segments, stitched = trial_ancestry(client, population, records, trial)
    return TrialDetail(trial, population, step_schedule(client, trial), segments, stitched)


# The schedulers that clone one member's weights into another (the lineage's exploits).
CLONING_SCHEDULERS = ("pbt", "pb2")


@dataclass
class PopulationLineage:
    """Who cloned whom in a population (`workbench lineage`)."""

    population: Population
    records: list[LineageRecord]

    @property
    def best_trial_id(self) -> str | None:
        best = self.population.best()
        return best.trial_id if best else None

    @property
    def trials(self) -> dict[str, tuple[str, int]]:
        """trial id -> (name, last iteration): the tree's nodes."""
        return {t.trial_id: (t.name, t.iteration) for t in self.population.trials}

    @property
    def best_iteration(self) -> int | None:
        """The iteration of the population's result (None: the best trial's final one)."""
        result = self.population.result
        return result.iteration if result is not None and result.iteration > 0 else None

    def tree(self) -> str:
        """The tree as text, the ancestry of the population's result marked."""
        scheduler = self.population.scheduler
        # A scheduler that never clones a member has no exploits to wait for.
        never = bool(scheduler) and scheduler not in CLONING_SCHEDULERS
        return render_tree(
            self.trials,
            self.records,
            self.best_trial_id,
            self.best_iteration,
            no_exploits=(
                f"no exploits: {scheduler} does not clone members, PBT and PB2 do"
                if never
                else "no exploits yet"
            ),
        )

    def to_json(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.records]


def population_lineage(client: Any, ref: str | None, uri: str) -> PopulationLineage:
    """The exploits of a population by parent run id, name or MLflow experiment."""
    population = find_population(client, ref, uri)
    return PopulationLineage(population, lineage_records(client, population))
