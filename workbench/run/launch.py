"""Launch: a resolved experiment becomes a Tune run of RLlib trials, and a summary.

Everything that can be wrong with the input was checked by `workbench.experiment`
before this module starts Ray."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ray import tune
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.tune.utils import flatten_dict

from workbench.analysis.population_plots import render_population_pngs
from workbench.errors import ExperimentError, Problem
from workbench.experiment.resolve import ResolvedExperiment, check_results_dir, describe
from workbench.experiment.schema import EvaluationSection, TrackingSection
from workbench.experiment.search_checks import grid_points
from workbench.names import (
    ARTIFACTS_DIR,
    EVAL_RETURN_METRIC,
    PARENT,
    RESOLVED_FILE,
    SCORE_METRIC,
    STORE_FILE,
    trial_name,
)
from workbench.plan.preflight import preflight
from workbench.policy.checkpoint import read_checkpoint
from workbench.policy.locate import log_evaluation
from workbench.policy.mlflow_model import log_checkpoint_model
from workbench.run.budget import clear_ran_out, record_ran_out, save_stop_rules
from workbench.run.console import LibraryLogs
from workbench.run.folder_lock import FolderLock
from workbench.run.population_result import choose as choose_result
from workbench.run.progress import ProgressTable, StopGoal
from workbench.run.ray_session import (
    check_dashboard,
    cleanup_leftover_ray,
    record_ray_session,
    start_ray,
)
from workbench.run.results_folder import population_statuses
from workbench.run.schedulers import scheduler, search_algorithm
from workbench.run.signals import fit
from workbench.run.stopping import RulesStopper, StopperWatch
from workbench.run.summary import RunSummary, stop_reason, summarize
from workbench.tracking.callback import MlflowTracker, TrackingTarget
from workbench.tracking.location import results_dir_tag, sqlite_file
from workbench.tracking.population_summary import (
    PopulationSummary,
    log_population_result,
    log_population_summary,
)
from workbench.tracking.run_context import source_tags
from workbench.tracking.store import client_for, tracking_uri_for
from workbench.trial.config import Configure, build_config, param_space
from workbench.trial.score import score_settings
from workbench.trial.trainable import seeded_trainable
from workbench.tune_ext.checkpoints import CheckpointGuard
from workbench.tune_ext.optuna_study import close_study, record_result
from workbench.tune_ext.ray_private import (
    forget_in_flight_decisions,
    raylet_messages_logged,
    reopen_trials,
    restored_tuner_uses,
)
from workbench.tune_ext.result_files import result_loggers
from workbench.tune_ext.scheduler_state import SchedulerState
from workbench.tune_ext.state_sync import sync_without_temp_files


def prepare_results_dir(resolved: ResolvedExperiment) -> None:
    """Creates the experiment folder and saves the resolved experiment in it.

    The saved file is a complete experiment file (search space inline), so `workbench
    resume` rebuilds the same population from it alone. It names no folder: the
    population is the folder the file lies in (`load_saved`), so that a copied or moved
    folder is resumed where it lies.
    """
    resolved.results_dir.mkdir(parents=True, exist_ok=True)
    data = describe(resolved)
    data.pop("results_dir", None)
    data.pop("storage", None)
    data["search_space"] = {"params": data["search_space"]["params"]}
    header = (
        f"# The experiment as resolved for this results folder (from {resolved.file}).\n"
        "# `workbench resume` reads it; edit only if you know why. No storage: the\n"
        "# population is the folder this file lies in, wherever it is now.\n"
    )
    (resolved.results_dir / RESOLVED_FILE).write_text(
        header + yaml.safe_dump(data, sort_keys=False)
    )


def tracking_target(resolved: ResolvedExperiment) -> TrackingTarget:
    """Where this population's MLflow runs go (see `workbench.tracking`)."""

    exp = resolved.experiment
    storage_root = resolved.results_dir.parent
    uri = tracking_uri_for(exp.tracking.uri, storage_root)
    described = flatten_dict(describe(resolved), delimiter=".")
    # The folder's name in a store beside it (the two move together), else its path.
    folder_tag = results_dir_tag(resolved.results_dir, uri)
    return TrackingTarget(
        uri=uri,
        experiment=exp.tracking.experiment or exp.name,
        population=exp.name,
        key=folder_tag,
        results_dir=resolved.results_dir,
        results_dir_tag=folder_tag,
        # Populations tracked before the key was relative, resumed where they ran.
        legacy_keys=tuple({str(resolved.results_dir)} - {folder_tag}),
        # A local store keeps its artifacts next to it; a server decides for itself.
        artifact_root=storage_root / ARTIFACTS_DIR if uri.startswith("sqlite:") else None,
        metrics=exp.tracking.metrics,
        flush_timeout_s=exp.tracking.flush_timeout_s,
        parent_params={
            k: v if isinstance(v, str) else yaml.safe_dump(v, default_flow_style=True).strip()
            for k, v in described.items()
            if v is not None
        },
        hyperparameters={key: name for name, key in resolved.tune_keys.items()},
        render_plots=render_population_pngs,
        run_tags=source_tags(resolved.file),
    )


