"""The trainable Tune runs: the RLlib algorithm class with a per-trial seed, a
``reset_config`` so that Tune can reuse its actor, checkpoints that can be trusted
(a manifest written last and checked after each save; a restore of a damaged
checkpoint falls back to the newest intact one of the trial: workbench.trial.manifest),
and the trial's score with the evaluation that confirms a stop (workbench.trial.score)."""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from ray.train import Checkpoint
from ray.train._internal.session import _TrainingResult
from ray.tune.result import TRIAL_INFO

from workbench.names import (
    CHECKPOINT_FALLBACK_KEY,
    EVAL_EPISODES_METRIC,
    EVAL_RETURN_METRIC,
    EVAL_STD_METRIC,
    STEPS_METRIC,
)
from workbench.trial import eager_torch
from workbench.trial.callbacks import WorkbenchCallbacks
from workbench.trial.candidates import (
    CANDIDATE_BEST_METRIC,
    CANDIDATE_EPISODES_METRIC,
    CANDIDATE_RETURN_METRIC,
    CANDIDATE_STD_METRIC,
    CANDIDATE_TIME_METRIC,
    SHORT_EVAL_SEED_OFFSET,
    Evaluated,
)
from workbench.trial.candidates import kept as kept_candidates
from workbench.trial.candidates import record as record_candidate
from workbench.trial.manifest import (
    CheckpointDamaged,
    local_checkpoint_folder,
    policy_settings,
    problem,
    restore_choice,
    skip_written_checkpoints,
    write_manifest,
)
from workbench.trial.observation_filter import runner_stats
from workbench.trial.score import (
    EVAL_ENV_STEPS_METRIC,
    EVAL_TIME_METRIC,
    ScoreSettings,
    ScoreWindow,
    evaluate_module,
    nested,
    pop_returns,
)

logger = logging.getLogger(__name__)


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


class SetupHeap:
    """The heap a trial's setup built (torch, RLlib, the algorithm: about 450,000 objects),
    out of the garbage collector's sight. Python's full collections scan the whole heap: in
    a trial's process one took about 0.2 s, landing in whichever of sampling or learning it
    interrupted (a 0.13 s iteration became 0.35 s and the time split's verdict flipped).
    Objects the trial creates later are collected as before.

    A PBT exploit rebuilds the algorithm in the same process (``reset_config``). Giving the
    whole heap back to the collector there, to free the old algorithm's reference cycles,
    costs a full collection of it each time (0.24 s, 10x the rebuild itself). A rebuild
    leaves the heap frozen instead: the old algorithm's cycles (about 1,200 objects) stay
    frozen, uncollected, and every ``rebuilds_per_thaw``-th rebuild (32: some 40,000 objects,
    a tenth of the heap) thaws everything, and its freeze collects it all. (The frozen
    heap's size is not asked for: ``gc.get_freeze_count`` walks it, 44 ms.)"""

    def __init__(self, rebuilds_per_thaw: int = 32) -> None:
        self.rebuilds_per_thaw = rebuilds_per_thaw
        self.kept = 0  # rebuilds since the heap was last given back

    def freeze(self) -> None:
        """After a build: collects what is not frozen (everything, after a thaw: about
        0.25 s; after a rebuild that kept the heap frozen, the new objects only) and
        freezes it."""
        gc.collect()
        gc.freeze()

    def thaw(self) -> bool:
        """Before a rebuild: gives the heap back to the collector every
        ``rebuilds_per_thaw``-th time (True); otherwise leaves it frozen (False)."""
        if self.kept + 1 < self.rebuilds_per_thaw:
            self.kept += 1
            return False
        self.release()
        return True

    def release(self) -> None:
        """Everything back to the collector."""
        gc.unfreeze()
        self.kept = 0


