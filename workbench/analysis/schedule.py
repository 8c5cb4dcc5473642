"""Schedule replay: the winner's hyperparameter schedule as an experiment of its own.

PBT's product is a schedule, not one configuration: the final policy of its best trial
was trained in pieces of several trials (its ancestry), each with its own values.
`export_schedule` reads that stitched schedule from MLflow (`histories.trial_ancestry`)
and writes a new experiment file whose scheduler is ``{type: replay, schedule: [...]}``:
one trial trained from scratch that uses, at every Tune iteration, the values the
winner's ancestry trained that iteration with. `ReplayScheduler` runs it.

Why not Tune's ``PopulationBasedTrainingReplay``: it replays one trial's own
``pbt_policy_*.txt`` (whole RLlib configs, chained by Tune's experiment tags), which
knows nothing of the workbench's lineage (ancestries through several donors, iterations
a donor trained again later); the experiment file would depend on a text file in the
results folder, and its schedule could not be read or edited. The workbench's schedule
is plain data in the experiment file, validated like the rest of it, and the scheduler
applies it the way PBT applies an exploit: set the new config, save a checkpoint,
restore the trial's own checkpoint into a new actor (RLlib's Algorithm cannot change
its config in place; `workbench.trial.callbacks` resets the optimizer's lr after the restore)."""

from __future__ import annotations

import json
import math
import numbers
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from workbench.analysis.histories import lineage_records, trial_ancestry
from workbench.analysis.lineage import Schedule, Segment
from workbench.analysis.populations import find_population, find_trial
from workbench.errors import ExperimentError
from workbench.experiment.resolve import load_and_resolve, saved_defaults
from workbench.experiment.schema import Experiment
from workbench.experiment.search_space import ParamSpec, parse_search_space
from workbench.experiment.yaml_input import read_yaml
from workbench.names import FINAL_PARAM_PREFIX, RESOLVED_FILE
from workbench.tracking.location import artifact_names, download_artifact


def typed_value(spec: ParamSpec | None, value: Any) -> Any:
    """A value read back from MLflow (metrics are floats, categories are text) in the
    type the search space gives it: randint -> int, choice/grid -> the choice itself."""
    if spec is None:
        return value
    if spec.categorical:
        choices = list(spec.choice if spec.choice is not None else spec.grid or [])
        for choice in choices:
            if _equal(choice, value):
                return choice
        return value
    if spec.kind == "randint" and isinstance(value, numbers.Real):
        return round(float(value))
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return value


def _equal(choice: Any, value: Any) -> bool:
    if isinstance(choice, numbers.Real) and isinstance(value, numbers.Real):
        return math.isclose(float(choice), float(value), rel_tol=1e-12, abs_tol=0.0)
    if isinstance(value, str) and not isinstance(choice, str):
        # Non-numeric categories are MLflow tags: the choice's JSON text.
        return json.dumps(choice, default=str) == value
    return bool(choice == value)


def value_at(points: list[tuple[int, Any]], iteration: int) -> Any:
    """The value of a step function [(first iteration, value), ...] at `iteration`."""
    current = points[0][1]
    for first, value in points:
        if first > iteration:
            break
        current = value
    return current


def replay_steps(schedule: Schedule, specs: dict[str, ParamSpec]) -> list[dict[str, Any]]:
    """``[{iteration, values}]``: one step at iteration 1 and at every change point of
    any hyperparameter, each with the full set of values from that iteration on."""
    if not schedule:
        return []
    changes = sorted({iteration for points in schedule.values() for iteration, _ in points})
    first = min(changes)
    steps = []
    for iteration in changes:
        values = {
            name: typed_value(specs.get(name), value_at(points, iteration))
            for name, points in sorted(schedule.items())
        }
        # The schedule starts at iteration 1 even if the history started later.
        steps.append({"iteration": 1 if iteration == first else iteration, "values": values})
    return steps


