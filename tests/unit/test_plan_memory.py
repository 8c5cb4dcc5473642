"""The plan's memory check: Ray places trials by CPU and GPU only, so the plan counts each
trial's processes against the memory the nodes declare and refuses, before anything
starts, a population whose processes would not fit at once."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_resources import cluster, experiment, resolved, run_cli
from workbench.plan.capacity import make_plan
from workbench.plan.resources import memory_bytes, this_machine

GB = 2**30
# Trials of half a CPU (the main process with the learner), one process each.
HALF_CPU: dict[str, Any] = {"cpus_main": 0.5, "cpus_per_learner": 0}


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("16GB", 16 * GB),
        ("16G", 16 * GB),
        ("16GiB", 16 * GB),
        ("1.5gb", 1.5 * GB),
        ("512MB", 512 * 2**20),
        ("1000000000", 1e9),
    ],
)
def test_memory_sizes_read_as_ray_and_the_os_count_them(text: str, size: float) -> None:
    assert memory_bytes(text) == size


def test_a_size_that_is_not_one_is_refused_with_what_is_valid(tmp_path: Path) -> None:
    assert math.isnan(memory_bytes("lots"))
    code, _, err = run_cli(
        "plan", str(experiment(tmp_path, HALF_CPU)), "--cluster", "cpus=2,memory=4XB"
    )
    assert code == 2
    assert "'memory=4XB' is not name=number" in err and "memory=SIZE (e.g. 16GB)" in err


def test_cluster_specs_and_this_machine_declare_memory() -> None:
    nodes = cluster("cpus=2,memory=4GB,nodes=2").nodes
    assert [n.resources["memory"] for n in nodes] == [4 * GB, 4 * GB]
    # What a local ray.init() would declare: the available memory less the object store.
    assert this_machine().nodes[0].resources["memory"] > GB


def test_a_population_the_memory_cannot_hold_is_refused_with_what_would_fit(
    tmp_path: Path,
) -> None:
    # By CPU 8 trials at once (4 a node); by memory 2 a node (1 GB, 0.5 GB a process).
    two_nodes = cluster("cpus=2,memory=1GB,nodes=2")
    plan = make_plan(resolved(tmp_path, HALF_CPU, population=8), two_nodes)
    assert not plan.fits and plan.concurrent == 8
    assert plan.memory is not None and plan.memory.concurrent == 4
    (problem,) = plan.problems
    assert problem.field == "population"
    assert problem.message.startswith(
        "8 trials would train at once, each 1 process of about 0.5 GB "
        "(resources.memory_per_process_gb"
    )
    assert "declares 2.0 GB of memory (largest node 1.0 GB), which holds 4 at once" in (
        problem.message
    )
    assert "set max_concurrent: 4 (the others queue)" in problem.message
    text = "\n".join(plan.lines())
    assert "At once: 8 by CPU and GPU, more than the memory holds" in text
    assert plan.summary().startswith("Plan: the population does not fit on")

    # The fix it names fits, and the plan says what memory the trials take.
    fixed = make_plan(resolved(tmp_path, HALF_CPU, population=8, max_concurrent=4), two_nodes)
    assert fixed.fits and fixed.concurrent == 4
    assert (
        "Memory: one trial = 1 process x ~0.5 GB = 0.5 GB; the cluster declares 2.0 GB, "
        "enough for the 4 at once"
    ) in "\n".join(fixed.lines())
    assert fixed.to_json()["memory"]["trials_it_holds"] == 4


def test_each_env_runner_and_the_declared_size_count(tmp_path: Path) -> None:
    runners = {**HALF_CPU, "env_runners": {"count": 2, "cpus_each": 0.25}}
    # 3 processes a trial of 1 CPU: 4 nodes of 2 CPUs hold 8 by CPU; 2 GB a node holds
    # 4 processes at 0.5 GB, 16 in all: 5 trials, some split over two nodes (PACK lets
    # a group spread when no node holds it whole).
    four = cluster("cpus=2,memory=2GB,nodes=4")
    plan = make_plan(resolved(tmp_path, runners, population=8), four)
    assert plan.memory is not None and plan.memory.processes == 3
    assert (plan.concurrent, plan.memory.concurrent) == (8, 5)
    # A simulator that holds 1.5 GB a process: no node holds one trial of 4.5 GB.
    heavy = {**runners, "memory_per_process_gb": 1.5}
    plan = make_plan(resolved(tmp_path, {**heavy, "placement_strategy": "STRICT_PACK"}), four)
    (problem,) = plan.problems
    assert "each 3 processes of about 1.5 GB" in problem.message
    assert problem.message.endswith(
        "and no node holds one trial: give it fewer env runners, or nodes with more memory"
    )


def test_numbers_without_memory_plan_by_cpu_and_gpu_alone(tmp_path: Path) -> None:
    plan = make_plan(resolved(tmp_path, HALF_CPU, population=64), cluster("cpus=64"))
    assert plan.fits and plan.memory is None and plan.concurrent == 64
    assert not any(line.startswith("Memory:") for line in plan.lines())


def test_plan_exits_2_naming_the_field_and_the_fix(tmp_path: Path) -> None:
    path = experiment(tmp_path, HALF_CPU, population=8)
    code, _, err = run_cli("plan", str(path), "--cluster", "cpus=2,memory=1GB,nodes=2")
    assert code == 2
    assert f"{path}: population: 8 trials would train at once" in err
    assert "set max_concurrent: 4" in err
    code, _, _ = run_cli(
        "plan", str(path), "--cluster", "cpus=2,memory=1GB,nodes=2", "--set", "max_concurrent=4"
    )
    assert code == 0
