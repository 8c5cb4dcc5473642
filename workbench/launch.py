"""Launch: a resolved experiment becomes a Tune run of RLlib trials, and a summary.

Everything that can be wrong with the input was checked by `resolve` before this
module starts Ray.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from workbench.algorithm_config import algorithm_config, param_space
from workbench.checkpoints import CheckpointGuard
from workbench.plan import preflight
from workbench.progress import ProgressTable, TrialRecord
from workbench.resolve import ResolvedExperiment, describe
from workbench.results_folder import RESOLVED_FILE, population_statuses
from workbench.schedulers import SchedulerState, scheduler, search_algorithm
from workbench.schema import RETURN_METRIC
from workbench.stopping import RulesStopper
from workbench.tracking import MlflowTracker, TrackingTarget, tracking_uri_for


def trial_seed(base_seed: int, trial_id: str) -> int:
    """A trial's seed from the experiment seed and the trial's index in the run.

    Tune's trial ids end in the trial's index (``a1b2c_00003``), which is the same
    in every run of the same experiment and survives restores and PBT exploits.
    """
    try:
        index = int(str(trial_id).rsplit("_", 1)[-1])
    except ValueError:
        index = 0
    return (base_seed * 0x9E3779B1 + index * 0x85EBCA77 + 0x165667B1) % (2**31 - 1)


# What Tune's Trainable.reset has set up for the next trial (its log files) and
# Trainable.__init__ would clear: kept across the rebuild in reset_config.
_RESET_KEEPS = (
    "_stdout_context",
    "_stdout_fp",
    "_stdout_stream",
    "_stderr_context",
    "_stderr_fp",
    "_stderr_stream",
    "_stderr_logging_handler",
    "_stdout_file",
    "_stderr_file",
)


@cache
def seeded_trainable(algo_class: type) -> type:
    """The algorithm class with a per-trial seed set before RLlib builds anything, and
    a ``reset_config`` so that Tune can reuse its actor (``reuse_actors=True``)."""
    from ray.tune.result import TRIAL_INFO

    class Seeded(algo_class):  # type: ignore[misc,valid-type]
        def __init__(self, config: Any = None, **kwargs: Any) -> None:
            if isinstance(config, dict) and config.get(TRIAL_INFO) is not None:
                config = dict(config)
                seed = trial_seed(int(config.get("seed") or 0), config[TRIAL_INFO].trial_id)
                config["seed"] = seed
            super().__init__(config=config, **kwargs)

        def reset_config(self, new_config: dict[str, Any]) -> bool:
            """Tune hands this actor to a trial (after a PBT pause or exploit, or a new
            one): the algorithm is rebuilt in this process exactly as a new actor would
            build it from ``new_config``, then Tune restores the trial's checkpoint into
            it. What is saved is the new process: ~3.8 s of importing torch and RLlib
            per exploit (benchmarks/RESULTS.md, Tune overhead). RLlib's Algorithm has no
            reset_config, and without one Tune fails the trial at its first reuse."""
            self.cleanup()  # learners, env runners (remote ones are new actors again)
            kept = {name: getattr(self, name, None) for name in _RESET_KEEPS}
            config = dict(new_config)
            if self._trial_info is not None:
                config[TRIAL_INFO] = self._trial_info  # the trial's seed comes from its id
            type(self).__init__(self, config=config, storage=self._storage)
            for name, value in kept.items():
                setattr(self, name, value)
            return True

    Seeded.__name__ = Seeded.__qualname__ = algo_class.__name__
    return Seeded


def trial_name(trial: Any) -> str:
    """PPO_00003: the algorithm and the trial's index (Tune's default repeats the env id)."""
    return f"{trial.trainable_name}_{str(trial.trial_id).rsplit('_', 1)[-1]}"


@dataclass
class RunSummary:
    name: str
    results_dir: Path
    trials: list[TrialRecord] = field(default_factory=list)
    best: TrialRecord | None = None
    errors: int = 0
    tracking_uri: str | None = None
    mlflow_experiment: str | None = None
    # Stopped before its stop rules (Ctrl-C, SIGTERM): `workbench resume` continues it.
    interrupted: bool = False
    # The best trial's last checkpoint rolled out (evaluation.at_end), or why it was not.
    evaluation: Any = None  # workbench.evaluate.Evaluation
    evaluation_note: str | None = None

    def lines(self) -> list[str]:
        out = [f"Experiment {self.name}: {len(self.trials)} trials, {self.errors} errored"]
        if self.best is not None:
            out.append(
                f"Best trial {self.best.name}: return {self.best.best_return:.1f} "
                f"(last {self.best.last_return:.1f}) after {self.best.iteration} iterations, "
                f"{self.best.env_steps} env steps"
            )
            if self.best.schedule:
                out.append("Its hyperparameters over time (iteration: values):")
                for iteration, values in self.best.schedule:
                    shown = ", ".join(f"{k}={_short(v)}" for k, v in values.items())
                    out.append(f"  {iteration:>4}: {shown}")
        else:
            out.append("No trial reported a return (no episode finished).")
        if self.evaluation is not None:
            logged = "; logged to its MLflow run as eval/*" if self.evaluation.run_id else ""
            out.append(
                f"Evaluated {self.best.name if self.best else 'the best trial'} "
                f"(checkpoint of iteration {self.evaluation.training_iteration}): "
                f"{self.evaluation.summary()}{logged}"
            )
        if self.evaluation_note:
            out.append(self.evaluation_note)
        out.append(f"Results: {self.results_dir}")
        if self.interrupted:
            unfinished = sum(t.status not in ("TERMINATED", "ERROR") for t in self.trials)
            out.append(
                f"Interrupted with {unfinished} trials unfinished; the state is saved: continue "
                f"with `workbench resume {self.results_dir}`"
            )
        if self.tracking_uri:
            store = _store_argument(self.tracking_uri)
            out.append(
                f"MLflow: {self.tracking_uri} (experiment {self.mlflow_experiment}); inspect with "
                f"`workbench runs {self.mlflow_experiment}{store}` or `workbench ui{store}`"
            )
        return out


def _store_argument(uri: str) -> str:
    """The --store option the inspection commands need for this URI ('' for the default)."""
    if uri == os.environ.get("MLFLOW_TRACKING_URI"):
        return ""
    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
        try:
            shown = path.relative_to(Path.cwd())
        except ValueError:
            shown = path
        if str(shown) == "results/mlflow.db":
            return ""
        return f" --store {shown}"
    return f" --store {uri}"


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def prepare_results_dir(resolved: ResolvedExperiment) -> None:
    """Creates the experiment folder and saves the resolved experiment in it.

    The saved file is a complete experiment file (search space inline, storage
    absolute), so `workbench resume` rebuilds the same population from it alone.
    """
    resolved.results_dir.mkdir(parents=True, exist_ok=True)
    data = describe(resolved)
    data.pop("results_dir", None)
    data["search_space"] = {"params": data["search_space"]["params"]}
    data["storage"] = str(resolved.results_dir.parent)
    header = (
        f"# The experiment as resolved for this results folder (from {resolved.file}).\n"
        "# `workbench resume` reads it; edit only if you know why.\n"
    )
    (resolved.results_dir / RESOLVED_FILE).write_text(
        header + yaml.safe_dump(data, sort_keys=False)
    )


def tracking_target(resolved: ResolvedExperiment) -> TrackingTarget:
    """Where this population's MLflow runs go (see workbench/tracking.py)."""
    from ray.tune.utils import flatten_dict

    exp = resolved.experiment
    storage_root = resolved.results_dir.parent
    uri = tracking_uri_for(exp.tracking.uri, storage_root)
    described = flatten_dict(describe(resolved), delimiter=".")
    return TrackingTarget(
        uri=uri,
        experiment=exp.tracking.experiment or exp.name,
        population=exp.name,
        key=str(resolved.results_dir),
        results_dir=resolved.results_dir,
        # A local store keeps its artifacts next to it; a server decides for itself.
        artifact_root=storage_root / "mlartifacts" if uri.startswith("sqlite:") else None,
        metrics=exp.tracking.metrics,
        flush_timeout_s=exp.tracking.flush_timeout_s,
        parent_params={
            k: v if isinstance(v, str) else yaml.safe_dump(v, default_flow_style=True).strip()
            for k, v in described.items()
            if v is not None
        },
        hyperparameters={key: name for name, key in resolved.tune_keys.items()},
        time_budget_s=exp.stop.wall_time_s,
    )


