"""Which policy a reference means (a checkpoint, a trial folder, an MLflow trial run),
and evaluations logged back to the trial's MLflow run."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, RunTag

from workbench.analysis.leaderboards import Population
from workbench.analysis.populations import find_population, find_trial, populations
from workbench.errors import ExperimentError
from workbench.experiment.loading import load_experiment
from workbench.names import (
    EVAL_METRIC_PREFIX,
    EVAL_TAG_PREFIX,
    PARENT_RUN_TAG,
    RESOLVED_FILE,
    RESULTS_DIR_TAG,
    RUN_NAME_TAG,
    USER_EVAL_METRIC_PREFIX,
    USER_EVAL_TAG_PREFIX,
)
from workbench.policy.checkpoint import (
    _WHAT_IS_VALID,
    PolicyCheckpoint,
    check_env,
    final_checkpoint,
    find_checkpoint,
    is_checkpoint,
    read_checkpoint,
)
from workbench.policy.evaluate import Evaluation, evaluate_checkpoint, parse_env_config
from workbench.tracking.location import results_dir_of, results_dir_tag, sqlite_file
from workbench.tracking.store import client_for, open_store, resolve_store, tracking_uri_for


@dataclass
class PolicySource:
    """A checkpoint, and the trial's MLflow run when there is one."""

    checkpoint: Path
    label: str  # how to name it to a person
    uri: str | None = None
    run_id: str | None = None
    why_no_run: str = "no trial run found"  # said when there is no run to log to


def locate(
    ref: str | None, *, store: str | None = None, population: str | None = None
) -> PolicySource:
    """RUN|CHECKPOINT: a checkpoint or trial folder, else an MLflow trial run by id or name
    (that member's newest checkpoint), else a population by name (its result); None: the
    result of ``population`` (default: the newest population in the store)."""
    if ref is None:
        store_uri, store_client = open_store(store)
        return result_source(
            store_client, store_uri, find_population(store_client, population, store_uri)
        )
    path = Path(ref).expanduser()
    if path.exists():
        checkpoint = find_checkpoint(path)
        # A trial folder's policy may lie in a donor's folder (handed_checkpoint): the
        # evaluation still belongs to the trial asked for.
        trial_dir = checkpoint.parent if is_checkpoint(path) else path.resolve()
        uri, run_id, why = _run_of_trial_dir(trial_dir, store)
        label = str(checkpoint)
        if checkpoint.parent != trial_dir:
            label += f" (handed to {trial_dir.name} by its last exploit, as the run ended)"
        return PolicySource(checkpoint, label, uri, run_id, why)
    if "/" in ref or ref.startswith("."):
        raise ExperimentError.single(ref, "", f"no such folder; {_WHAT_IS_VALID}")
    uri, client = open_store(store)  # read-only, checked first; eval logs with its own
    try:
        trial = find_trial(client, ref, population, uri)
    except ExperimentError:
        named = [p for p in populations(client) if ref in (p.name, p.run_id, p.experiment)]
        if not named:
            raise
        return result_source(client, uri, find_population(client, ref, uri))
    parent = client.get_run(trial.parent_run_id)
    # Where the population's folder lies now: the store records it relative to itself.
    results_dir = results_dir_of(parent.data.tags.get(RESULTS_DIR_TAG, ""), uri)
    pop_name = parent.data.tags.get(RUN_NAME_TAG, parent.info.run_id)
    label = f"trial {trial.name} (run {trial.run_id}) of population {pop_name}"
    trial_dir = Path(results_dir) / trial.name
    if not results_dir or not Path(results_dir).is_dir():
        raise ExperimentError.single(
            uri,
            "",
            f"{label}: its results folder {results_dir or '(not recorded)'} is gone, and "
            f"its checkpoints with it; {_WHAT_IS_VALID}",
        )
    final = final_checkpoint(trial_dir)
    if final is None:
        raise ExperimentError.single(
            uri,
            "",
            f"{label} saved no checkpoint in {trial_dir} (a trial saves one every "
            "checkpoint.frequency iterations and at its end with checkpoint.at_end); "
            f"{_WHAT_IS_VALID}",
        )
    if final.parent != trial_dir:
        label += f", the checkpoint its last exploit handed it ({final.parent.name})"
    return PolicySource(final.resolve(), label, uri, trial.run_id)