def segment_schedule(
    segments: list[Segment], initial: dict[str, Any], names: list[str]
) -> Schedule:
    """The schedule from the ancestry alone: PBT changes values only at exploits, so a
    segment trains with its first trial's initial values, or those its exploit set.
    Used for categories, whose history MLflow keeps only as the initial tag."""
    out: Schedule = {}
    for name in names:
        points: list[tuple[int, Any]] = []
        for segment in segments:
            if segment.via is not None and name in segment.via.new:
                value = segment.via.new[name]
            elif segment.via is None and name in initial:
                value = initial[name]
            else:
                continue
            if not points or points[-1][1] != value:
                points.append((segment.first_iteration, value))
        if points:
            out[name] = points
    return out


def replay_experiment(
    source: dict[str, Any], steps: list[dict[str, Any]], *, name: str, iterations: int
) -> dict[str, Any]:
    """The experiment file that replays `steps`: the source experiment (as saved in its
    results folder) with one trial, no search, the replay scheduler, `iterations`."""
    data = dict(source)
    data["name"] = name
    data.pop("search_space", None)
    data.pop("search", None)
    data.pop("results_dir", None)
    data.pop("num_samples", None)
    data.pop("max_concurrent", None)
    data["population"] = 1
    data["scheduler"] = {"type": "replay", "schedule": steps}
    stop = {"iterations": iterations}
    wall = (source.get("stop") or {}).get("wall_time_s")
    if wall is not None:
        stop["wall_time_s"] = wall
    data["stop"] = stop
    tracking = dict(data.get("tracking") or {})
    tracking.pop("experiment", None)  # its own MLflow experiment, named after it
    data["tracking"] = tracking
    return {k: v for k, v in data.items() if v is not None}


@dataclass
class ExportedSchedule:
    data: dict[str, Any]  # the experiment file's content
    header: str
    population: str
    trial: str
    segments: list[Segment]
    stitched: Schedule
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        return self.header + yaml.safe_dump(self.data, sort_keys=False)

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The replay scheduler's steps: {"iteration": i, "values": {...}}."""
        steps: list[dict[str, Any]] = self.data["scheduler"]["schedule"]
        return steps

    @property
    def iterations(self) -> int:
        """The replay's length (its stop.iterations)."""
        return int(self.data["stop"]["iterations"])


@dataclass
class WrittenSchedule:
    """An exported schedule written as an experiment file that validates."""

    exported: ExportedSchedule
    path: Path
    results_dir: Path  # where `workbench run path` will write its results


def write_schedule(
    client: Any, uri: str, output: Path, population_ref: str | None, trial_ref: str | None = None
) -> WrittenSchedule:
    """`export_schedule` written to `output` (a new file), and checked the way `workbench
    run` will read it; a file that does not validate is removed again."""
    exported = export_schedule(client, uri, population_ref, trial_ref)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(exported.text())
    try:
        resolved = load_and_resolve(output, check_results=False)
    except ExperimentError:
        output.unlink()
        raise
    return WrittenSchedule(exported, output, resolved.results_dir)


def _source_experiment(client: Any, population: Any, uri: str) -> tuple[dict[str, Any], str]:
    """The population's saved experiment file: in its results folder, else the copy the
    tracker logged to the parent run."""
    local = Path(population.results_dir) / RESOLVED_FILE if population.results_dir else None
    if local is not None and local.is_file():
        return saved_defaults(read_yaml(local)), str(local)
    if RESOLVED_FILE in artifact_names(client, population.run_id):
        with tempfile.TemporaryDirectory() as tmp:
            path = download_artifact(client, population.run_id, RESOLVED_FILE, tmp)
            where = f"{uri} run {population.run_id}: {RESOLVED_FILE}"
            return saved_defaults(read_yaml(Path(path))), where
    raise ExperimentError.single(
        uri,
        "",
        f"population {population.name!r} left no experiment file (neither "
        f"{local or 'a results folder'} nor the artifact {RESOLVED_FILE} of run "
        f"{population.run_id}); valid: a population written by `workbench run`",
    )