def dashboard_missing() -> str | None:
    """Why Ray's dashboard cannot start here (its packages, ray[default], are missing), or None."""
    import ray
    from ray._private.utils import get_dashboard_dependency_error

    error = get_dashboard_dependency_error()
    if error is None:
        return None
    return (
        f"Ray's dashboard needs the packages of ray[default] ({error}); install them with "
        f"`pip install -e '.[dashboard]'` or `pip install 'ray[default]=={ray.__version__}'`"
    )


def start_ray(address: str | None, dashboard: bool = False) -> None:
    import ray

    if ray.is_initialized():
        return
    joining = bool(address or os.environ.get("RAY_ADDRESS"))
    if dashboard and not joining and (missing := dashboard_missing()):
        from workbench.errors import ExperimentError

        raise ExperimentError.single("--dashboard", "", missing)
    if joining:
        context = ray.init(address=address or os.environ["RAY_ADDRESS"], log_to_driver=False)
    else:
        # "local": a fresh Ray of our own, even when another (a `ray start`, or the
        # leftovers of a killed run) is around; joining one is what --address is for.
        context = ray.init(
            address="local",
            log_to_driver=False,
            include_dashboard=dashboard,
            dashboard_host="127.0.0.1",  # this machine only (Ray's default, said aloud)
        )
    if dashboard:
        url = context.dashboard_url
        # Ray 2.60 starts local clusters with token authentication, the dashboard included.
        token = " (it asks for the token `ray get-auth-token` prints)"
        token = token if os.environ.get("RAY_AUTH_MODE", "").lower() == "token" else ""
        print(
            f"Ray dashboard: http://{url}{token}" if url else "Ray dashboard: the cluster runs none"
        )


