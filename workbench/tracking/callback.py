"""MLflow tracking that stays correct under PBT, survives restores and store outages.

Ray's MLflowLoggerCallback logs every config key as a param (PBT then changes one and
MLflow raises), makes one call per metric (1-2.5 s per result on sqlite) and opens a
second run per trial after a restore. This module does it differently:

* one parent run per population, one nested child run per trial, found again by a
  tag (``workbench.key``) so a restored population continues the same runs;
* params are the *initial* hyperparameters (immutable in MLflow), and ``final/<name>``
  the values a finished trial's final policy trained with; the current value of every
  searched hyperparameter is a step metric ``hp/<name>`` so that a PBT schedule is a
  curve;
* each result becomes one ``log_batch`` call, written by a background thread that
  merges whatever queued up, so Tune's loop never waits on the store;
* the step of a run only grows: it is the run's result count, continued from the
  store's last step after a restore, whatever PBT does to ``training_iteration``;
* exploits are lineage records: appended to ``lineage.jsonl`` (results folder and the
  parent run's artifacts) and tagged on the child run; a line is appended when its
  exploit takes effect (the target's next result), so ``seq``, not line order, is
  the order the scheduler decided them in; a resume after a killed driver moves the
  records of exploits decided after Tune's last snapshot (which its trials restart
  from) to ``lineage_rolled_back.jsonl`` and numbers on from the snapshot's count;
* when the store does not answer (server down, database locked) writes wait in the
  queue and are retried with back-off; at the end of the run whatever still could
  not be written is spooled to the results folder and written by the next resume."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray.tune import Callback

from workbench.files import write_atomic
from workbench.lineage_record import ExploitDecision, LineageRecord
from workbench.names import (
    CHECKPOINT_FALLBACK_KEY,
    CHECKPOINT_FALLBACK_TAG,
    ERROR_TAG,
    FAILURES_TAG,
    FINAL_PARAM_PREFIX,
    LAST_FAILURE_TAG,
    LINEAGE_FILE,
    LINEAGE_ROLLED_BACK_FILE,
    PARENT,
    RESOLVED_FILE,
    RESULTS_DIR_TAG,
    ROLE_TAG,
    SPOOL_FILE,
    STEP_METRIC,
    STOPPED_BY_TAG,
    TRIAL_ID_TAG,
    trial_name,
)
from workbench.tracking.metrics import _param, hp_metric, metric_filter, numeric_metrics
from workbench.tracking.writer import (
    Artifact,
    EndLeftOpen,
    EndRun,
    Lineage,
    OpenRun,
    Params,
    Result,
    StoreWriter,
    Tags,
    op_from_json,
    op_to_json,
)

PlotRenderer = Callable[[Any, dict[str, str], Path], list[Path]]


@dataclass
class TrackingTarget:
    """Where a population's runs go."""

    uri: str
    experiment: str
    population: str  # the parent run's name
    key: str  # identifies the population across restores (see results_dir_tag)
    results_dir: Path
    artifact_root: Path | None
    # The folder as the store records it: its name in a store beside it (they are
    # copied and moved together; workbench.tracking.location), else its absolute path.
    results_dir_tag: str = ""
    legacy_keys: tuple[str, ...] = ()  # keys of the same population tracked before
    metrics: str | list[str] = "curated"
    flush_timeout_s: float = 120.0
    parent_params: dict[str, str] = field(default_factory=dict)
    hyperparameters: dict[str, str] = field(default_factory=dict)  # tune key -> public name
    # On the parent and every trial run: where the population came from (MLflow's
    # source and git tags; workbench.tracking.run_context).
    run_tags: dict[str, str] = field(default_factory=dict)
    # Renders the population's PNGs from the store at the end (client, run ids by
    # handle, results folder) -> files to attach to the parent run. Handed in by the
    # launcher: the plots are analysis, which reads what tracking writes.
    render_plots: PlotRenderer | None = None