def missing_store_note(tracking: TrackingSection, results_dir: Path) -> str | None:
    """What a resume says of a population folder copied without the store beside it
    (None when the store is there, elsewhere, or nothing was tracked yet)."""
    if not tracking.enabled:
        return None
    db = sqlite_file(tracking_uri_for(tracking.uri, results_dir.parent))
    if db is None or db.exists() or db.parent != results_dir.parent:
        return None
    if not any(results_dir.glob("*/result.json")):
        return None
    return (
        f"No MLflow store beside {results_dir} ({db} is missing): this "
        "population's runs so far are in the store of the storage folder it was copied "
        f"from, and this resume starts new runs in {db}. To go on in the same runs, stop "
        f"(Ctrl-C) and copy that folder's {STORE_FILE} and {ARTIFACTS_DIR}/ beside it."
    )


@dataclass
class _Session:
    """Everything Tune needs for a population: built the same way for run and resume."""

    trainable: type
    param_space: dict[str, Any]
    tune_config: Any
    run_config: Any
    table: ProgressTable
    tracker: MlflowTracker | None


def _session(
    resolved: ResolvedExperiment,
    config: AlgorithmConfig,
    *,
    progress_interval_s: float,
    all_at_once: bool = False,
) -> _Session:
    exp = resolved.experiment
    stopper = RulesStopper(
        exp.stop.tune_stop(),
        all_at_return=exp.stop.all_at_return
        if exp.stop.all_at_return is not None
        else exp.scheduler.type in ("pbt", "pb2"),
        key=str(resolved.results_dir),
        env_step_budget=exp.stop.population_env_steps,
        wall_budget_s=exp.stop.wall_time_s,
    )
    table = ProgressTable(
        {key: name for name, key in resolved.tune_keys.items()},
        interval_s=progress_interval_s,
        title=f"{exp.name} ({exp.algorithm}, {exp.scheduler.type.upper()})",
        goal=StopGoal(
            # The bar follows the score toward a return target its evaluation confirms.
            rules={
                SCORE_METRIC if k == EVAL_RETURN_METRIC else k: v for k, v in stopper.rules.items()
            },
            wall_time_s=exp.stop.wall_time_s,
            population=exp.population,
            all_at_return=stopper.all_at_return,
            env_step_budget=exp.stop.population_env_steps,
        ),
    )
    table.stopper = stopper
    trial_scheduler = scheduler(
        exp.scheduler, resolved.tune_space, seed=exp.seed, keys=resolved.tune_keys
    )
    if hasattr(trial_scheduler, "all_run_at_once"):
        trial_scheduler.all_run_at_once = all_at_once  # no fair-share pauses (NoIdlePause)
    add_listener = getattr(trial_scheduler, "add_lineage_listener", None)
    if add_listener is not None:
        add_listener(table.on_exploit)  # one line per exploit, in the user's names
    # The order matters: Tune restores callback state by position.
    callbacks: list[Any] = [
        table,
        CheckpointGuard(exp.checkpoint.keep, trial_scheduler),
        SchedulerState(trial_scheduler),
    ]
    tracker: MlflowTracker | None = None
    if exp.tracking.enabled:
        tracker = MlflowTracker(tracking_target(resolved))
        callbacks.append(tracker)
        if add_listener is not None:
            add_listener(tracker.on_exploit)
    # After the stateful ones (whose saved state Tune hands back by position): result.json
    # and progress.csv written whole, in place of Tune's loggers (workbench.tune_ext.result_files).
    callbacks += result_loggers()
    callbacks.append(StopperWatch(stopper))  # stateless: after the ones restored by position
    tune_config = tune.TuneConfig(
        scheduler=trial_scheduler,
        search_alg=search_algorithm(exp, resolved.results_dir, resolved.tune_keys),
        num_samples=exp.population,
        # stop.wall_time_s is the stopper's (RulesStopper), counted across sessions.
        max_concurrent_trials=exp.max_concurrent,
        # Exploits and pauses restore into a kept actor, rebuilt by reset_config.
        reuse_actors=exp.reuse_actors,
        trial_name_creator=trial_name,
        trial_dirname_creator=trial_name,
    )
    run_config = tune.RunConfig(
        name=exp.name,
        storage_path=str(resolved.results_dir.parent),
        stop=stopper,
        checkpoint_config=tune.CheckpointConfig(
            # Pruned by CheckpointGuard instead: Tune's own pruning deletes PBT donors'
            # checkpoints before their clones restore them.
            num_to_keep=None,
            checkpoint_frequency=exp.checkpoint.frequency,
            checkpoint_at_end=exp.checkpoint.at_end,
        ),
        failure_config=tune.FailureConfig(max_failures=exp.failure.max_failures),
        callbacks=callbacks,
        verbose=0,
    )
    if tracker is not None:
        tracker.stopper = run_config.stop
    return _Session(
        trainable=seeded_trainable(
            config.algo_class, score_settings(exp), reported=frozenset(resolved.tune_keys.values())
        ),
        param_space=param_space(resolved.tune_space, config),
        tune_config=tune_config,
        run_config=run_config,
        table=table,
        tracker=tracker,
    )