SETUP_HEAP = SetupHeap()  # one heap a process


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
def seeded_trainable(
    algo_class: type,
    score: ScoreSettings = ScoreSettings(),  # noqa: B008
    reported: frozenset[str] | None = None,
) -> type:
    """The algorithm class with a per-trial seed set before RLlib builds anything, a
    ``reset_config`` so that Tune can reuse its actor (``reuse_actors=True``), and the
    score of ``score`` with every result (a stop on a return target confirmed by an
    evaluation in the trial's process). ``reported``: the config keys each result carries
    under ``config`` (with ``seed``; None: the whole config, as RLlib reports it)."""
    kept_keys = None if reported is None else reported | {"seed"}

    class Seeded(algo_class):  # type: ignore[misc,valid-type]
        # Why the last restore took another checkpoint than Tune asked for: reported
        # with the next result (the driver prints it and tags the trial's MLflow run).
        _checkpoint_note: str | None = None
        score_settings = score
        # The trial's best kept candidate's short evaluation (None: not read yet).
        _candidate_best: float | None = None

        def __init__(self, config: Any = None, **kwargs: Any) -> None:
            eager_torch.install()  # before RLlib seeds torch
            # A new trial's window, or the one a restore brings (reset_config, resume).
            self.score_window = ScoreWindow(self.score_settings.window)
            if isinstance(config, dict) and config.get(TRIAL_INFO) is not None:
                config = dict(config)
                seed = trial_seed(int(config.get("seed") or 0), config[TRIAL_INFO].trial_id)
                config["seed"] = seed
            super().__init__(config=config, **kwargs)
            SETUP_HEAP.freeze()
            callbacks = _as_list(getattr(self, "callbacks", None))
            if not any(isinstance(c, WorkbenchCallbacks) for c in callbacks):
                logger.warning(
                    "the workbench's callbacks are not installed (a configure() replaced "
                    "them): no episode returns reach score/*; subclass WorkbenchCallbacks "
                    "or pass a list of callbacks with it"
                )

        def reset_config(self, new_config: dict[str, Any]) -> bool:
            """Tune hands this actor to a trial (after a PBT pause or exploit, or a new
            one): the algorithm is rebuilt in this process exactly as a new actor would
            build it from ``new_config``, then Tune restores the trial's checkpoint into
            it. What is saved is the new process: ~3.8 s of importing torch and RLlib
            per exploit (docs/benchmarks/tune-overhead.md). RLlib's Algorithm has no
            reset_config, and without one Tune fails the trial at its first reuse."""
            SETUP_HEAP.thaw()
            self.cleanup()  # learners, env runners (remote ones are new actors again)
            kept = {name: getattr(self, name, None) for name in _RESET_KEEPS}
            config = dict(new_config)
            if self._trial_info is not None:
                config[TRIAL_INFO] = self._trial_info  # the trial's seed comes from its id
            type(self).__init__(self, config=config, storage=self._storage)
            for name, value in kept.items():
                setattr(self, name, value)
            return True

        def save_checkpoint(self, checkpoint_dir: str) -> None:
            """RLlib's checkpoint, then its manifest, last: sizes and hashes of its files,
            the settings acting with its policy needs, and Tune's counters."""
            super().save_checkpoint(checkpoint_dir)
            self.score_window.save(Path(checkpoint_dir))
            write_manifest(
                Path(checkpoint_dir),
                policy=policy_settings(
                    self.config, self.iteration, observation_filter=runner_stats(self)
                ),
                progress={
                    "training_iteration": self.iteration,
                    "time_total_s": self._time_total,
                    "timesteps_total": self._timesteps_total,
                    "episodes_total": self._episodes_total,
                },
            )

        def save(self, checkpoint_dir: str | None = None) -> Any:
            """Tune's save (the checkpoint copied into the trial folder), into a folder the
            trial has not written before, checked there: a copy cut short fails the save,
            not a later restore."""
            skip_written_checkpoints(self._storage)  # a folder is written once
            saved = super().save(checkpoint_dir)
            path = local_checkpoint_folder(getattr(saved, "checkpoint", None))
            if path is not None:
                trouble = problem(path)
                if trouble is not None:
                    raise CheckpointDamaged(f"the checkpoint just saved, {path}, {trouble}")
            return saved

        def restore(self, checkpoint_path: Any) -> None:
            """Tune's restore (a retry, a resume, a PBT exploit) of a whole checkpoint:
            the one asked for, or when it is damaged, the newest intact one of the
            trial before it. CheckpointDamaged, naming each one's problem, when none is.

            Tune's counters restart from the ones the checkpoint was saved with (its
            manifest), as RLlib's iteration does (from the algorithm's state), not from
            the metrics Tune hands over: PBT hands a donor's checkpoint with the result in
            its scheduler state (Tune's PopulationBasedTraining._exploit), which need not
            be the one the checkpoint was saved at, and the clone went on with that
            result's clock and another iteration's weights."""
            checkpoint = getattr(checkpoint_path, "checkpoint", checkpoint_path)
            path = local_checkpoint_folder(checkpoint)
            if path is not None:
                choice = restore_choice(path)
                if choice.note is not None:
                    self._checkpoint_note = choice.note
                    if isinstance(checkpoint, str | Path):
                        checkpoint_path = str(choice.path)
                    else:
                        checkpoint_path = _TrainingResult(
                            checkpoint=Checkpoint(
                                path=str(choice.path), filesystem=checkpoint.filesystem
                            ),
                            metrics=dict(choice.progress or {}),
                        )
                elif isinstance(checkpoint_path, _TrainingResult) and choice.progress:
                    saved = {k: v for k, v in choice.progress.items() if v is not None}
                    checkpoint_path = _TrainingResult(
                        checkpoint=checkpoint, metrics={**checkpoint_path.metrics, **saved}
                    )
            super().restore(checkpoint_path)

        def load_checkpoint(self, checkpoint_dir: str) -> None:
            super().load_checkpoint(checkpoint_dir)
            # The window of the checkpoint's trial: its own after a retry or a resume,
            # the donor's after a PBT exploit (empty for checkpoints from before scores).
            self.score_window.restore(Path(checkpoint_dir))

        def get_auto_filled_metrics(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            """Tune's auto-filled keys, with ``config`` cut to the reported keys: RLlib puts
            its whole config (some 320 keys, 15 KB) in every result, which the driver
            then unpickles, flattens, logs to result.json and keeps in the experiment
            snapshot (the last result, and each kept checkpoint's) for every trial. The
            whole config is the trial's params.json."""
            filled: dict[str, Any] = super().get_auto_filled_metrics(*args, **kwargs)
            config = filled.get("config")
            if kept_keys is not None and isinstance(config, dict):
                filled["config"] = {k: v for k, v in config.items() if k in kept_keys}
            return filled

        def step(self) -> Any:
            result = super().step()
            if not isinstance(result, dict):
                return result
            if self._checkpoint_note is not None:
                result[CHECKPOINT_FALLBACK_KEY] = self._checkpoint_note
                self._checkpoint_note = None
            window = self.score_window
            window.push(pop_returns(result))
            metrics = window.metrics()
            settings = self.score_settings
            target = settings.target if settings.confirms else None
            due_at = settings.evaluate_at
            if target is not None and due_at is not None and window.evaluation_due(due_at):
                evaluation = self.evaluate_for_stop()
                metrics.update(evaluation)
                if evaluation[EVAL_RETURN_METRIC] < target:
                    window.refused()
            # Tune counts this iteration only once step() returns.
            if settings.candidates.due(self.iteration + 1):
                metrics.update(self._candidate(result))
            elif settings.candidates.active:
                best = self._best_candidate()
                if best is not None:  # in every result: what Optuna's study is told
                    metrics[CANDIDATE_BEST_METRIC] = best
            for group, values in nested(metrics).items():
                result.setdefault(group, {}).update(values)
            return result

        def _candidate(self, result: dict[str, Any]) -> dict[str, float]:
            """A short evaluation of the current policy: candidate/* metrics, and the
            policy kept as a candidate for the population's result when it ranks among
            the trial's best (workbench.trial.candidates)."""
            settings = self.score_settings.candidates
            started = time.perf_counter()
            evaluation = self.evaluate_short()
            trial_dir = self._trial_dir()
            if trial_dir is None:
                return {}
            steps = result.get(STEPS_METRIC, 0)
            evaluated = Evaluated(
                trial_id=self.trial_id,
                iteration=int(self.iteration) + 1,
                return_mean=float(evaluation[EVAL_RETURN_METRIC]),
                return_std=float(evaluation.get(EVAL_STD_METRIC, 0.0)),
                episodes=int(evaluation.get(EVAL_EPISODES_METRIC, settings.episodes)),
                env_steps=int(evaluation.get(EVAL_ENV_STEPS_METRIC, 0)),
                time_s=float(evaluation.get(EVAL_TIME_METRIC, 0.0)),
                trained_env_steps=int(steps) if isinstance(steps, int | float) else 0,
                at=time.time(),
            )
            record_candidate(trial_dir, evaluated, settings.keep, self._save_candidate)
            self._candidate_best = None  # read again from the trial's folder
            best = self._best_candidate()
            return {
                CANDIDATE_RETURN_METRIC: evaluated.return_mean,
                CANDIDATE_STD_METRIC: evaluated.return_std,
                CANDIDATE_EPISODES_METRIC: float(evaluated.episodes),
                CANDIDATE_BEST_METRIC: evaluated.return_mean if best is None else best,
                CANDIDATE_TIME_METRIC: time.perf_counter() - started,
            }

        def _best_candidate(self) -> float | None:
            """The best short evaluation of the trial's kept candidates (None: none yet)."""
            if self._candidate_best is None:
                trial_dir = self._trial_dir()
                best = kept_candidates(trial_dir) if trial_dir is not None else []
                self._candidate_best = best[0][1].return_mean if best else None
            return self._candidate_best

        def _save_candidate(self, folder: Path) -> None:
            # Saved from inside step(): the weights are those of the iteration Tune has
            # not counted yet, and the checkpoint says so.
            self._iteration += 1
            try:
                self.save_checkpoint(str(folder))
            finally:
                self._iteration -= 1

        def _trial_dir(self) -> Path | None:
            """The trial's folder in the results folder (the workbench's storage is a
            path every node sees: the pre-flight checks it)."""
            storage = getattr(self, "_storage", None)
            try:
                return Path(storage.trial_fs_path) if storage is not None else None
            except Exception:  # no trial folder set (a trainable built outside Tune)
                return None

        def evaluate_short(self) -> dict[str, float]:
            """The current policy over the short evaluation's episodes (eval/* keys);
            tests put a stub evaluation in its place."""
            candidates = self.score_settings.candidates
            return self._evaluate(
                replace(
                    self.score_settings,
                    eval_episodes=candidates.episodes,
                    eval_seed=self.score_settings.eval_seed + SHORT_EVAL_SEED_OFFSET,
                )
            )

        def evaluate_for_stop(self) -> dict[str, float]:
            """The current policy over the stop's evaluation episodes (eval/* metrics);
            tests put a stub evaluation in its place."""
            return self._evaluate(self.score_settings)

        def _evaluate(self, settings: ScoreSettings) -> dict[str, float]:
            config = self.config
            env_id = config.env if isinstance(config.env, str) else str(config.env)
            return evaluate_module(
                self.get_module(),
                env_id=env_id,
                env_config=dict(config.env_config),
                normalize_actions=bool(config.normalize_actions),
                clip_actions=bool(config.clip_actions),
                settings=settings,
                observation_filter=runner_stats(self),
            )

    Seeded.__name__ = Seeded.__qualname__ = algo_class.__name__
    return Seeded


def _as_list(callbacks: Any) -> list[Any]:
    if callbacks is None:
        return []
    return list(callbacks) if isinstance(callbacks, list | tuple) else [callbacks]
