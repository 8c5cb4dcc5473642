"""MLflow tracking that stays correct under PBT, survives restores and store outages.

Ray's MLflowLoggerCallback logs every config key as a param (PBT then changes one and
MLflow raises), makes one call per metric (1-2.5 s per result on sqlite) and opens a
second run per trial after a restore. This module does it differently:

* one parent run per population, one nested child run per trial, found again by a
  tag (``workbench.key``) so a restored population continues the same runs;
* params are the *initial* hyperparameters (immutable in MLflow); the current value
  of every searched hyperparameter is a step metric ``hp/<name>`` so that a PBT
  schedule is a curve;
* each result becomes one ``log_batch`` call, written by a background thread that
  merges whatever queued up, so Tune's loop never waits on the store;
* the step of a run only grows: it is the run's result count, continued from the
  store's last step after a restore, whatever PBT does to ``training_iteration``;
* exploits are lineage records: appended to ``lineage.jsonl`` (results folder and the
  parent run's artifacts) and tagged on the child run; a line is appended when its
  exploit takes effect (the target's next result), so ``seq``, not line order, is
  the order the scheduler decided them in;
* when the store does not answer (server down, database locked) writes wait in the
  queue and are retried with back-off; at the end of the run whatever still could
  not be written is spooled to the results folder and written by the next resume.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import math
import numbers
import os
import posixpath
import re
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ray.tune import Callback
from ray.tune.utils import flatten_dict

logger = logging.getLogger(__name__)

PARENT = "__population__"
KEY_TAG = "workbench.key"
ROLE_TAG = "workbench.role"
LINEAGE_FILE = "lineage.jsonl"
SPOOL_FILE = "mlflow_pending.jsonl"
STEP_METRIC = "training_iteration"  # logged with every result; its history gives the last step

# What a person looks at: return, episode length, env steps, throughput, timers, losses.
CURATED_METRICS: tuple[str, ...] = (
    "training_iteration",
    "time_this_iter_s",
    "time_total_s",
    "num_env_steps_sampled_lifetime",
    "env_runners/episode_return_mean",
    "env_runners/episode_return_max",
    "env_runners/episode_return_min",
    "env_runners/episode_len_mean",
    "env_runners/num_episodes",
    "env_runners/num_env_steps_sampled_lifetime_throughput/throughput_since_last_reduce",
    "env_runners/sample",
    "env_runners/env_step_timer",
    "env_runners/rlmodule_inference_timer",
    "evaluation/env_runners/episode_return_mean",
    "evaluation/env_runners/episode_len_mean",
    "learners/__all_modules__/num_env_steps_trained_lifetime",
    "learners/__all_modules__/num_env_steps_trained_throughput",
    "learners/__all_modules__/learner_thread_update_timer",
    "learners/*/policy_loss",
    "learners/*/vf_loss",
    "learners/*/total_loss",
    "learners/*/entropy",
    "learners/*/mean_kl_loss",
    "learners/*/curr_kl_coeff",
    "learners/*/curr_entropy_coeff",
    "learners/*/vf_explained_var",
    "learners/*/default_optimizer_learning_rate",
    "learners/*/diff_num_grad_updates_vs_sampler_policy",
    "learners/*/gradients_default_optimizer_global_norm",
    "learners/*/qf_loss",
    "learners/*/actor_loss",
    "learners/*/alpha_loss",
    "learners/*/alpha_value",
    "learners/*/td_error_mean",
    "learners/*/mean_IS",
    "timers/*",
    "fault_tolerance/*",
    "perf/*",
    "workbench/*",
)
# Keys that are numbers but not metrics.
_NOT_METRICS = ("pid", "timestamp", "done", "config/*", "trial_id", "node_ip", "hostname")


def default_tracking_uri(storage_root: Path) -> str:
    """MLflow's own default backend, sqlite, in the storage folder next to the results."""
    return f"sqlite:///{(storage_root / 'mlflow.db').resolve()}"


def tracking_uri_for(uri: str | None, storage_root: Path) -> str:
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(storage_root)