SESSION_FILE = "ray_session.json"


def record_ray_session(results_dir: Path) -> None:
    """Remembers the local Ray this driver started, so that a resume after the driver
    was killed can clean up what it left behind (and nothing else)."""
    import json

    import ray

    node = getattr(ray._private.worker, "_global_node", None)
    if node is None or not getattr(node, "head", False):
        return  # joined a cluster: not ours to clean up
    (results_dir / SESSION_FILE).write_text(
        json.dumps({"driver_pid": os.getpid(), "session_dir": node.get_session_dir_path()})
    )


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def cleanup_leftover_ray(results_dir: Path) -> list[int]:
    """Kills the Ray processes a killed driver of this population left running.

    Only processes of the recorded Ray session are touched. Refuses (exit 2) when the
    population's driver is still alive: two drivers would write the same trials.
    """
    import json
    import signal

    from workbench.errors import ExperimentError

    record = results_dir / SESSION_FILE
    if not record.exists():
        return []
    data = json.loads(record.read_text())
    driver = int(data.get("driver_pid", 0))
    command = _cmdline(driver) if driver and driver != os.getpid() else ""
    if "workbench" in command and (" run " in command or " resume " in command):
        raise ExperimentError.single(
            str(results_dir),
            "",
            f"this population is still running (driver pid {driver}); stop it (Ctrl-C or "
            f"`kill {driver}`) before resuming",
        )
    session = str(data.get("session_dir", ""))
    killed = []
    if session and Path("/proc").is_dir():
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            if session in _cmdline(int(entry.name)):
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed.append(int(entry.name))
                except OSError:
                    pass
    record.unlink()
    return killed


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
    *,
    progress_interval_s: float,
    configure: Callable[[AlgorithmConfig], AlgorithmConfig] | None,
) -> _Session:
    from ray import tune

    exp = resolved.experiment
    config = algorithm_config(resolved)
    if configure is not None:
        config = configure(config)
    table = ProgressTable(
        {key: name for name, key in resolved.tune_keys.items()}, interval_s=progress_interval_s
    )
    trial_scheduler = scheduler(resolved)
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
        add_listener = getattr(trial_scheduler, "add_lineage_listener", None)
        if add_listener is not None:
            add_listener(tracker.on_exploit)
    tune_config = tune.TuneConfig(
        scheduler=trial_scheduler,
        search_alg=search_algorithm(resolved),
        num_samples=exp.population,
        time_budget_s=exp.stop.wall_time_s,
        max_concurrent_trials=exp.max_concurrent,
        # Exploits and pauses restore into a kept actor, rebuilt by reset_config.
        reuse_actors=exp.reuse_actors,
        trial_name_creator=trial_name,
        trial_dirname_creator=trial_name,
    )
    run_config = tune.RunConfig(
        name=exp.name,
        storage_path=str(resolved.results_dir.parent),
        stop=RulesStopper(
            exp.stop.tune_stop(),
            all_at_return=exp.stop.all_at_return
            if exp.stop.all_at_return is not None
            else exp.scheduler.type in ("pbt", "pb2"),
        ),
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
        trainable=seeded_trainable(config.algo_class),
        param_space=param_space(resolved, config),
        tune_config=tune_config,
        run_config=run_config,
        table=table,
        tracker=tracker,
    )


