"""The store writer: a background thread that merges queued operations into MLflow
batches, retries with back-off while the store does not answer, and hands back what
it could not write (spooled to the results folder, written by the next resume)."""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, Run, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from workbench.names import CLONED_FROM_TAG, KEY_TAG, LAST_EXPLOIT_TAG, PARENT, STEP_METRIC
from workbench.tracking.location import rebase_artifacts

logger = logging.getLogger(__name__)


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
class Params:
    """Params added to an open run (MLflow keeps a param's first value for good)."""

    handle: str
    params: dict[str, str]


@dataclass
class Lineage:
    """An exploit: gets the target run's current step, then goes to lineage.jsonl."""

    target: str
    record: dict[str, Any]  # LineageRecord.to_dict(): the spool keeps operations as JSON


@dataclass
class EndRun:
    handle: str
    status: str  # FINISHED, FAILED, KILLED
    end_ms: int


@dataclass
class EndLeftOpen:
    """Ends a run an earlier session left open (KILLED or RUNNING) and this session
    never reopened: its trial was stopped by the population's rule before it restarted.
    A run already FINISHED or FAILED is left as it is, tags and params included."""

    handle: str
    key: str  # its key tag: found by it where the snapshot that named it was lost
    status: str
    end_ms: int
    tags: dict[str, str]
    params: dict[str, str]


@dataclass
class Artifact:
    handle: str
    path: str
    folder: str | None = None


Op = OpenRun | Result | Tags | Params | Lineage | EndRun | EndLeftOpen | Artifact


_OP_TYPES: dict[str, type] = {
    t.__name__: t for t in (OpenRun, Result, Tags, Params, Lineage, EndRun, EndLeftOpen, Artifact)
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
        self._rebased = artifact_root is None
        self._down_since: float | None = None
        self._down_reason = ""
        self.written_results = 0
        self.failed_calls = 0

    # --- the producer side ----------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="workbench-mlflow", daemon=True)
            self._thread.start()

    def add_runs(self, runs: dict[str, str]) -> None:
        """Runs (handle -> MLflow run id) found again after a restore, under the lock the
        writer's thread reads them with."""
        with self._cv:
            self.runs.update(runs)

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

    def _rebase(self) -> None:
        """Once, before anything is written: a local store copied or moved with its
        population has its experiment's artifacts beside it from now on, never in the
        folder it was copied from (`workbench.tracking.location.rebase_artifacts`)."""
        if self._rebased or self.artifact_root is None:
            return
        found = self.client().get_experiment_by_name(self.experiment_name)
        if found is not None:
            rebase_artifacts(self.uri, str(found.experiment_id), self.artifact_root)
        self._rebased = True

    def _apply(self, batch: list[Op]) -> tuple[list[Op], Exception | None]:
        """Applies ops in order until the store fails; returns the ops left and the error.

        A request the store refuses for good (a malformed value) is dropped with a
        warning instead of blocking everything behind it.
        """
        try:
            self._rebase()
        except Exception as err:
            return batch, err
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
        elif isinstance(op, EndLeftOpen):
            self._end_left_open(op)
        elif op.handle not in self.runs:
            # Its OpenRun was refused for good: nothing to attach this to.
            logger.warning("MLflow: dropping %s for unknown run %s", type(op).__name__, op.handle)
        elif isinstance(op, (Result, Tags)):
            self._write_merged([op])
        elif isinstance(op, Params):
            params = [Param(k, v) for k, v in op.params.items()]
            client.log_batch(self.runs[op.handle], params=params)
        elif isinstance(op, EndRun):
            client.set_terminated(self.runs[op.handle], status=op.status, end_time=op.end_ms)
        elif isinstance(op, Artifact):
            client.log_artifact(self.runs[op.handle], op.path, op.folder)

    def _end_left_open(self, op: EndLeftOpen) -> None:
        client = self.client()
        if op.handle in self.runs:
            run = client.get_run(self.runs[op.handle])
        elif (run := self._find(op.key)) is not None:
            with self._cv:
                self.runs[op.handle] = run.info.run_id
        if run is None or run.info.status in ("FINISHED", "FAILED"):
            return  # never opened (a trial no session started), or ended already
        run_id = run.info.run_id
        client.log_batch(
            run_id,
            params=[Param(k, v) for k, v in op.params.items()],
            tags=[RunTag(k, v) for k, v in op.tags.items()],
        )
        client.set_terminated(run_id, status=op.status, end_time=op.end_ms)

    def _find(self, key: str) -> Run | None:
        """The run of the population's store that has this key tag."""
        found = self.client().search_runs(
            [self.experiment_id()], filter_string=f"tags.`{KEY_TAG}` = '{key}'", max_results=1
        )
        return found[0] if found else None

    def _open(self, op: OpenRun) -> None:

        client = self.client()
        if op.handle in self.runs:
            run_id = self.runs[op.handle]
            try:
                info = client.get_run(run_id).info
            except MlflowException as err:
                if getattr(err, "error_code", "") != "RESOURCE_DOES_NOT_EXIST":
                    raise
                # A run of Tune's snapshot this store has not (a population folder copied
                # without its store): found by its key, or opened anew, below.
                with self._cv:
                    del self.runs[op.handle]
            else:
                if info.status != "RUNNING":
                    client.update_run(run_id, status="RUNNING")
                return
        exp_id = self.experiment_id()
        found = self._find(op.key)
        if found is not None:
            run_id = found.info.run_id
            if found.info.status != "RUNNING":
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
            self.client().log_batch(
                self.runs[op.target],
                tags=[
                    RunTag(CLONED_FROM_TAG, str(record.get("source_name", ""))),
                    RunTag(LAST_EXPLOIT_TAG, json.dumps(record, default=str)[:8000]),
                ],
            )

    def _upload_lineage(self) -> None:
        if self.lineage_file is not None and PARENT in self.runs and self.lineage_file.exists():
            self.client().log_artifact(self.runs[PARENT], str(self.lineage_file))
        self._lineage_dirty = False