def _tune_environment() -> None:
    # RLlib reports the episode return only once an episode has ended: without this,
    # Tune's strict metric check fails the whole run on the first iteration.
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    # The workbench snapshots the experiment after trial checkpoints on purpose, up to one
    # every two seconds (ResumableScheduler, tune_ext.snapshot_pace); Tune would warn about them.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # Ctrl-C is the workbench's to handle (workbench.run.signals); Tune keeps SIGUSR1.
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    # The console is the workbench's (workbench.run.progress): Tune's new output engine
    # prints its configuration box and TensorBoard hint whatever `verbose` says; the
    # legacy one prints nothing at verbose=0.
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    sync_without_temp_files()


def _finish(
    resolved: ResolvedExperiment,
    session: _Session,
    results: Any,
    elapsed_s: float,
    signalled: bool = False,
) -> RunSummary:
    summary = summarize(
        resolved.experiment.name, resolved.results_dir, session.table, errors=len(results.errors)
    )
    stopper = session.run_config.stop
    budget_spent = stopper.wall_budget_ended()  # counted across sessions
    by_rule = stopper.return_reached() or stopper.budget_spent()
    # What met the return target (the trial's score and the evaluation that confirmed
    # it); that trial, which solved the task, is the one to name and evaluate.
    summary.confirmation = stopper.reached
    if stopper.reached_by in session.table.records:
        summary.best = session.table.records[stopper.reached_by]
        summary.reached_by = summary.best.name
    # Unfinished trials, or (a searcher creates trials one by one: Optuna with
    # max_concurrent) a signal before the search had created them all.
    planned = resolved.experiment.population * grid_points(resolved.search_space)
    summary.interrupted = not (budget_spent or by_rule) and (
        any(t.status not in ("TERMINATED", "ERROR") for t in summary.trials)
        or (signalled and len(summary.trials) < planned)
    )
    summary.wall_time_s = elapsed_s
    if stopper.ran_out is not None and stopper.budget_stopped:
        # For a resume that extends the budget.
        record_ran_out(resolved.results_dir, resolved.experiment.stop, stopper)
    if stopper.wall_spent_before_s > 0:  # resumed
        summary.wall_time_all_s = stopper.wall_time_spent()
    by_return = stopper.return_reached()
    reached = session.table.records.get(stopper.reached_by) if by_return else None
    summary.stop_reason = stop_reason(
        summary.trials,
        session.table.goal,
        interrupted=summary.interrupted,
        budget_spent=budget_spent,
        reached_by=(reached.name if reached else stopper.reached_by) if by_return else None,
        early_stopper="ASHA" if resolved.experiment.scheduler.type == "asha" else None,
        env_steps_spent=stopper.env_steps_spent if stopper.budget_spent() else None,
    )
    if session.tracker is not None:
        summary.tracking_uri = session.tracker.target.uri
        summary.mlflow_experiment = session.tracker.target.experiment
    if not summary.interrupted:
        exp = resolved.experiment
        evaluate_best(exp.evaluation, exp.seed, resolved.results_dir, session, summary)
        if exp.search.type == "optuna":  # its study says it has ended
            with contextlib.suppress(Exception):  # the study is a view: never fail the run
                close_study(resolved.results_dir, exp.name)
                if summary.result is not None:
                    record_result(
                        resolved.results_dir, resolved.experiment.name, summary.result.to_json()
                    )
    if session.tracker is not None:
        log_summary_metrics(session, summary, elapsed_s)
    return summary


