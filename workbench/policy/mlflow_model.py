"""A trained policy as an MLflow model: logged to its trial's run, registered by name.

The model is a pyfunc (`workbench.policy.pyfunc_model`, MLflow's "models from code"):
its ``predict`` takes a batch of observations and returns the actions the env takes,
through the ``torch.export`` program of `workbench.policy.export`. Loading or serving it
needs MLflow, numpy and torch only (its requirements say so), not Ray or the workbench:
``mlflow.pyfunc.load_model(uri).predict(obs)``, ``mlflow models serve -m URI``, and the
model registry (``models:/NAME/VERSION``). Its signature is the observation and action
tensors (dtype and shape) and it carries an input example; ``policy.json`` (the env and
its spaces) lies beside the program.

Logging into an existing run reopens it; the run keeps the status and end time it had.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import torch
from mlflow.models import infer_signature

from workbench.errors import ExperimentError
from workbench.policy.checkpoint import PolicyCheckpoint
from workbench.policy.export import (
    SPEC_FILE,
    ExportedPolicy,
    export_policy,
    load_exported,
    sample_observations,
)
from workbench.policy.locate import locate_checkpoint
from workbench.tracking.store import client_for

MODEL_NAME = "policy"  # the model's name in its run (runs:/RUN_ID/policy)
# The model's code: a file MLflow copies into the model and runs when it loads it. Not
# imported here: running it registers its model with MLflow (mlflow.models.set_model).
PYFUNC_FILE = Path(__file__).with_name("pyfunc_model.py")
PROGRAM_ARTIFACT = "policy"  # pyfunc_model.ARTIFACT: the torch.export program
_ENV_VAR = "MLFLOW_TRACKING_URI"


@dataclass
class LoggedPolicy:
    """Where the policy's MLflow model is: its URI (``models:/m-...``), its run, and the
    registered version when it was registered."""

    model_uri: str
    run_id: str
    tracking_uri: str
    registered: str | None = None  # models:/NAME/VERSION

    def lines(self) -> list[str]:
        out = [
            f"MLflow model {self.model_uri} (run {self.run_id}, {self.tracking_uri}); load it "
            f"with mlflow.pyfunc.load_model('{self.model_uri}')"
        ]
        if self.registered:
            out.append(f"Registered as {self.registered}: mlflow models serve -m {self.registered}")
        return out


@contextlib.contextmanager
def _tracking_uri(uri: str) -> Iterator[None]:
    """MLflow's fluent API on `uri` for a moment (it is process-wide: the URI set and the
    MLFLOW_TRACKING_URI variable), then both as they were."""
    from mlflow.tracking._tracking_service import utils

    before_env = os.environ.get(_ENV_VAR)
    # None: never set in this process (MLflow has no public way to tell).
    before: Any = utils._tracking_uri  # not Ray: MLflow's fluent tracking URI
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before)
        if before_env is None:
            os.environ.pop(_ENV_VAR, None)
        else:
            os.environ[_ENV_VAR] = before_env


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """MLflow's INFO lines while logging a model (validating the input example, ...)."""
    log = logging.getLogger("mlflow")
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        log.setLevel(level)


def _requirements() -> list[str]:
    """What loading the model needs (pinned to what wrote it): not Ray, not the workbench."""
    return [
        f"mlflow=={mlflow.__version__}",
        f"torch=={torch.__version__.split('+')[0]}",
        f"numpy=={np.__version__}",
    ]