class MetricFilter:
    """The result keys a run logs: 'curated', 'all' or glob patterns (picklable: Tune
    pickles its callbacks)."""

    def __init__(self, spec: str | list[str]) -> None:
        patterns: tuple[str, ...]
        if spec == "all":
            patterns = ("*",)
        elif spec == "curated":
            patterns = CURATED_METRICS
        else:
            patterns = (*spec, STEP_METRIC)
        self.exact = frozenset(p for p in patterns if not any(c in p for c in "*?["))
        self.globs = tuple(p for p in patterns if p not in self.exact)
        # Results carry the same keys every iteration: decide each key once.
        self._decided: dict[str, bool] = {}

    def __call__(self, key: str) -> bool:
        decided = self._decided.get(key)
        if decided is None:
            decided = not any(fnmatch.fnmatchcase(key, p) for p in _NOT_METRICS) and (
                key in self.exact or any(fnmatch.fnmatchcase(key, p) for p in self.globs)
            )
            self._decided[key] = decided
        return decided


def metric_filter(spec: str | list[str]) -> MetricFilter:
    return MetricFilter(spec)


_BAD_NAME = re.compile(r"[^/\w.\- :]")


def metric_name(key: str) -> str:
    """A result key as an MLflow name: characters MLflow refuses become '_' (a custom
    metric with one would otherwise make the store refuse the whole result)."""
    name = _BAD_NAME.sub("_", key)
    return posixpath.normpath(name).lstrip("/") if ".." in name or "//" in name else name


def numeric_metrics(result: dict[str, Any], keep: Callable[[str], bool]) -> dict[str, float]:
    flat = flatten_dict(result, delimiter="/")
    out: dict[str, float] = {}
    for key, value in flat.items():
        # numbers.Real: RLlib reports many means as numpy.float32.
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            continue
        if keep(key):
            out[metric_name(key)] = float(value)
    return out


def hp_metric(value: Any) -> float | None:
    """A hyperparameter's value as a metric (numbers only; categories go to tags)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return None


def _param(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:6000]


# --- the operations the writer applies, in order --------------------------------------
@dataclass
class OpenRun:
    handle: str
    name: str
    key: str
    parent: str | None
    tags: dict[str, str]
    params: dict[str, str]


@dataclass
class Result:
    handle: str
    metrics: dict[str, float]
    timestamp_ms: int


@dataclass
class Tags:
    handle: str
    tags: dict[str, str]


@dataclass
class Lineage:
    """An exploit: gets the target run's current step, then goes to lineage.jsonl."""

    target: str
    record: dict[str, Any]


@dataclass
class EndRun:
    handle: str
    status: str  # FINISHED, FAILED, KILLED
    end_ms: int


@dataclass
class Artifact:
    handle: str
    path: str
    folder: str | None = None


Op = OpenRun | Result | Tags | Lineage | EndRun | Artifact
_OP_TYPES: dict[str, type] = {
    t.__name__: t for t in (OpenRun, Result, Tags, Lineage, EndRun, Artifact)
}


def op_to_json(op: Op) -> str:
    return json.dumps({"op": type(op).__name__, **asdict(op)})


def op_from_json(line: str) -> Op:
    data = json.loads(line)
    kind = _OP_TYPES[data.pop("op")]
    op: Op = kind(**data)
    return op


class StoreUnavailable(Exception):
    """The store did not answer; the operation stays queued."""


def _is_permanent(err: Exception) -> bool:
    """A request the store understood and refused: retrying cannot help."""
    from mlflow.exceptions import MlflowException

    if not isinstance(err, MlflowException):
        return False
    code = getattr(err, "error_code", "")
    text = str(err).lower()
    transient = ("locked", "connection", "max retries", "timed out", "unavailable", "refused")
    if any(t in text for t in transient):
        return False
    return code in (
        "INVALID_PARAMETER_VALUE",
        "RESOURCE_ALREADY_EXISTS",
        "RESOURCE_DOES_NOT_EXIST",
        "BAD_REQUEST",
    )