def log_summary_metrics(session: _Session, summary: RunSummary, elapsed_s: float) -> None:
    """The population's population/* metrics on its parent run (so populations sort in
    MLflow). Never fails the population: a store that does not answer is a summary line."""
    assert session.tracker is not None
    run_id = session.tracker.get_state()["runs"].get(PARENT)
    if run_id is None:
        return
    evaluated = summary.evaluation.stats()["return_mean"] if summary.evaluation else math.nan
    try:
        log_population_summary(
            client_for(session.tracker.target.uri),
            run_id,
            PopulationSummary(
                trials=len(summary.trials),
                errors=summary.errors,
                env_steps=sum(t.env_steps for t in summary.trials),
                wall_time_s=elapsed_s,
                # Any trial's best score (the trial named best may be the one that
                # confirmed the return target first, not the highest score).
                best_return=max(
                    (t.best_return for t in summary.trials if not math.isnan(t.best_return)),
                    default=math.nan,
                ),
                best_eval_return=evaluated,
            ),
        )
    except Exception as err:  # the figures are printed
        note = (
            "The population's summary metrics could not be logged to MLflow: "
            f"{type(err).__name__}: {err}"
        )
        old = summary.evaluation_note
        summary.evaluation_note = f"{old}\n{note}" if old else note


def evaluate_best(
    section: EvaluationSection,
    seed: int,
    results_dir: Path,
    session: _Session,
    summary: RunSummary,
) -> None:
    """Chooses the population's result (`workbench.run.population_result`) by the
    experiment's evaluation ``section``, names its member as the best trial, logs the
    confirming evaluation as eval/* to that member's MLflow run, its policy as an MLflow
    model there, and the result on the population's run. Never fails the population: a
    problem becomes a summary line."""

    if section.at_end == "none":
        return
    trials = {trial_id: record.name for trial_id, record in session.table.records.items()}
    try:
        chosen = choose_result(
            results_dir,
            trials,
            episodes=section.episodes,
            short_episodes=section.short_episodes,
            confirm=section.confirm,
            seed=seed,
        )
    except Exception as err:  # the population's results stand without it
        summary.evaluation_note = f"No result chosen: {type(err).__name__}: {err}"
        return
    if chosen is None:
        summary.evaluation_note = (
            "No result chosen: no member left a policy to evaluate (a member keeps its best "
            "evaluated policies with evaluation.every, and saves one when it ends with "
            "checkpoint.at_end)"
        )
        return
    result, evaluation = chosen
    summary.result = result
    summary.evaluation = evaluation
    summary.best = session.table.records.get(result.trial_id, summary.best)
    if session.tracker is None:
        return
    runs = session.tracker.get_state()["runs"]
    client = client_for(session.tracker.target.uri)
    parent = runs.get(PARENT)
    try:
        if parent is not None:
            log_population_result(client, parent, result)
        run_id = runs.get(result.trial_id)
        if run_id is None:
            return
        log_evaluation(client, run_id, evaluation)
    except Exception as err:  # a store that does not answer: the figures are printed
        summary.evaluation_note = (
            f"The result could not be logged to MLflow: {type(err).__name__}: {err}"
        )
        return
    try:  # the chosen policy as an MLflow model (registry, serving)
        checkpoint = read_checkpoint(result.checkpoint_path(results_dir))
        logged = log_checkpoint_model(checkpoint, session.tracker.target.uri, run_id)
        summary.evaluation_note = f"Its policy: MLflow model {logged.model_uri}"
    except Exception as err:  # the population's results stand without it
        summary.evaluation_note = (
            f"Its policy could not be logged as an MLflow model: {type(err).__name__}: {err}"
        )


def _checked(
    resolved: ResolvedExperiment, config: AlgorithmConfig, address: str | None
) -> tuple[ResolvedExperiment, AlgorithmConfig, bool]:
    """The pre-flight against the live cluster: the experiment and config to run (the
    CPU fallback's where the plan fell back) and whether every trial runs at once, or
    ExperimentError before anything is written."""
    plan = preflight(resolved, config, address=address)
    assert plan.resolved is not None and plan.config is not None
    return plan.resolved, plan.config, plan.concurrent >= plan.trials