def result_source(client: Any, uri: str, population: Population) -> PolicySource:
    """The population's result: the checkpoint of the policy it hands over."""
    result = population.result
    label = f"the result of population {population.name}"
    if result is None:
        raise ExperimentError.single(
            uri,
            "",
            f"population {population.name} has no result (one is chosen when a population "
            "ends with evaluation.at_end: best); name a trial, e.g. "
            + (population.trials[0].name if population.trials else "PPO_00000")
            + f", for its newest checkpoint; {_WHAT_IS_VALID}",
        )
    checkpoint = Path(population.results_dir) / result.checkpoint
    if not checkpoint.is_dir():
        raise ExperimentError.single(
            uri, "", f"{label}: its checkpoint {checkpoint} is gone; {_WHAT_IS_VALID}"
        )
    run_id = next((t.run_id for t in population.trials if t.trial_id == result.trial_id), None)
    label += f": {result.trial_name}'s policy of iteration {result.iteration}"
    return PolicySource(checkpoint.resolve(), label, uri, run_id)


def _run_of_trial_dir(trial_dir: Path, store: str | None) -> tuple[str | None, str | None, str]:
    """The MLflow store and run of a workbench trial folder, wherever the folder lies now
    ((None, None) if none), and why there is no run when there is none."""
    results_dir = trial_dir.parent
    uri, why = (resolve_store(store), "") if store is not None else _store_of_results(results_dir)
    if uri is None:
        return None, None, why or "no trial run found"
    client = client_for(uri)
    try:
        parent = _population_run(client, uri, results_dir)
        if parent is None:
            return uri, None, "no trial run found"
        children = client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.`{PARENT_RUN_TAG}` = '{parent.info.run_id}' "
            f"and tags.`{RUN_NAME_TAG}` = '{trial_dir.name}'",
            max_results=1,
        )
    except Exception:  # a store that does not answer: evaluate anyway, log nothing
        return uri, None, "no trial run found"
    return uri, children[0].info.run_id if children else None, "no trial run found"