@dataclass
class _Pending:
    """An exploit decided but not yet written: `armed` once the target's next result will
    show the restore (after the result the decision was made on)."""

    record: LineageRecord
    armed: bool = True

    def to_dict(self) -> dict[str, Any]:
        return self.record.to_dict()


class MlflowTracker(Callback):  # type: ignore[misc]
    """The Tune callback (driver side) that writes a population to MLflow."""

    def __init__(self, target: TrackingTarget, *, on_event: Callable[[str], None] | None = None):
        self.target = target
        self._on_event = on_event
        self._keep = metric_filter(target.metrics)
        self._writer: StoreWriter | None = None
        self._runs: dict[str, str] = {}  # restored state: handle -> run id
        self._trial_names: dict[str, str] = {}
        self._last_values: dict[str, dict[str, Any]] = {}  # handle -> values last trained with
        self._opened: set[str] = set()
        self._ended: set[str] = set()
        self._exploits: dict[str, list[_Pending]] = {}  # target -> records not yet queued
        # Records handed to the writer that the lineage file may not show yet: the writer
        # appends them from its own thread, and a driver killed first would lose them.
        self._queued: list[LineageRecord] = []
        self._seq = 0
        self._rolled_back = False  # set_state moved records out of the lineage file
        self._lock = threading.Lock()
        # The experiment's stopper: when its population-wide rule ended the run, the
        # trials still running were stopped by design, not killed.
        self.stopper: Any = None

    # --- plumbing ---------------------------------------------------------------------
    @property
    def writer(self) -> StoreWriter:
        if self._writer is None:
            self._writer = StoreWriter(
                self.target.uri,
                self.target.experiment,
                artifact_root=self.target.artifact_root,
                lineage_file=self.target.results_dir / LINEAGE_FILE,
                runs=self._runs,
                on_event=self._event,
            )
        return self._writer

    def _event(self, message: str) -> None:
        if self._on_event is not None:
            self._on_event(message)
        else:
            print(f"[workbench] {message}", flush=True)

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles callbacks with the experiment; threads and clients do not pickle.
        state = dict(self.__dict__)
        state["_writer"] = None
        state["_lock"] = None
        state["_on_event"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_last_values", {})  # pickled before final/* params
        self.__dict__.setdefault("_rolled_back", False)
        self._lock = threading.Lock()

    def get_state(self) -> dict[str, Any]:
        runs = self._writer.run_ids() if self._writer is not None else dict(self._runs)
        # (Read only while some are queued: a snapshot follows trial checkpoints.)
        _, written = self._lineage_file() if self._queued else (set(), set())
        with self._lock:
            pending = {k: [p.to_dict() for p in v] for k, v in self._exploits.items() if v}
            # Queued to the writer, not in the file yet: as good as pending (seen in the
            # killed-driver drill: a record queued just before a snapshot and a kill was in
            # neither, and the lineage lacked its number).
            self._queued = [r for r in self._queued if (r.target, r.time) not in written]
            for record in self._queued:
                pending.setdefault(record.target, []).append(record.to_dict())
            next_seq = self._seq
        # Exploits decided but not yet written (their target had not restarted): a driver
        # killed now would lose them, and their numbers would be a gap in the lineage.
        # `next_seq`: every exploit numbered below it is in the file or pending here, and
        # none above it is in the trials this snapshot holds (set_state).
        return {
            "version": 1,
            "key": self.target.key,
            "runs": runs,
            "pending": pending,
            "next_seq": next_seq,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        # Another key: a copy of the folder in another place of the same store, whose
        # runs are the original's (or a snapshot from before keys were relative).
        if state.get("key") not in (self.target.key, *self.target.legacy_keys):
            return
        self._runs = dict(state.get("runs", {}))
        next_seq = state.get("next_seq")
        if isinstance(next_seq, int):
            self._roll_back_lineage(next_seq)
        # The exploits the snapshot's trials had taken but the lineage did not yet show:
        # every target restarts from its checkpoint now, so each is written with the
        # target's first result, under its own number (one the killed driver wrote after
        # the snapshot is not written twice; a number the file holds already is given
        # anew after the file's).
        numbers, written = self._lineage_file()
        with self._lock:
            saved = [r for records in dict(state.get("pending") or {}).values() for r in records]
            renumber = []
            for data in sorted(saved, key=lambda r: int(r.get("seq", 0))):
                if (data.get("target"), data.get("time")) in written:
                    continue
                numbered = isinstance(data.get("seq"), int) and data["seq"] not in numbers
                entry = _Pending(LineageRecord.from_dict({**data, "seq": data.get("seq", -1)}))
                if numbered:
                    numbers.add(entry.record.seq)
                else:
                    renumber.append(entry)
                self._exploits.setdefault(entry.record.target, []).append(entry)
            self._seq = max(
                self._seq,
                max(numbers, default=-1) + 1,
                next_seq if isinstance(next_seq, int) else 0,
            )
            for entry in renumber:
                entry.record = dataclasses.replace(entry.record, seq=self._seq)
                self._seq += 1
        if self._writer is not None:
            self._writer.add_runs(self._runs)

    def _roll_back_lineage(self, next_seq: int) -> None:
        """Moves the records of exploits numbered from ``next_seq`` on out of the lineage
        file. The killed driver decided them after the snapshot this resume restores,
        and every trial restarts from that snapshot's checkpoint, from before each of
        them: a record left in would describe a clone the population no longer holds
        (and the pending ones it lost would be gaps)."""
        path = self.target.results_dir / LINEAGE_FILE
        if not path.exists():
            return
        kept: list[str] = []
        rolled_back: list[str] = []
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            try:
                seq = int(json.loads(line)["seq"])
            except (ValueError, TypeError, KeyError, AttributeError):
                kept.append(line)
                continue
            (rolled_back if seq >= next_seq else kept).append(line)
        if not rolled_back:
            return
        with (self.target.results_dir / LINEAGE_ROLLED_BACK_FILE).open("a") as f:
            f.write("".join(line + "\n" for line in rolled_back))
        write_atomic(path, "".join(line + "\n" for line in kept))
        self._rolled_back = True
        self._event(
            f"lineage: {len(rolled_back)} exploit(s) decided after the last snapshot are "
            f"rolled back with it (the trials restart from it); moved to "
            f"{LINEAGE_ROLLED_BACK_FILE}"
        )

    # --- Tune hooks --------------------------------------------------------------------
    def setup(
        self,
        stop: Any = None,
        num_samples: int | None = None,
        total_num_samples: int | None = None,
        **info: Any,
    ) -> None:
        self.target.results_dir.mkdir(parents=True, exist_ok=True)
        # Numbered on from the lineage file: records the last driver queued but never
        # wrote (it was killed) leave no gap.
        self._seq = max(self._seq, max(self._lineage_file()[0], default=-1) + 1)
        spool = self.target.results_dir / SPOOL_FILE
        if spool.exists():
            ops = [op_from_json(line) for line in spool.read_text().splitlines() if line.strip()]
            for op in ops:
                self.writer.put(op)
            spool.unlink()
            self._event(f"writing {len(ops)} MLflow operations left over from the last run")
        self._open_parent()
        self.writer.start()

    def _lineage_file(self) -> tuple[set[int], set[tuple[Any, Any]]]:
        """The exploit numbers the lineage file holds, and the (target, time) of each of
        its records."""
        path = self.target.results_dir / LINEAGE_FILE
        numbers: set[int] = set()
        written: set[tuple[Any, Any]] = set()
        if not path.exists():
            return numbers, written
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                record = json.loads(line)
                numbers.add(int(record["seq"]))
                written.add((record.get("target"), record.get("time")))
        return numbers, written

    def _open_parent(self) -> None:
        if PARENT in self._opened:
            return
        self._opened.add(PARENT)
        self.writer.put(
            OpenRun(
                handle=PARENT,
                name=self.target.population,
                key=self.target.key,
                parent=None,
                tags={
                    **self.target.run_tags,
                    ROLE_TAG: "population",
                    RESULTS_DIR_TAG: self.target.results_dir_tag or str(self.target.results_dir),
                },
                params=self.target.parent_params,
            )
        )

    def _trial_key(self, handle: str) -> str:
        return f"{self.target.key}::{handle}"

    def _searched(self, config: dict[str, Any]) -> dict[str, Any]:
        return {name: config.get(key) for key, name in self.target.hyperparameters.items()}

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._open_parent()
        handle = trial.trial_id
        name = trial_name(trial)
        self._trial_names[handle] = name
        if handle in self._opened and handle not in self._ended:
            return
        first = handle not in self._opened
        self._opened.add(handle)
        self._ended.discard(handle)
        searched = self._searched(trial.config)
        params = {name_: _param(v) for name_, v in searched.items()}
        params["trial_id"] = handle
        # Opening a run the store already has (a restore, a retry) only marks it RUNNING.
        self.writer.put(
            OpenRun(
                handle=handle,
                name=name,
                key=self._trial_key(handle),
                parent=PARENT,
                tags={**self.target.run_tags, ROLE_TAG: "trial", TRIAL_ID_TAG: handle},
                params=params,
            )
        )
        if not first:
            return
        categorical = {f"hp/{n}": _param(v) for n, v in searched.items() if hp_metric(v) is None}
        if categorical:
            self.writer.put(Tags(handle, categorical))

    def on_trial_restore(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.on_trial_start(iteration, trials, trial)

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        handle = trial.trial_id
        if handle not in self._opened:
            self.on_trial_start(iteration, trials, trial)
        metrics = numeric_metrics(result, self._keep)
        # The values this result was trained with: the trainable's config, not the
        # trial's (PBT may already have changed that for the next iteration).
        used = result.get("config")
        values = self._searched(used if isinstance(used, dict) else trial.config)
        self._last_values[handle] = values
        for name, value in values.items():
            number = hp_metric(value)
            if number is not None:
                metrics[f"hp/{name}"] = number
        iteration = int(metrics.get(STEP_METRIC, 0))
        # Exploits whose restore this result shows: written before it, so their step
        # is the last one trained with the old values.
        self._queue_exploits(handle, restored_iteration=iteration - 1)
        self.writer.put(Result(handle, metrics, int(time.time() * 1000)))
        fallback = result.get(CHECKPOINT_FALLBACK_KEY)  # a damaged checkpoint was skipped
        if isinstance(fallback, str) and fallback:
            self.writer.put(Tags(handle, {CHECKPOINT_FALLBACK_TAG: fallback[:4000]}))
        # Exploits decided on this very result: the trial restores before its next one.
        for entry in self._exploits.get(handle, []):
            entry.armed = True

    def on_exploit(self, decision: ExploitDecision) -> None:
        """Lineage listener (ExploitRecorder): runs inside the scheduler's decision,
        before the result that triggered it reaches on_trial_result."""
        with self._lock:
            seq = self._seq
            self._seq += 1
        record = decision.renamed(self.target.hyperparameters).numbered(seq)
        entry = _Pending(record, armed=not decision.decided_on_own_result)
        self._exploits.setdefault(record.target, []).append(entry)

    def _queue_exploits(self, handle: str, restored_iteration: int | None = None) -> None:
        """Queues the target's exploits that have taken effect (all of them at its end)."""
        waiting = []
        for entry in self._exploits.pop(handle, []):
            if restored_iteration is not None and not entry.armed:
                waiting.append(entry)
                continue
            record = entry.record
            # Names known by now: a resumed driver can decide an exploit before the
            # donor's on_trial_start, and the record would name it by its id. The
            # iteration the target continued from: the donor checkpoint's (a record the
            # killed driver had queued already keeps the one it saw).
            record = dataclasses.replace(
                record,
                target_name=self._trial_names.get(record.target, record.target_name),
                source_name=self._trial_names.get(record.source, record.source_name),
                restored_iteration=(
                    restored_iteration
                    if record.restored_iteration is None
                    else record.restored_iteration
                ),
            )
            with self._lock:
                self._queued.append(record)
            self.writer.put(Lineage(handle, record.to_dict()))
        if waiting:
            self._exploits[handle] = waiting

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._end(trial, "FINISHED")

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """A failure Tune retries (failure.max_failures): counted and described on the
        run, which goes on (the retry's results continue its steps)."""
        self.writer.put(Tags(trial.trial_id, _failure_tags(trial, LAST_FAILURE_TAG)))

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.writer.put(Tags(trial.trial_id, _failure_tags(trial, ERROR_TAG)))
        self._end(trial, "FAILED")

    def _end(self, trial: Any, status: str) -> None:
        handle = trial.trial_id
        self._queue_exploits(handle)
        if handle in self._opened and handle not in self._ended:
            self._ended.add(handle)
            if status == "FINISHED":
                # The values its final policy trained with, as params beside the initial
                # ones (hp/* metrics hold the schedule): once, when the trial is done.
                final = self._last_values.get(handle) or self._searched(trial.config)
                params = {f"{FINAL_PARAM_PREFIX}{name}": _param(v) for name, v in final.items()}
                self.writer.put(Params(handle, params))
            self.writer.put(EndRun(handle, status, int(time.time() * 1000)))

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        for handle in list(self._exploits):
            self._queue_exploits(handle)
        statuses = {t.trial_id: t.status for t in trials}
        by_rule = self._ended_by_rule()
        # Trials Tune did not report complete or failed: still running, paused or
        # pending when the experiment ended. Tune's own status is no guide here: on
        # Ctrl-C it marks some TERMINATED while stopping them (and saves them as
        # resumable). They were stopped by the population's own rule (finished), or
        # interrupted (killed; a resume reopens the run).
        unfinished = self._opened - self._ended - {PARENT}
        for handle in unfinished:
            status = "FINISHED" if by_rule else "KILLED"
            self._ended.add(handle)
            if by_rule:
                self.writer.put(Tags(handle, {STOPPED_BY_TAG: by_rule}))
            self.writer.put(EndRun(handle, status, int(time.time() * 1000)))
        if by_rule:
            self._end_left_open(trials, by_rule)
        # Trials this driver never started: cut short, unless they ended before it (the
        # finished trials of a resumed population).
        never_started = any(
            t.trial_id not in self._opened and t.status not in ("TERMINATED", "ERROR")
            for t in trials
        )
        interrupted = not by_rule and (bool(unfinished) or never_started)
        all_failed = bool(statuses) and all(s == "ERROR" for s in statuses.values())
        parent_status = "KILLED" if interrupted else "FAILED" if all_failed else "FINISHED"
        self.finish(parent_status, trials)

    def _end_left_open(self, trials: list[Any], by_rule: str) -> None:
        """A resumed population the rule ended before some trials restarted (a budget
        that ran out while their actors started): their runs, which the interrupted
        session left KILLED, are finished by that rule too. Runs that ended in an
        earlier session keep their status (the writer checks)."""
        now = int(time.time() * 1000)
        for trial in trials:
            handle = trial.trial_id
            if handle in self._opened or trial.status == "ERROR":
                continue
            self._ended.add(handle)
            final = self._last_values.get(handle) or self._searched(trial.config)
            params = {f"{FINAL_PARAM_PREFIX}{name}": _param(v) for name, v in final.items()}
            self.writer.put(
                EndLeftOpen(
                    handle,
                    self._trial_key(handle),
                    "FINISHED",
                    now,
                    tags={STOPPED_BY_TAG: by_rule},
                    params=params,
                )
            )

    def _ended_by_rule(self) -> str:
        """Why the experiment ended early by design ('' when it did not)."""
        if self.stopper is not None and getattr(self.stopper, "return_reached", lambda: False)():
            return "a trial reached the population's return target"
        if self.stopper is not None and getattr(self.stopper, "budget_spent", lambda: False)():
            return "the experiment's env-step budget"
        # Counted across a resume's sessions by the stopper.
        if self.stopper is not None and getattr(self.stopper, "wall_budget_ended", lambda: False)():
            return "the experiment's wall-clock budget"
        return ""

    def abandon(self, timeout_s: float = 10.0) -> None:
        """The driver stops in the middle of Tune's loop (Ctrl-C twice): every run still
        open ends KILLED (a resume reopens it), and what is queued is written within
        ``timeout_s`` or spooled. No plots: the user asked to stop now."""
        if self._writer is None and not (self._opened - self._ended):
            return  # finished already, or nothing was opened
        now = int(time.time() * 1000)
        for handle in sorted(self._opened - self._ended - {PARENT}):
            self._ended.add(handle)
            self.writer.put(EndRun(handle, "KILLED", now))
        self.finish(
            "KILLED", artifacts=False, timeout_s=min(timeout_s, self.target.flush_timeout_s)
        )

    def finish(
        self,
        parent_status: str,
        trials: Iterable[Any] = (),
        *,
        artifacts: bool = True,
        timeout_s: float | None = None,
    ) -> None:
        """Artifacts of the population, its end status, then everything flushed."""
        timeout_s = self.target.flush_timeout_s if timeout_s is None else timeout_s
        writer = self.writer
        writer.start()
        if artifacts and writer.flush(timeout_s):
            for path in self._population_artifacts():
                writer.put(Artifact(PARENT, str(path)))
        writer.put(EndRun(PARENT, parent_status, int(time.time() * 1000)))
        self._ended.add(PARENT)
        left = writer.close(timeout_s)
        if left:
            spool = self.target.results_dir / SPOOL_FILE
            with spool.open("a") as f:
                for op in left:
                    f.write(op_to_json(op) + "\n")
            self._event(
                f"MLflow store {self.target.uri} did not answer for "
                f"{timeout_s:.0f} s: {len(left)} operations saved to {spool}; "
                "`workbench resume` writes them"
            )
        self._runs = writer.run_ids()
        self._writer = None

    def _population_artifacts(self) -> list[Path]:
        """The experiment file and the PNGs, rendered from what the store now holds."""
        out: list[Path] = []
        resolved = self.target.results_dir / RESOLVED_FILE
        if resolved.exists():
            out.append(resolved)
        if self._rolled_back:  # the parent's copy of the lineage still has those records
            for name in (LINEAGE_FILE, LINEAGE_ROLLED_BACK_FILE):
                if (self.target.results_dir / name).exists():
                    out.append(self.target.results_dir / name)
        if self.target.render_plots is None:
            return out
        try:
            out.extend(
                self.target.render_plots(
                    self.writer.client(), self.writer.run_ids(), self.target.results_dir
                )
            )
        except Exception as err:  # plots must never fail a population
            self._event(f"could not render the population's plots: {type(err).__name__}: {err}")
        return out


def _failure_tags(trial: Any, text_tag: str) -> dict[str, str]:
    """How often the trial has failed, and its error text under `text_tag`."""
    tags = {FAILURES_TAG: str(int(getattr(trial, "num_failures", 0) or 0))}
    text = _error_text(trial)
    if text:
        tags[text_tag] = text
    return tags


def _error_text(trial: Any) -> str:
    path = getattr(trial, "error_file", None)
    if path:
        with contextlib.suppress(OSError):
            return Path(path).read_text()[-4000:]
    return str(getattr(trial, "error_msg", "") or "")[-4000:]