def log_policy_model(
    exported: ExportedPolicy,
    tracking_uri: str,
    run_id: str,
    *,
    register: str | None = None,
) -> LoggedPolicy:
    """Logs the exported policy as an MLflow pyfunc model to run `run_id` (and registers
    it as `register` when given). The run's status and end time are kept."""
    program = exported.files.get("torch_export")
    if program is None:
        raise ValueError(f"{exported.folder} holds no torch.export program to log")
    spec = exported.spec
    observations = sample_observations(spec["env_id"], spec["env_config"], n=8, seed=1)
    with torch.no_grad():
        actions = load_exported(program)(torch.from_numpy(observations)).numpy()
    signature = infer_signature(observations, actions)
    client = client_for(tracking_uri)
    run = client.get_run(run_id)
    status, end_time = run.info.status, run.info.end_time
    with _tracking_uri(tracking_uri), _quiet(), mlflow.start_run(run_id=run_id):
        info = mlflow.pyfunc.log_model(
            name=MODEL_NAME,
            python_model=PYFUNC_FILE,
            artifacts={
                PROGRAM_ARTIFACT: str(program),
                "spec": str(exported.folder / SPEC_FILE),
            },
            signature=signature,
            input_example=observations[:2],
            pip_requirements=_requirements(),
            metadata={
                "env_id": spec["env_id"],
                "algorithm": spec["algorithm"],
                "checkpoint": spec["checkpoint"],
                "training_iteration": spec["training_iteration"],
            },
        )
    if status != "RUNNING":  # start_run reopened it; end_run marked it FINISHED
        client.set_terminated(run_id, status=status, end_time=end_time)
    logged = LoggedPolicy(model_uri=info.model_uri, run_id=run_id, tracking_uri=tracking_uri)
    if register:
        logged.registered = register_policy(logged, register)
    return logged


def register_policy(logged: LoggedPolicy, name: str) -> str:
    """A new version of registered model `name` from the logged policy: models:/NAME/V."""
    with _tracking_uri(logged.tracking_uri):
        try:
            version = mlflow.register_model(logged.model_uri, name)
        except mlflow.exceptions.MlflowException as err:
            raise ExperimentError.single(
                logged.tracking_uri, "--register", f"{name!r}: {err.message}"
            ) from None
    return f"models:/{name}/{version.version}"


def load_policy_model(model_uri: str) -> Any:
    """The logged policy as MLflow loads it for serving (``predict(observations)``)."""
    return mlflow.pyfunc.load_model(model_uri)


def log_checkpoint_model(
    checkpoint: PolicyCheckpoint, tracking_uri: str, run_id: str
) -> LoggedPolicy:
    """The checkpoint's policy exported (into a temporary folder; the store keeps its own
    copy) and logged as an MLflow model to run `run_id`: the end of `workbench run`."""
    with tempfile.TemporaryDirectory(prefix="workbench-policy-") as folder:
        exported = export_policy(checkpoint, Path(folder) / "policy")
        return log_policy_model(exported, tracking_uri, run_id)


@dataclass
class ExportedToMlflow:
    """`workbench export-policy`: the files written, and the MLflow model (or why none)."""

    exported: ExportedPolicy
    logged: LoggedPolicy | None
    note: str  # why nothing was logged, when nothing was

    def lines(self) -> list[str]:
        out = self.exported.lines()
        out.extend(self.logged.lines() if self.logged is not None else [self.note])
        return out


def export_reference_to_mlflow(
    ref: str | None,
    folder: Path,
    *,
    store: str | None = None,
    population: str | None = None,
    env_id: str | None = None,
    trust: bool = False,
    log: bool = True,
    register: str | None = None,
) -> ExportedToMlflow:
    """`workbench export-policy`: the policy a RUN|CHECKPOINT reference means exported
    into `folder` (`export_policy`) and, with `log`, logged as an MLflow model to its
    trial's run when there is one; `register` also registers it under that name (which
    needs the run)."""
    source, checkpoint = locate_checkpoint(
        ref, store=store, population=population, env_id=env_id, trust=trust
    )
    where = ref or source.label
    if register is not None and not register.strip():
        raise ExperimentError.single(where, "--register", "an empty name; give the model's name")
    has_run = source.run_id is not None and source.uri is not None
    if register is not None and not has_run:
        raise ExperimentError.single(
            where,
            "--register",
            f"{register!r}: registering needs the policy's MLflow trial run, and {source.label} "
            f"has none ({source.why_no_run}); valid: a trial run or a folder of a tracked "
            "population (--store names its store)",
        )
    exported = export_policy(checkpoint, folder)
    if not log and register is None:
        return ExportedToMlflow(exported, None, "Not logged to MLflow (--no-log)")
    if not has_run:
        return ExportedToMlflow(exported, None, f"Not logged to MLflow ({source.why_no_run})")
    assert source.uri is not None and source.run_id is not None
    logged = log_policy_model(exported, source.uri, source.run_id, register=register)
    return ExportedToMlflow(exported, logged, "")