def _tune_environment() -> None:
    # RLlib reports the episode return only once an episode has ended: without this,
    # Tune's strict metric check fails the whole run on the first iteration.
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    # The workbench snapshots the experiment after every trial checkpoint on purpose
    # (ResumableScheduler); Tune would warn about each one.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")


def _fit(tuner: Any) -> tuple[Any, float]:
    """Tuner.fit with SIGTERM treated like Ctrl-C (Kubernetes stops pods with SIGTERM;
    Tune saves its state only on SIGINT/SIGUSR1). Returns the results and the wall time."""
    import signal
    import threading
    import time

    previous = None
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGUSR1"):
        previous = signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGUSR1))
    start = time.monotonic()
    try:
        return tuner.fit(), time.monotonic() - start
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _finish(
    resolved: ResolvedExperiment, session: _Session, results: Any, elapsed_s: float
) -> RunSummary:
    summary = summarize(resolved, session.table, errors=len(results.errors))
    budget = resolved.experiment.stop.wall_time_s
    budget_spent = budget is not None and elapsed_s >= 0.99 * budget
    by_rule = session.run_config.stop.stop_all()
    summary.interrupted = not (budget_spent or by_rule) and any(
        t.status not in ("TERMINATED", "ERROR") for t in summary.trials
    )
    if session.tracker is not None:
        summary.tracking_uri = session.tracker.target.uri
        summary.mlflow_experiment = session.tracker.target.experiment
    if not summary.interrupted:
        evaluate_best(resolved, session, summary)
    return summary