def run(
    resolved: ResolvedExperiment,
    *,
    address: str | None = None,
    progress_interval_s: float = 30.0,
    verbose: bool = False,
    configure: Configure | None = None,
    dashboard: bool = False,
) -> RunSummary:
    """Runs the population to its stop rules and returns what a person wants to know.

    ``configure`` may adjust the RLlib config beyond what experiment files say (a
    custom learner class or callbacks, from Python). ``dashboard`` starts Ray's
    dashboard with a local Ray (ray[default]) and prints its address. Ray's, Tune's and
    MLflow's logging goes to the results folder's workbench.log (``verbose``: and to
    stderr).
    """

    _tune_environment()
    check_dashboard(address, dashboard)  # before the lock: a refused run leaves nothing
    with (
        FolderLock(resolved.results_dir, "run"),
        LibraryLogs(verbose) as logs,
        raylet_messages_logged(),
    ):
        # Under the lock: a run of the same name that started at the same moment and
        # wrote first is seen now (resolve's look was before either wrote).
        problems: list[Problem] = []
        check_results_dir(resolved.results_dir, resolved.experiment, str(resolved.file), problems)
        if problems:
            raise ExperimentError(problems)
        start_ray(address, dashboard=dashboard)
        resolved, config, all_at_once = _checked(
            resolved, build_config(resolved.experiment, resolved.defaults, configure), address
        )
        prepare_results_dir(resolved)
        logs.open_file(resolved.results_dir, "run")
        record_ray_session(resolved.results_dir)
        session = _session(
            resolved, config, progress_interval_s=progress_interval_s, all_at_once=all_at_once
        )
        tuner = tune.Tuner(
            session.trainable,
            param_space=session.param_space,
            tune_config=session.tune_config,
            run_config=session.run_config,
        )
        logs.take_over(also_import=("mlflow",) if session.tracker else ())
        return _finish(resolved, session, *fit(tuner, session, resolved.results_dir))


def resume(
    resolved: ResolvedExperiment,
    *,
    restart_errored: bool = False,
    reopen: Sequence[str] = (),
    stop_changed: bool = False,
    address: str | None = None,
    progress_interval_s: float = 30.0,
    verbose: bool = False,
    configure: Configure | None = None,
) -> RunSummary:
    """Continues a stopped population in its results folder with the same MLflow runs.

    Tune restores the trials and the searcher; the scheduler, the stopper and the
    callbacks are built fresh from the experiment (Tune would unpickle stale copies),
    and Tune then hands the callbacks their saved state. ``stop_changed``: the
    experiment's stop rules differ from the saved ones (`resume --set stop.*`), which are
    saved in their place; ``reopen``: the trials a budget ended that a larger one runs
    again (`workbench.run.budget`).
    """

    _tune_environment()
    # The only writer of the folder: a driver of it that still runs refuses this resume.
    with (
        FolderLock(resolved.results_dir, "resume"),
        LibraryLogs(verbose) as logs,
        raylet_messages_logged(),
    ):
        logs.open_file(resolved.results_dir, "resume")
        note = missing_store_note(resolved.experiment.tracking, resolved.results_dir)
        if note:
            print(note)
        killed = cleanup_leftover_ray(resolved.results_dir)
        if killed:
            print(
                f"Stopped {len(killed)} Ray processes left behind by the interrupted driver "
                f"(pids {', '.join(map(str, killed))})"
            )
        start_ray(address)
        resolved, config, all_at_once = _checked(
            resolved, build_config(resolved.experiment, resolved.defaults, configure), address
        )
        record_ray_session(resolved.results_dir)
        if stop_changed:
            save_stop_rules(resolved.results_dir, describe(resolved)["stop"])
        if reopen:
            reopen_trials(resolved.results_dir, set(reopen))
            clear_ran_out(resolved.results_dir)
        forget_in_flight_decisions(resolved.results_dir)
        session = _session(
            resolved, config, progress_interval_s=progress_interval_s, all_at_once=all_at_once
        )
        if restart_errored:
            # Not Tune's restart_errored: it re-creates an errored trial from its resolved
            # config, which fails in add_trial's placeholder resolution for any RLlib config
            # (TypeError, swallowed: the population then runs with no trials at all). The
            # workbench resumes the trial instead, without its checkpoints: from scratch,
            # under the same trial id and MLflow run.
            statuses = population_statuses(resolved.results_dir)
            errored = {trial_id for trial_id, status in statuses.items() if status == "ERROR"}
            session.tune_config.scheduler.restart_from_scratch = errored
        tuner = tune.Tuner.restore(
            str(resolved.results_dir),
            session.trainable,
            param_space=session.param_space,
            resume_unfinished=True,
            resume_errored=True,
        )
        restored_tuner_uses(tuner, session.tune_config, session.run_config)
        logs.take_over(also_import=("mlflow",) if session.tracker else ())
        return _finish(resolved, session, *fit(tuner, session, resolved.results_dir))


__all__ = ["RunSummary", "resume", "run"]
