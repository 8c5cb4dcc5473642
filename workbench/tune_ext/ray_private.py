"""Ray's private functions and attributes that the other wings use, behind plain names.

Each function says what it stands for in Ray 2.60; ``ray_surface.py`` lists them for the
test that checks them against the installed Ray.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from workbench.files import write_atomic


def detected_cpus_and_gpus() -> tuple[float, float]:
    """The CPUs and GPUs a local ``ray.init()`` would offer on this machine: Ray's own
    detection (cgroup CPU limits, CUDA_VISIBLE_DEVICES, nvidia-smi)."""
    from ray._private.accelerators import get_accelerator_manager_for_resource
    from ray._private.utils import get_num_cpus

    manager = get_accelerator_manager_for_resource("GPU")
    gpus = float(manager.get_current_node_num_accelerators()) if manager else 0.0
    return float(get_num_cpus()), gpus


def detected_memory_bytes() -> float:
    """The ``memory`` resource a local ``ray.init()`` would declare on this machine now:
    Ray's estimate of the available memory (cgroup-aware) less its default object store."""
    from ray._private.utils import estimate_available_memory, resolve_object_store_memory

    available = int(estimate_available_memory())  # type: ignore[no-untyped-call]
    return float(available - resolve_object_store_memory(available))


def dashboard_dependency_error() -> str | None:
    """Why Ray's dashboard cannot start here (ray[default]'s packages missing), or None."""
    from ray._private.utils import get_dashboard_dependency_error

    error = get_dashboard_dependency_error()
    return None if error is None else str(error)


def local_head_node() -> Any | None:
    """The node object of the local Ray this driver started (``ray._private.worker``'s
    global node), or None when it started none or joined a cluster."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)
    if node is None or not getattr(node, "head", False):
        return None
    return node


def enable_local_token_auth() -> None:
    """Ray 2.60 starts a local cluster with token authentication (the token in
    ~/.ray/auth_token), but only a driver that finds it by ``address="auto"`` turns the
    token on; one given an explicit address does not, and the GCS refuses it. Do what
    "auto" does: use the token when RAY_AUTH_MODE is unset and one exists."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def restored_tuner_uses(tuner: Any, tune_config: Any, run_config: Any) -> None:
    """Hands a ``Tuner.restore``d tuner this driver's Tune and run configs (its scheduler,
    searcher, callbacks and stop rules, built from the experiment again) while keeping the
    name and storage path the restore found: ``Tuner.restore`` takes no configs."""
    internal = tuner._local_tuner
    if internal is None:
        raise RuntimeError("Tuner.restore gave a tuner without its local tuner")
    run_config.name = internal._run_config.name
    run_config.storage_path = internal._run_config.storage_path
    internal._tune_config = tune_config
    internal._run_config = run_config


@contextlib.contextmanager
def raylet_messages_logged(logger_name: str = "ray") -> Iterator[None]:
    """While it lasts, what the raylet publishes to the driver (Ray 2.60's
    ``listen_error_messages``: "WARNING: 8 PYTHON worker processes have been started ...")
    goes to the ``logger_name`` logger, which the run writes to its workbench.log, instead
    of straight to stdout through ``print_to_stdstream`` across the live view. Other
    output (workers' logs, which a local run does not forward) goes as before."""
    from ray._private import worker

    printed = worker.print_to_stdstream
    log = logging.getLogger(logger_name)

    def to_log(data: dict[str, Any], ignore_prefix: bool) -> None:
        if data.get("pid") != "raylet":
            printed(data, ignore_prefix)
            return
        for line in data.get("lines", []):
            log.warning("(raylet) %s", str(line).rstrip())

    worker.print_to_stdstream = to_log
    try:
        yield
    finally:
        worker.print_to_stdstream = printed


def _newest_snapshot(results_dir: Path) -> Path | None:
    """Tune's newest ``experiment_state-*.json`` in the folder, the one a restore reads."""
    from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint

    newest = _find_newest_experiment_checkpoint(str(results_dir))
    return None if newest is None else Path(newest)


def reopen_trials(results_dir: Path, trial_ids: Collection[str]) -> None:
    """Marks these TERMINATED trials PAUSED in Tune's newest experiment snapshot (its
    ``experiment_state-*.json``: one JSON state per trial), so that ``Tuner.restore``
    resumes them from their newest checkpoints: Tune resumes unfinished trials only, and
    a budget that ran out ended them as if they had met their own stop rules."""
    path = _newest_snapshot(results_dir)
    if path is None:
        raise FileNotFoundError(f"no experiment_state-*.json in {results_dir}")
    data = json.loads(path.read_text())
    for entry in data["trial_data"]:
        state = json.loads(entry[0])
        if str(state.get("trial_id")) in trial_ids and state.get("status") == "TERMINATED":
            state["status"] = "PAUSED"
            entry[0] = json.dumps(state, indent=2)
    write_atomic(path, json.dumps(data))


# TuneController's decisions waiting on a trial's save in flight (Ray 2.60): a STOP or
# PAUSE the scheduler or stopper made while the trial was saving, run when the save resolves.
_IN_FLIGHT_DECISIONS = ("_cached_trial_decisions", "_queued_trial_decisions")


def forget_in_flight_decisions(results_dir: Path) -> list[str]:
    """Empties the decisions Tune's newest experiment snapshot holds for saves that were in
    flight when it was written; returns the trials that had one.

    Tune 2.60 keeps them in the snapshot (``TuneController.__getstate__`` leaves them in)
    and its resume puts them back, but the saves they waited for belonged to processes
    that are gone. The restarted trial's first save then runs the old decision: a STOP
    that a budget made while a trial was saving ended the trial again after one
    iteration when a resume with a larger budget reopened it. Every trial of a resume
    starts from its checkpoint, so no decision from before applies."""
    path = _newest_snapshot(results_dir)
    if path is None:
        return []
    data = json.loads(path.read_text())
    runner = data.get("runner_data")
    if not isinstance(runner, dict):
        return []
    held = sorted({str(t) for key in _IN_FLIGHT_DECISIONS for t in dict(runner.get(key) or {})})
    if held:
        for key in _IN_FLIGHT_DECISIONS:
            if key in runner:
                runner[key] = {}
        write_atomic(path, json.dumps(data))
        logging.getLogger("workbench").info(
            "resume: dropped the decisions Tune held for saves in flight (trials %s)", held
        )
    return held
