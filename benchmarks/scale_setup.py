"""The population that ``benchmarks/population_scale.py`` runs: the main experiment at a
size, the plan's probe (with the CPU a trial process takes to start) and plan of it."""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import EXPERIMENT, ROOT

# ``--costs equal``: the search space's two keys that set a train()'s learning work (its
# minibatch steps: num_epochs x batch / minibatch_size), fixed and out of PBT's reach, the
# rest of the space searched. Every member's train() then costs the same, and no member
# waits at the end for a dearer one. The values keep a train()'s work near what the wide
# space's cost in a run of 32 (6 December 2026, the trial processes' CPU less their starts:
# 1.16-1.17 s a result against 1.04-1.31 over two rounds), so that the two runs differ
# mostly in the spread of their costs.
EQUAL_COSTS = {"num_epochs": 16, "minibatch_size": 256}
COSTS = ("searched", "equal")


def experiment_data(
    size: int,
    iterations: int,
    node_cpus: float,
    nodes: int,
    folder: Path,
    runners: int = 0,
    stop: str = "iterations",
    costs: str = "searched",
) -> dict[str, Any]:
    """The main experiment at this size, each of a trial's processes (its main one and each
    env runner) at a share of a node such that the whole population is placed at once:
    ceil(processes / nodes) a node. With env runners, a node's share need not be whole
    trials, so that some trials' placement groups span nodes. ``stop``: ``iterations``
    each trial, or (``budget``) the same env steps as a budget for the whole population
    (``stop.population_env_steps``), which ends every trial at once. ``costs``:
    ``searched`` (the main experiment's search space) or ``equal`` (``EQUAL_COSTS`` fixed,
    the rest of the space searched, written to ``folder``)."""
    data = yaml.safe_load(EXPERIMENT.read_text())
    batch = int(data["training"]["train_batch_size_per_learner"])
    rule = (
        {"iterations": iterations}
        if stop == "iterations"
        else {"population_env_steps": size * iterations * batch}
    )
    # Rounded down to Ray's resolution (1e-4 CPU), or k shares would not fit in one node.
    per_process = math.floor(1e4 * node_cpus / math.ceil(size * (runners + 1) / nodes)) / 1e4
    data.update(
        name=f"scale{size}",
        population=size,
        storage=str(folder),
        stop=rule,
        failure={"max_failures": 3},
        evaluation={**(data.get("evaluation") or {}), "at_end": "none"},
    )
    data["resources"].update(cpus_main=per_process, cpus_per_learner=per_process)
    if runners:
        data["resources"]["env_runners"].update(count=runners, cpus_each=per_process)
    space = ROOT / "search_spaces" / data["search_space"]["file"]
    if costs == "equal":
        blocks = yaml.safe_load(space.read_text())
        for key, value in EQUAL_COSTS.items():
            del blocks[key]  # a KeyError: the main experiment's space no longer has it
            data["training"][key] = value
        space = folder / "equal_costs_space.yaml"
        space.write_text(yaml.safe_dump(blocks))
    elif costs != "searched":
        raise ValueError(f"costs {costs!r}: one of {', '.join(COSTS)}")
    data["search_space"]["file"] = str(space)
    return data


def write_experiment(
    size: int,
    args: argparse.Namespace,
    folder: Path,
    name: str = "",
    stop: str = "iterations",
    costs: str = "searched",
) -> Path:
    where = folder / (name or f"size{size}")
    where.mkdir(parents=True)
    path = where / "scale.yaml"
    data = experiment_data(
        size,
        args.iterations,
        args.cpus_per_node,
        args.nodes,
        where,
        args.env_runners,
        stop,
        costs,
    )
    path.write_text(yaml.safe_dump(data))
    return path


def probe(args: argparse.Namespace, folder: Path, costs: str = "searched") -> tuple[Any, Any]:
    """The plan's --probe of the experiment (one trial's sampling and learner, measured
    here), and the trial's costs the forecast makes of it: the probe whose train() cost is
    the median of three. ``costs``: as ``experiment_data``'s."""
    from workbench.experiment.resolve import load_and_resolve
    from workbench.plan.population import trial_costs
    from workbench.plan.start_probe import probe_process, with_process
    from workbench.plan.throughput import probe_throughput
    from workbench.trial.config import build_config

    resolved = load_and_resolve(write_experiment(4, args, folder, f"probe-{costs}", costs=costs))
    config = build_config(resolved.experiment, resolved.defaults)
    probes = []
    for _ in range(1 if args.quick else 3):  # a probe is a few seconds: the median of three
        try:
            seconds = 0.5 if args.quick else 2.0
            rate = probe_throughput(resolved.experiment, resolved.search_space, config, seconds)
        finally:
            import ray

            ray.shutdown()  # in case building the algorithm started a local Ray
        trial = trial_costs(resolved.search_space, config, rate, processes=1 + args.env_runners)
        probes.append((trial.iteration_cpu_s if trial else 0.0, rate, trial))
    _, rate, trial = sorted(probes, key=lambda p: p[0])[len(probes) // 2]
    # A trial process's start, a train() among a crowd and the short evaluations, as
    # `workbench plan --probe` measures them (the median of three; the quick run measures
    # the start alone: the plan's own test measures the rest).
    processes = [
        probe_process(resolved.experiment, resolved.defaults, crowd=0 if args.quick else None)
        for _ in range(1 if args.quick else 3)
    ]
    start = statistics.median(p.start_cpu_s for p in processes)
    middle = sorted(processes, key=lambda p: p.crowd_ratio or 0.0)[len(processes) // 2]
    rate = replace(with_process(rate, middle, resolved.experiment), start_cpu_s=start)
    trial = trial_costs(resolved.search_space, config, rate, processes=1 + args.env_runners)
    return rate, trial


def planned(resolved: Any, address: str, rate: Any) -> Any:
    """`workbench plan` of this population on the live cluster (its forecast, where
    ``rate`` holds the probe's figures; refusing, as `workbench run` would, a population
    the cluster cannot hold)."""
    from workbench.plan.capacity import make_plan
    from workbench.plan.resources import live_cluster

    plan = make_plan(resolved, live_cluster(address), throughput=rate)
    if not plan.fits:
        raise SystemExit("\n".join(str(p) for p in plan.problems))
    return plan


def experiment_scheduler() -> Any:
    """The experiment's scheduler section, as the schema reads it."""
    from pydantic import TypeAdapter

    from workbench.experiment.schema import SchedulerSection

    section = yaml.safe_load(EXPERIMENT.read_text())["scheduler"]
    return TypeAdapter(SchedulerSection).validate_python(section)