def _population_run(client: Any, uri: str, results_dir: Path) -> Any:
    """The newest population run whose folder is `results_dir` where it lies now: the
    store records a folder beside it by name, another by its absolute path (and stores
    written before, or copied from elsewhere, by the path it had then)."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    here = str(results_dir.resolve())
    for tag in dict.fromkeys([results_dir_tag(results_dir, uri), here]):
        found = client.search_runs(
            experiments,
            filter_string=f"tags.`{RESULTS_DIR_TAG}` = '{tag}'",
            order_by=["start_time DESC"],
            max_results=1,
        )
        if found:
            return found[0]
    moved = client.search_runs(
        experiments,
        filter_string=f"tags.`{RESULTS_DIR_TAG}` LIKE '%/{results_dir.name}'",
        order_by=["start_time DESC"],
    )
    return next(
        (r for r in moved if results_dir_of(r.data.tags.get(RESULTS_DIR_TAG, ""), uri) == here),
        None,
    )


def _store_of_results(results_dir: Path) -> tuple[str | None, str]:
    """The store a workbench results folder logged to, when it is there to be read (the
    default one: beside the folder, where it lies now), and why not when it is not."""
    file = results_dir / RESOLVED_FILE
    if not file.is_file():
        return None, ""
    try:
        experiment = load_experiment(file)
    except ExperimentError:
        return None, ""
    if not experiment.tracking.enabled:
        return None, "its population was not tracked"
    uri = tracking_uri_for(experiment.tracking.uri, results_dir.parent)
    db = sqlite_file(uri)
    if db is not None and not db.is_file():
        # MLflow would create an empty store there.
        return None, (
            f"no MLflow store beside its results folder: {db} is missing (a population "
            "folder copied without the storage folder's store; pass --store)"
        )
    return uri, ""


def log_evaluation(client: Any, run_id: str, result: Evaluation, *, user: bool = False) -> None:
    """eval/* metrics (step: the checkpoint's iteration) and what was evaluated, as tags:
    the run's own evaluation; with `user`, one a user asked for, as user_eval/* beside it."""
    metric_prefix = USER_EVAL_METRIC_PREFIX if user else EVAL_METRIC_PREFIX
    tag_prefix = USER_EVAL_TAG_PREFIX if user else EVAL_TAG_PREFIX
    now = int(time.time() * 1000)
    step = result.training_iteration or 0
    metrics = [
        Metric(f"{metric_prefix}{key}", value, now, step)
        for key, value in result.stats().items()
        if math.isfinite(value)
    ]
    tags = [
        RunTag(f"{tag_prefix}checkpoint", str(result.checkpoint or "")),
        RunTag(f"{tag_prefix}deterministic", str(result.deterministic).lower()),
        RunTag(f"{tag_prefix}seed", str(result.seed)),
        RunTag(f"{tag_prefix}env_config", repr(result.env_config)[:5000]),
    ]
    client.log_batch(run_id, metrics=metrics, tags=tags)
    result.run_id = run_id


def locate_checkpoint(
    ref: str | None,
    *,
    store: str | None = None,
    population: str | None = None,
    env_id: str | None = None,
    trust: bool = False,
) -> tuple[PolicySource, PolicyCheckpoint]:
    """`locate`, the checkpoint read, and refused unless it was trained on `env_id`;
    one the workbench did not write only with `trust` (`read_checkpoint`)."""
    source = locate(ref, store=store, population=population)
    checkpoint = read_checkpoint(source.checkpoint, trust=trust)
    check_env(checkpoint, env_id, ref or source.label)
    return source, checkpoint


@dataclass
class LocatedEvaluation:
    """`workbench eval`: what was evaluated, the evaluation, and where it was logged."""

    source: PolicySource
    checkpoint: PolicyCheckpoint
    result: Evaluation
    logged: str  # where it was logged to MLflow, or why not

    def to_json(self) -> dict[str, Any]:
        result = self.result
        return {
            "checkpoint": str(self.checkpoint.path),
            "training_iteration": self.checkpoint.training_iteration,
            "env_id": result.env_id,
            "env_config": result.env_config,
            "deterministic": result.deterministic,
            "seed": result.seed,
            **result.stats(),
            "returns": result.returns,
            "lengths": result.lengths,
            "run_id": result.run_id,
        }


def evaluate_reference(
    ref: str | None,
    *,
    store: str | None = None,
    population: str | None = None,
    env_id: str | None = None,
    env_config: list[str] | None = None,
    episodes: int = 10,
    deterministic: bool = True,
    seed: int = 0,
    log: bool = True,
    trust: bool = False,
) -> LocatedEvaluation:
    """Evaluates the policy a RUN|CHECKPOINT reference means (see `locate`) and, with
    `log`, logs it to the trial's MLflow run when there is one. `env_config`: the env's
    settings to change, as ``KEY=VALUE`` texts (`parse_env_config`)."""
    source, checkpoint = locate_checkpoint(
        ref, store=store, population=population, env_id=env_id, trust=trust
    )
    overrides = parse_env_config(env_config, ref or source.label)
    result = evaluate_checkpoint(
        checkpoint,
        episodes=episodes,
        deterministic=deterministic,
        seed=seed,
        env_config=overrides,
    )
    logged = "not logged to MLflow (" + ("--no-log)" if not log else f"{source.why_no_run})")
    if source.run_id and source.uri and log:
        log_evaluation(client_for(source.uri), source.run_id, result, user=True)
        logged = (
            f"logged to MLflow run {source.run_id} as {USER_EVAL_METRIC_PREFIX}*, beside its "
            f"own {EVAL_METRIC_PREFIX}* ({source.uri})"
        )
    return LocatedEvaluation(source, checkpoint, result, logged)