class StoreWriter:
    """Applies queued operations to an MLflow store from one background thread.

    Consecutive results and tags are merged into one ``log_batch`` per run per pass,
    so a slow store costs fewer, larger calls instead of a stall in Tune's loop.
    """

    MAX_METRICS = 1000  # MLflow's log_batch limits
    MAX_TAGS = 100
    MAX_PARAMS = 100

    def __init__(
        self,
        uri: str,
        experiment: str,
        *,
        artifact_root: Path | None = None,
        lineage_file: Path | None = None,
        runs: dict[str, str] | None = None,
        max_backoff_s: float = 10.0,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self.uri = uri
        self.experiment_name = experiment
        self.artifact_root = artifact_root
        self.lineage_file = lineage_file
        self.runs: dict[str, str] = dict(runs or {})  # handle -> MLflow run id
        self.max_backoff_s = max_backoff_s
        self.on_event = on_event or (lambda message: warnings.warn(message, stacklevel=2))
        self._steps: dict[str, int] = {}  # handle -> last step written
        self._queue: deque[Op] = deque()
        self._cv = threading.Condition()
        self._stop = False
        self._busy = False
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._experiment_id: str | None = None
        self._lineage_dirty = False
        self._down_since: float | None = None
        self._down_reason = ""
        self.written_results = 0
        self.failed_calls = 0

    # --- the producer side ----------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="workbench-mlflow", daemon=True)
            self._thread.start()

    def put(self, op: Op) -> None:
        with self._cv:
            self._queue.append(op)
            self._cv.notify()

    def pending(self) -> int:
        with self._cv:
            return len(self._queue) + (1 if self._busy else 0)

    def flush(self, timeout_s: float) -> bool:
        """Waits until everything queued is written; False if the store stayed away."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            self._cv.notify()
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(min(left, 0.2))
        return True

    def close(self, timeout_s: float) -> list[Op]:
        """Flushes, stops the thread and returns what could not be written."""
        self.start()
        self.flush(timeout_s)
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        with self._cv:
            left = list(self._queue)
            self._queue.clear()
            self._stop = False
        return left

    def run_ids(self) -> dict[str, str]:
        with self._cv:
            return dict(self.runs)

    # --- the writer thread ---------------------------------------------------------
    def _loop(self) -> None:
        backoff = 0.5
        while True:
            with self._cv:
                while not self._queue and not self._stop:
                    self._cv.wait()
                if not self._queue:
                    return
                self._busy = True
                batch = list(self._queue)
            left, err = self._apply(batch)
            if err is None and self._down_since is not None:
                self._came_back()
            elif err is not None:
                self._went_down(err)
            with self._cv:
                for _ in range(len(batch)):
                    self._queue.popleft()
                self._queue.extendleft(reversed(left))
                self._busy = False
                self._cv.notify_all()
                stopping = self._stop
            if err is None:
                backoff = 0.5
                continue
            if stopping:
                return
            time.sleep(backoff)
            backoff = min(backoff * 2, self.max_backoff_s)

    def _went_down(self, err: Exception) -> None:
        self.failed_calls += 1
        reason = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
        if self._down_since is None:
            self._down_since = time.monotonic()
            self._down_reason = reason
            self.on_event(
                f"MLflow store {self.uri} is not answering ({reason}); results are kept and "
                "written when it answers again"
            )

    def _came_back(self) -> None:
        assert self._down_since is not None
        away = time.monotonic() - self._down_since
        self._down_since = None
        self.on_event(
            f"MLflow store {self.uri} answers again after {away:.0f} s; buffered results written"
        )

    def client(self) -> Any:
        if self._client is None:
            from mlflow.tracking import MlflowClient

            # The writer retries with its own back-off; MLflow's HTTP client would
            # otherwise retry for minutes inside one call.
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def experiment_id(self) -> str:
        if self._experiment_id is None:
            client = self.client()
            found = client.get_experiment_by_name(self.experiment_name)
            if found is not None:
                self._experiment_id = str(found.experiment_id)
            else:
                location = self.artifact_root.resolve().as_uri() if self.artifact_root else None
                try:
                    self._experiment_id = str(
                        client.create_experiment(self.experiment_name, artifact_location=location)
                    )
                except Exception:
                    # Another population created it between our two calls.
                    again = client.get_experiment_by_name(self.experiment_name)
                    if again is None:
                        raise
                    self._experiment_id = str(again.experiment_id)
        return self._experiment_id

    def _apply(self, batch: list[Op]) -> tuple[list[Op], Exception | None]:
        """Applies ops in order until the store fails; returns the ops left and the error.

        A request the store refuses for good (a malformed value) is dropped with a
        warning instead of blocking everything behind it.
        """
        i = 0
        while i < len(batch):
            op = batch[i]
            group: list[Result | Tags] = []
            while i < len(batch):
                candidate = batch[i]
                if not isinstance(candidate, (Result, Tags)) or candidate.handle not in self.runs:
                    break
                group.append(candidate)
                i += 1
            try:
                if group:
                    self._write_merged(group)
                    continue
                self._apply_one(op)
                i += 1
            except Exception as err:
                if group:
                    done = {id(o) for o in getattr(err, "written", [])}
                    unwritten = [o for o in group if id(o) not in done]
                    if not _is_permanent(err):
                        return [*unwritten, *batch[i:]], err
                    try:
                        self._write_each(unwritten)
                    except Exception as again:
                        done |= {id(o) for o in getattr(again, "written", [])}
                        return [o for o in unwritten if id(o) not in done] + batch[i:], again
                    continue
                if not _is_permanent(err):
                    return batch[i:], err
                else:
                    logger.warning("MLflow refused %s: %s", type(op).__name__, err)
                    i += 1
        try:
            if self._lineage_dirty:
                self._upload_lineage()
        except Exception as err:
            return [], err
        return [], None

    def _write_each(self, group: list[Result | Tags]) -> None:
        """One op per call, dropping those the store refuses for good."""
        written: list[Result | Tags] = []
        for op in group:
            try:
                self._write_merged([op])
                written.append(op)
            except Exception as err:
                if not _is_permanent(err):
                    err.written = written  # type: ignore[attr-defined]
                    raise
                written.append(op)  # dropped: never retried
                logger.warning("MLflow refused a %s of %s: %s", type(op).__name__, op.handle, err)

    def _apply_one(self, op: Op) -> None:
        client = self.client()
        if isinstance(op, OpenRun):
            self._open(op)
        elif isinstance(op, Lineage):
            self._lineage(op)
        elif op.handle not in self.runs:
            # Its OpenRun was refused for good: nothing to attach this to.
            logger.warning("MLflow: dropping %s for unknown run %s", type(op).__name__, op.handle)
        elif isinstance(op, (Result, Tags)):
            self._write_merged([op])
        elif isinstance(op, EndRun):
            client.set_terminated(self.runs[op.handle], status=op.status, end_time=op.end_ms)
        elif isinstance(op, Artifact):
            client.log_artifact(self.runs[op.handle], op.path, op.folder)

    def _open(self, op: OpenRun) -> None:
        from mlflow.entities import Param

        client = self.client()
        if op.handle in self.runs:
            run_id = self.runs[op.handle]
            info = client.get_run(run_id).info
            if info.status != "RUNNING":
                client.update_run(run_id, status="RUNNING")
            return
        exp_id = self.experiment_id()
        found = client.search_runs(
            [exp_id], filter_string=f"tags.`{KEY_TAG}` = '{op.key}'", max_results=1
        )
        if found:
            run_id = found[0].info.run_id
            if found[0].info.status != "RUNNING":
                client.update_run(run_id, status="RUNNING")
        else:
            tags = {KEY_TAG: op.key, "mlflow.runName": op.name, **op.tags}
            if op.parent is not None:
                tags["mlflow.parentRunId"] = self.runs[op.parent]
            run = client.create_run(exp_id, run_name=op.name, tags=tags)
            run_id = run.info.run_id
            items = list(op.params.items())
            for i in range(0, len(items), self.MAX_PARAMS):
                client.log_batch(
                    run_id, params=[Param(k, v) for k, v in items[i : i + self.MAX_PARAMS]]
                )
            self._steps[op.handle] = 0
        with self._cv:
            self.runs[op.handle] = run_id

    def _last_step(self, handle: str) -> int:
        if handle not in self._steps:
            history = self.client().get_metric_history(self.runs[handle], STEP_METRIC)
            self._steps[handle] = max((m.step for m in history), default=0)
        return self._steps[handle]

    def _write_merged(self, ops: list[Result | Tags]) -> None:
        """Writes results and tags in as few log_batch calls as MLflow's limits allow.

        A call holds whole results, and a run's steps advance only with a call that
        succeeded: when a call fails, ``err.written`` lists the ops already in the
        store, so a retry writes the others and nothing twice.
        """
        from mlflow.entities import Metric

        by_run: dict[str, list[Result | Tags]] = {}
        for op in ops:
            by_run.setdefault(op.handle, []).append(op)
        written: list[Result | Tags] = []
        try:
            for handle, run_ops in by_run.items():
                step = self._last_step(handle)
                chunk: list[Result | Tags] = []
                metrics: list[Any] = []
                tags: dict[str, str] = {}
                for op in run_ops:
                    size = len(op.metrics) if isinstance(op, Result) else 0
                    if chunk and (
                        len(metrics) + size > self.MAX_METRICS
                        or (isinstance(op, Tags) and len(tags) + len(op.tags) > self.MAX_TAGS)
                    ):
                        self._send(handle, metrics, tags, step)
                        written.extend(chunk)
                        chunk, metrics, tags = [], [], {}
                    if isinstance(op, Tags):
                        tags.update(op.tags)
                    else:
                        step += 1
                        metrics.extend(
                            Metric(k, v, op.timestamp_ms, step)
                            for k, v in op.metrics.items()
                            if not math.isinf(v)
                        )
                    chunk.append(op)
                if chunk:
                    self._send(handle, metrics, tags, step)
                    written.extend(chunk)
        except Exception as err:
            err.written = written  # type: ignore[attr-defined]
            raise
        finally:
            self.written_results += sum(isinstance(o, Result) for o in written)

    def _send(self, handle: str, metrics: list[Any], tags: dict[str, str], step: int) -> None:
        """One log_batch (more only for a single op over MLflow's limits); then the run's
        steps up to ``step`` are in the store."""
        from mlflow.entities import RunTag

        tag_items = [RunTag(k, v[:8000]) for k, v in tags.items()]
        calls = max(len(metrics), len(tag_items), 1)
        for i in range(0, calls, self.MAX_METRICS):
            self.client().log_batch(
                self.runs[handle],
                metrics=metrics[i : i + self.MAX_METRICS],
                tags=tag_items[: self.MAX_TAGS] if i == 0 else [],
            )
        self._steps[handle] = step

    def _lineage(self, op: Lineage) -> None:
        record = dict(op.record)
        if op.target in self.runs:
            record["step"] = self._last_step(op.target)
        if self.lineage_file is not None:
            with self.lineage_file.open("a") as f:
                f.write(json.dumps(record, default=str) + "\n")
            self._lineage_dirty = True
        if op.target in self.runs:
            from mlflow.entities import RunTag

            self.client().log_batch(
                self.runs[op.target],
                tags=[
                    RunTag("workbench.cloned_from", str(record.get("source_name", ""))),
                    RunTag("workbench.last_exploit", json.dumps(record, default=str)[:8000]),
                ],
            )

    def _upload_lineage(self) -> None:
        if self.lineage_file is not None and PARENT in self.runs and self.lineage_file.exists():
            self.client().log_artifact(self.runs[PARENT], str(self.lineage_file))
        self._lineage_dirty = False


@dataclass
class TrackingTarget:
    """Where a population's runs go."""

    uri: str
    experiment: str
    population: str  # the parent run's name
    key: str  # identifies the population across restores
    results_dir: Path
    artifact_root: Path | None
    metrics: str | list[str] = "curated"
    flush_timeout_s: float = 120.0
    parent_params: dict[str, str] = field(default_factory=dict)
    hyperparameters: dict[str, str] = field(default_factory=dict)  # tune key -> public name
    time_budget_s: float | None = None  # stop.wall_time_s: ending there is finishing


class MlflowTracker(Callback):  # type: ignore[misc]
    """The Tune callback (driver side) that writes a population to MLflow."""

    def __init__(self, target: TrackingTarget, *, on_event: Callable[[str], None] | None = None):
        self.target = target
        self._on_event = on_event
        self._keep = metric_filter(target.metrics)
        self._writer: StoreWriter | None = None
        self._runs: dict[str, str] = {}  # restored state: handle -> run id
        self._trial_names: dict[str, str] = {}
        self._opened: set[str] = set()
        self._ended: set[str] = set()
        self._exploits: dict[str, list[dict[str, Any]]] = {}  # target -> records not yet queued
        self._seq = 0
        self._lock = threading.Lock()
        self._started = time.monotonic()
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
        self._lock = threading.Lock()

    def get_state(self) -> dict[str, Any]:
        runs = self._writer.run_ids() if self._writer is not None else dict(self._runs)
        return {"version": 1, "key": self.target.key, "runs": runs, "seq": self._seq}

    def set_state(self, state: dict[str, Any]) -> None:
        if state.get("key") != self.target.key:
            return
        self._runs = dict(state.get("runs", {}))
        # The lineage file, not this snapshot, numbers the next exploit (see setup).
        if self._writer is not None:
            with self._writer._cv:
                self._writer.runs.update(self._runs)

    # --- Tune hooks --------------------------------------------------------------------
    def setup(
        self,
        stop: Any = None,
        num_samples: int | None = None,
        total_num_samples: int | None = None,
        **info: Any,
    ) -> None:
        self.target.results_dir.mkdir(parents=True, exist_ok=True)
        self._started = time.monotonic()
        # Numbered on from the lineage file: records the last driver queued but never
        # wrote (it was killed) leave no gap.
        self._seq = self._lineage_lines()
        spool = self.target.results_dir / SPOOL_FILE
        if spool.exists():
            ops = [op_from_json(line) for line in spool.read_text().splitlines() if line.strip()]
            for op in ops:
                self.writer.put(op)
            spool.unlink()
            self._event(f"writing {len(ops)} MLflow operations left over from the last run")
        self._open_parent()
        self.writer.start()

    def _lineage_lines(self) -> int:
        path = self.target.results_dir / LINEAGE_FILE
        if not path.exists():
            return 0
        return sum(1 for line in path.read_text().splitlines() if line.strip())

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
                    ROLE_TAG: "population",
                    "workbench.results_dir": str(self.target.results_dir),
                },
                params=self.target.parent_params,
            )
        )

    def _searched(self, config: dict[str, Any]) -> dict[str, Any]:
        return {name: config.get(key) for key, name in self.target.hyperparameters.items()}

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._open_parent()
        handle = trial.trial_id
        name = _trial_name(trial)
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
                key=f"{self.target.key}::{handle}",
                parent=PARENT,
                tags={ROLE_TAG: "trial", "workbench.trial_id": handle},
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
        for name, value in self._searched(used if isinstance(used, dict) else trial.config).items():
            number = hp_metric(value)
            if number is not None:
                metrics[f"hp/{name}"] = number
        iteration = int(metrics.get(STEP_METRIC, 0))
        # Exploits whose restore this result shows: written before it, so their step
        # is the last one trained with the old values.
        self._queue_exploits(handle, restored_iteration=iteration - 1)
        self.writer.put(Result(handle, metrics, int(time.time() * 1000)))
        # Exploits decided on this very result: the trial restores before its next one.
        for record in self._exploits.get(handle, []):
            record["armed"] = True

    def on_exploit(self, record: dict[str, Any]) -> None:
        """Lineage listener (ExploitRecorder): runs inside the scheduler's decision,
        before the result that triggered it reaches on_trial_result."""
        with self._lock:
            record = dict(record)
            record["seq"] = self._seq
            self._seq += 1
        record["armed"] = not record.get("decided_on_own_result", False)
        record["target_name"] = self._trial_names.get(record["target"], record["target"])
        record["source_name"] = self._trial_names.get(record["source"], record["source"])
        for key in ("old", "donor", "new"):
            record[key] = {
                self.target.hyperparameters.get(k, k): v for k, v in record.get(key, {}).items()
            }
        self._exploits.setdefault(record["target"], []).append(record)

    def _queue_exploits(self, handle: str, restored_iteration: int | None = None) -> None:
        """Queues the target's exploits that have taken effect (all of them at its end)."""
        waiting = []
        for record in self._exploits.pop(handle, []):
            if restored_iteration is not None and not record.get("armed"):
                waiting.append(record)
                continue
            record.pop("armed", None)
            # The iteration the target continued from: the donor checkpoint's.
            record["restored_iteration"] = restored_iteration
            self.writer.put(Lineage(handle, record))
        if waiting:
            self._exploits[handle] = waiting

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._end(trial, "FINISHED")

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """A failure Tune retries (failure.max_failures): counted and described on the
        run, which goes on (the retry's results continue its steps)."""
        self.writer.put(Tags(trial.trial_id, _failure_tags(trial, "workbench.last_failure")))

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.writer.put(Tags(trial.trial_id, _failure_tags(trial, "workbench.error")))
        self._end(trial, "FAILED")

    def _end(self, trial: Any, status: str) -> None:
        handle = trial.trial_id
        self._queue_exploits(handle)
        if handle in self._opened and handle not in self._ended:
            self._ended.add(handle)
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
                self.writer.put(Tags(handle, {"workbench.stopped_by": by_rule}))
            self.writer.put(EndRun(handle, status, int(time.time() * 1000)))
        never_started = any(t.trial_id not in self._opened for t in trials)
        interrupted = not by_rule and (bool(unfinished) or never_started)
        all_failed = bool(statuses) and all(s == "ERROR" for s in statuses.values())
        parent_status = "KILLED" if interrupted else "FAILED" if all_failed else "FINISHED"
        self.finish(parent_status, trials)

    def _ended_by_rule(self) -> str:
        """Why the experiment ended early by design ('' when it did not)."""
        if self.stopper is not None and getattr(self.stopper, "stop_all", lambda: False)():
            return "a trial reached the population's return target"
        budget = self.target.time_budget_s
        if budget is not None and time.monotonic() - self._started >= 0.99 * budget:
            return "the experiment's wall-clock budget"
        return ""

    def finish(self, parent_status: str, trials: Iterable[Any] = ()) -> None:
        """Artifacts of the population, its end status, then everything flushed."""
        writer = self.writer
        writer.start()
        if writer.flush(self.target.flush_timeout_s):
            for path in self._population_artifacts():
                writer.put(Artifact(PARENT, str(path)))
        writer.put(EndRun(PARENT, parent_status, int(time.time() * 1000)))
        left = writer.close(self.target.flush_timeout_s)
        if left:
            spool = self.target.results_dir / SPOOL_FILE
            with spool.open("a") as f:
                for op in left:
                    f.write(op_to_json(op) + "\n")
            self._event(
                f"MLflow store {self.target.uri} did not answer for "
                f"{self.target.flush_timeout_s:.0f} s: {len(left)} operations saved to {spool}; "
                "`workbench resume` writes them"
            )
        self._runs = writer.run_ids()
        self._writer = None

    def _population_artifacts(self) -> list[Path]:
        """The experiment file and the PNGs, rendered from what the store now holds."""
        out: list[Path] = []
        resolved = self.target.results_dir / "workbench_experiment.yaml"
        if resolved.exists():
            out.append(resolved)
        try:
            from workbench.inspection import render_population_pngs

            out.extend(
                render_population_pngs(
                    self.writer.client(), self.writer.run_ids(), self.target.results_dir
                )
            )
        except Exception as err:  # plots must never fail a population
            self._event(f"could not render the population's plots: {type(err).__name__}: {err}")
        return out


def _trial_name(trial: Any) -> str:
    return f"{trial.trainable_name}_{str(trial.trial_id).rsplit('_', 1)[-1]}"


def _failure_tags(trial: Any, text_tag: str) -> dict[str, str]:
    """How often the trial has failed, and its error text under `text_tag`."""
    tags = {"workbench.failures": str(int(getattr(trial, "num_failures", 0) or 0))}
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
