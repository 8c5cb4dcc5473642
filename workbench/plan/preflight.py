"""The pre-flight of `workbench run` / `workbench resume`: the plan against the live
cluster Ray is connected to, and a check that every node imports the project and sees
the results storage."""

from __future__ import annotations

import importlib
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import ray
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from workbench.errors import ExperimentError
from workbench.experiment.resolve import ResolvedExperiment
from workbench.plan.capacity import Plan, make_plan
from workbench.plan.resources import Cluster, live_cluster

# How long `workbench run` waits for nodes to join before it calls a trial unfit (seconds;
# a RayJob's driver can start before every worker pod has registered).
WAIT_ENV = "WORKBENCH_WAIT_FOR_RESOURCES_S"


def preflight(
    resolved: ResolvedExperiment,
    config: AlgorithmConfig,
    *,
    address: str | None = None,
) -> Plan:
    """Checks the experiment and its RLlib config against the live cluster Ray is
    connected to, and returns the plan: ``plan.resolved`` and ``plan.config`` are what the
    run goes on with (with resources.no_gpu: cpu_fallback on a cluster without GPU, new
    ones with CPU learners; the inputs are never changed).

    Raises ExperimentError (exit 2) when a trial can never fit, after waiting up to
    $WORKBENCH_WAIT_FOR_RESOURCES_S for nodes to join. On a multi-node cluster it checks
    that every node imports the project and sees the results storage (a warning, with the
    reason, where one does not).
    """
    deadline = time.monotonic() + float(os.environ.get(WAIT_ENV) or 0)
    plan = make_plan(resolved, live_cluster(address), config=config)
    while not plan.fits and time.monotonic() < deadline:
        print(
            f"workbench: waiting for the cluster to grow ({plan.cluster.describe()}; "
            f"{WAIT_ENV} allows {deadline - time.monotonic():.0f} s more)",
            file=sys.stderr,
        )
        time.sleep(min(10.0, max(deadline - time.monotonic(), 0.0)))
        plan = make_plan(resolved, live_cluster(address), config=config)
    if not plan.fits:
        raise ExperimentError(plan.problems)
    if len(plan.cluster.nodes) > 1:
        plan.warnings += check_nodes(resolved.file, resolved.results_dir.parent, plan.cluster)
    for warning in plan.warnings:
        print(f"workbench: WARNING: {warning}", file=sys.stderr)
    print(plan.summary())
    return plan


def check_nodes(file: Path, storage: Path, cluster: Cluster, timeout_s: float = 120.0) -> list[str]:
    """Runs a zero-CPU task on every alive node: can it import the project, and does it
    see the results storage (a file the driver writes there)? Returns warnings (naming
    the experiment ``file``); raises ExperimentError when a node cannot import the
    project (its trials would fail)."""

    storage.mkdir(parents=True, exist_ok=True)
    marker = storage / f".workbench-preflight-{uuid.uuid4().hex[:12]}"
    marker.write_text("written by the driver of `workbench run` to see which nodes share it\n")

    def node_check(path: str) -> dict[str, Any]:

        out: dict[str, Any] = {"sees_storage": os.path.exists(path)}
        for module in ("workbench", "sim_ext"):
            try:
                importlib.import_module(module)
            except Exception as err:  # any import failure is the answer
                out[module] = f"{type(err).__name__}: {err}"
        return out

    remote = ray.remote(num_cpus=0, max_retries=0)(node_check)
    refs = {}
    for node in cluster.nodes:
        if node.node_id:
            strategy = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
            refs[node.name] = remote.options(scheduling_strategy=strategy).remote(str(marker))
    answers: dict[str, dict[str, Any] | str] = {}
    try:
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        for name, ref in refs.items():
            if ref not in ready:
                answers[name] = f"no answer in {timeout_s:g} s"
                continue
            try:
                answers[name] = ray.get(ref)
            except Exception as err:  # the node could not even run the check
                answers[name] = f"the check failed: {type(err).__name__}: {err}"
    finally:
        marker.unlink(missing_ok=True)
    return judge_nodes(answers, file=str(file), storage=storage)


def judge_nodes(answers: dict[str, dict[str, Any] | str], *, file: str, storage: Path) -> list[str]:
    """The pre-flight's verdict on every node's answer (or why there is none): raises
    ExperimentError when a node cannot import the project, returns warnings otherwise."""
    warnings: list[str] = []
    cannot_import: list[str] = []
    unshared: list[str] = []
    for name, answer in answers.items():
        if isinstance(answer, str):
            warnings.append(f"node {name} did not take part in the pre-flight: {answer}")
            continue
        missing = [f"{m} ({answer[m]})" for m in ("workbench", "sim_ext") if m in answer]
        if missing:
            cannot_import.append(f"{name}: {', '.join(missing)}")
        if not answer["sees_storage"]:
            unshared.append(name)
    if cannot_import:
        raise ExperimentError.single(
            file,
            "",
            "nodes of the cluster cannot import the project, so their trials would fail: "
            + "; ".join(cannot_import)
            + ". Install it on every node (the same image, see deploy/kuberay) or ship it "
            "with a runtime_env (see docs/resources.md, Existing clusters)",
        )
    if unshared:
        warnings.append(
            f"results storage {storage} is not shared: {len(unshared)} of "
            f"{len(answers)} nodes ({', '.join(unshared)}) do not see a file the "
            "driver wrote there. Trials on those nodes write checkpoints to their own disk, "
            "where PBT clones, restores and `workbench resume` cannot find them; mount one "
            "shared volume (NFS, a ReadWriteMany PVC) at the same path on every node"
        )
    return warnings