def evaluate_best(resolved: ResolvedExperiment, session: _Session, summary: RunSummary) -> None:
    """Rolls out the best trial's last checkpoint (experiment.evaluation) and logs eval/*
    to its MLflow run. Never fails the population: a problem becomes a summary line."""
    from workbench.evaluate import (
        check_env,
        evaluate_checkpoint,
        log_evaluation,
        read_checkpoint,
        trial_checkpoints,
    )

    section = resolved.experiment.evaluation
    best = summary.best
    if section.at_end == "none" or best is None:
        return
    checkpoints = trial_checkpoints(resolved.results_dir / best.name)
    if not checkpoints:
        summary.evaluation_note = (
            f"Not evaluated: {best.name} saved no checkpoint (checkpoint.at_end: true saves "
            "one when a trial ends)"
        )
        return
    try:
        checkpoint = read_checkpoint(checkpoints[-1])
        check_env(checkpoint, resolved.experiment.env.id, str(resolved.file))
        summary.evaluation = evaluate_checkpoint(
            checkpoint,
            episodes=section.episodes,
            deterministic=section.deterministic,
            seed=resolved.experiment.seed,
        )
    except Exception as err:  # the population's results stand without it
        summary.evaluation_note = f"Not evaluated: {best.name}: {type(err).__name__}: {err}"
        return
    if session.tracker is None:
        return
    trial_id = next((t for t, r in session.table.records.items() if r is best), None)
    run_id = session.tracker.get_state()["runs"].get(trial_id)
    if run_id is None:
        return
    try:
        from workbench.inspection import client_for

        log_evaluation(client_for(session.tracker.target.uri), run_id, summary.evaluation)
    except Exception as err:  # a store that does not answer: the figures are printed
        summary.evaluation_note = (
            f"The evaluation could not be logged to MLflow: {type(err).__name__}: {err}"
        )


def run(
    resolved: ResolvedExperiment,
    *,
    address: str | None = None,
    progress_interval_s: float = 15.0,
    configure: Callable[[AlgorithmConfig], AlgorithmConfig] | None = None,
    dashboard: bool = False,
) -> RunSummary:
    """Runs the population to its stop rules and returns what a person wants to know.

    ``configure`` may adjust the RLlib config beyond what experiment files say (a
    custom learner class or callbacks, from Python). ``dashboard`` starts Ray's
    dashboard with a local Ray (ray[default]) and prints its address.
    """
    from ray import tune

    _tune_environment()
    start_ray(address, dashboard=dashboard)
    preflight(resolved, address=address, configure=configure)
    prepare_results_dir(resolved)
    record_ray_session(resolved.results_dir)
    session = _session(resolved, progress_interval_s=progress_interval_s, configure=configure)
    tuner = tune.Tuner(
        session.trainable,
        param_space=session.param_space,
        tune_config=session.tune_config,
        run_config=session.run_config,
    )
    return _finish(resolved, session, *_fit(tuner))


def resume(
    resolved: ResolvedExperiment,
    *,
    restart_errored: bool = False,
    address: str | None = None,
    progress_interval_s: float = 15.0,
    configure: Callable[[AlgorithmConfig], AlgorithmConfig] | None = None,
) -> RunSummary:
    """Continues a stopped population in its results folder with the same MLflow runs.

    Tune restores the trials and the searcher; the scheduler, the stopper and the
    callbacks are built fresh from the experiment (Tune would unpickle stale copies),
    and Tune then hands the callbacks their saved state.
    """
    from ray import tune

    _tune_environment()
    killed = cleanup_leftover_ray(resolved.results_dir)
    if killed:
        print(
            f"Stopped {len(killed)} Ray processes left behind by the interrupted driver "
            f"(pids {', '.join(map(str, killed))})"
        )
    start_ray(address)
    preflight(resolved, address=address, configure=configure)
    record_ray_session(resolved.results_dir)
    session = _session(resolved, progress_interval_s=progress_interval_s, configure=configure)
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
    internal = tuner._local_tuner
    assert internal is not None
    session.run_config.name = internal._run_config.name
    session.run_config.storage_path = internal._run_config.storage_path
    internal._tune_config = session.tune_config
    internal._run_config = session.run_config
    return _finish(resolved, session, *_fit(tuner))


def summarize(resolved: ResolvedExperiment, table: ProgressTable, errors: int) -> RunSummary:
    trials = list(table.records.values())
    scored = [t for t in trials if not math.isnan(t.best_return)]
    best = max(scored, key=lambda t: t.best_return) if scored else None
    return RunSummary(
        name=resolved.experiment.name,
        results_dir=resolved.results_dir,
        trials=trials,
        best=best,
        errors=errors,
    )


__all__ = ["RETURN_METRIC", "RunSummary", "resume", "run", "seeded_trainable", "trial_seed"]