def export_schedule(
    client: Any, uri: str, population_ref: str | None, trial_ref: str | None = None
) -> ExportedSchedule:
    """The replay experiment of a PBT/PB2 population's trial (default: its best)."""
    population = find_population(client, population_ref, uri)
    raw, where = _source_experiment(client, population, uri)
    try:
        experiment = Experiment.model_validate(raw)
    except Exception as err:
        raise ExperimentError.single(where, "", f"cannot be read back: {err}") from None
    kind = experiment.scheduler.type
    if kind not in ("pbt", "pb2"):
        raise ExperimentError.single(
            where,
            "scheduler.type",
            f"{kind!r}: population {population.name!r} was not population-based training, "
            "so its trials kept the hyperparameters they started with and there is no "
            "schedule to replay; valid: a population of a 'pbt' or 'pb2' experiment (a "
            f"trial's fixed values are in `workbench show`)",
        )
    if trial_ref is None:
        trial = population.best()
        if trial is None:
            raise ExperimentError.single(
                uri, "", f"population {population.name!r} has no trial with a return yet"
            )
    else:
        trial = find_trial(client, trial_ref, population.run_id, uri)
        if trial.run_id not in {t.run_id for t in population.trials}:
            raise ExperimentError.single(
                uri,
                "--trial",
                f"{trial_ref!r} is a trial of another population; valid: one of "
                + ", ".join(t.name for t in population.trials),
            )
    records = lineage_records(client, population)
    segments, stitched = trial_ancestry(client, population, records, trial)
    specs = parse_search_space((raw.get("search_space") or {}).get("params") or {})
    # Categories are tags in MLflow, without a history: they come from the lineage.
    categories = [name for name in specs if f"hp/{name}" in trial.tags or name not in stitched]
    initial = {
        name: _param_value(specs.get(name), text)
        for name, text in _initial_params(client, population, segments).items()
    }
    schedule = {k: v for k, v in stitched.items() if k not in categories}
    schedule.update(segment_schedule(segments, initial, categories))
    steps = replay_steps(schedule, specs)
    if not steps:
        raise ExperimentError.single(
            uri,
            "",
            f"trial {trial.name} of population {population.name!r} logged no hyperparameter "
            "history (hp/* metrics); valid: a trial of a population tracked by the workbench",
        )
    iterations = max(trial.iteration, segments[-1].last_iteration if segments else 0)
    name = f"{population.name}-replay-{trial.name}"
    path = " -> ".join(f"{s.trial_name} {s.first_iteration}-{s.last_iteration}" for s in segments)
    header = (
        f"# Replays the hyperparameter schedule of trial {trial.name} (MLflow run "
        f"{trial.run_id})\n# of population {population.name} ({uri}): the values its final "
        f"policy was trained with,\n# along its ancestry {path}, keyed by Tune iteration, "
        f"from scratch as one trial.\n# Written by `workbench export-schedule`; run it with "
        f"`workbench run`.\n"
    )
    data = replay_experiment(raw, steps, name=name, iterations=iterations)
    if population.results_dir:
        # Beside the population where it lies now (a copied or moved storage folder's,
        # not the one it was trained in); the file may be run from anywhere.
        data["storage"] = str(Path(population.results_dir).parent)
    return ExportedSchedule(data, header, population.name, trial.name, segments, schedule)


def _initial_params(client: Any, population: Any, segments: list[Segment]) -> dict[str, str]:
    """The first segment's trial's initial hyperparameters (its MLflow params)."""
    if not segments:
        return {}
    for trial in population.trials:
        if trial.trial_id == segments[0].trial_id:
            # Not its trial id, nor the final/* values it ended with.
            return {
                k: v
                for k, v in trial.params.items()
                if k != "trial_id" and not k.startswith(FINAL_PARAM_PREFIX)
            }
    return {}


def _param_value(spec: ParamSpec | None, text: str) -> Any:
    """An MLflow param (text) back to its value."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        value = text
    return typed_value(spec, value)
