"""Population scale: a PBT population of 4, 8, 16 and 32 trials on a four-node Ray cluster on
this machine, each size timed for its time outside ``train()`` and measured for the memory of
its trial processes and where Ray placed them.

Usage::

    .venv/bin/python benchmarks/population_scale.py                  # 4, 8, 16, 32 on 4 nodes
    .venv/bin/python benchmarks/population_scale.py --sizes 8,32 --iterations 20
    .venv/bin/python benchmarks/population_scale.py --sizes 32 --stops iterations,budget
    .venv/bin/python benchmarks/population_scale.py --quick          # a smoke run (the test)

Method. ``deploy/local_cluster.py`` starts ``--nodes`` ``ray start`` nodes on loopback with
``--cpus-per-node`` CPUs each (what ``make cluster-up`` does; more logical CPUs than the
machine's cores, as a user sizing a population on one box would declare). This process joins
it as the driver (``ray.init(address=...)``) and runs ``workbench.run.launch.run`` of the
main experiment (``experiments/cartpole_pbt.yaml``: PPO, PBT, the workbench's checkpoints,
short evaluations and MLflow tracking) once per size, smallest first, with every trial at
``nodes x cpus / size`` CPUs so that the whole population runs at once, ``--iterations``
iterations each, no return target, no final evaluation. With ``--stops budget`` the same
env steps are instead the population's budget (``stop.population_env_steps``: size x
iterations x the batch): the trials that iterate faster go on while the dearer ones train,
and every trial ends at once, none waiting for the slowest; ``--stops iterations,budget``
interleaves the two.

Figures per size: the population's env steps per second over ``fit()``; the share of the
trials' slot time (``size x fit wall``) outside ``train()``, split into before each trial's
first result, between results and after its last (``benchmarks.common.outside_train_split``);
the CPU time of the driver's process (all its threads: Tune's loop, MLflow's writer, the
state sync) over the run, a share of one core and per result, less the benchmark's own
sampling threads (timed apart: they scan ``/proc`` and poll Ray's state API on the cores the
population shares);
the peak resident memory (RSS) of each trial process, sampled every 0.5 s from ``/proc`` for
the processes Ray titles ``ray::PPO``, and the sum of those peaks; and the trial processes per
node, from the node's raylet being their parent. ``--rounds`` runs of every size, the sizes
interleaved round after round (4, 8, 16, 32, 4, 8, ...): each run's figures, and per size the
median [min-max] over its rounds.

Beside each size's measurement, ``workbench plan``'s forecast for it (the plan of the same
experiment file against the live cluster, ``workbench/plan/population.py``): results per
second and the share outside ``train()``, and its error against the median of the rounds.
The forecast's ``train()`` cost is measured once, before the cluster starts, by the plan's
``--probe`` (this experiment's sampling and learner in this process), as ``workbench plan
--probe`` does.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime
import itertools
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):  # run as a file: python benchmarks/population_scale.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (
    EXPERIMENT,
    ROOT,
    command_line,
    cpu_model,
    number_at,
    outside_train_split,
    read_trials,
    timed_launch_run,
)
from deploy.local_cluster import LocalCluster, processes

TRIAL_TITLE = b"ray::PPO"  # Ray's process title for the trainable's actor (and its tasks)


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float | None:
    """User and system CPU seconds of a live process so far (None: it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S


class TrialMemory:
    """Peak RSS of every live trial process, sampled in a thread until stopped; which raylet
    (node) each one belongs to, by parent process; and the CPU the cluster's processes used
    meanwhile, the trial processes apart from Ray's own (raylets, GCS, agents, idle
    workers). A process's CPU is its last sample's, so one that ends loses at most a
    period's worth."""

    def __init__(
        self, raylets: dict[int, str], cluster: LocalCluster, period_s: float = 0.5
    ) -> None:
        self.raylets = raylets
        self.cluster = cluster
        self.period_s = period_s
        self.peak_mb: dict[int, float] = {}
        self.node_of: dict[int, str] = {}
        self._cpu_at_start: dict[int, float] = {}
        self._cpu_last: dict[int, float] = {}
        self.min_available_mb = math.inf  # the machine's MemAvailable, lowest sample
        self.own_cpu_s = 0.0  # the sampling thread's CPU, which is not the driver's work
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> TrialMemory:
        for pid in self.cluster.alive():
            cpu = _cpu_s(pid)
            if cpu is not None:
                self._cpu_at_start[pid] = cpu
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._sample_cpu()

    def cpu_s(self) -> tuple[float, float]:
        """CPU seconds since the start: (the trial processes', the rest of the cluster's)."""
        trials = rest = 0.0
        for pid, cpu in self._cpu_last.items():
            used = cpu - self._cpu_at_start.get(pid, 0.0)
            if pid in self.peak_mb:
                trials += used
            else:
                rest += used
        return trials, rest

    def _sample_cpu(self, table: dict[int, tuple[str, int, int]] | None = None) -> None:
        for pid in self.cluster.alive(table):
            cpu = _cpu_s(pid)
            if cpu is not None:
                self._cpu_last[pid] = cpu

    def _sample(self) -> None:
        # One scan of /proc a period, and only the raylets' children read, a trial's title
        # once (an idle worker takes the trial's title when the actor lands on it): the
        # sampler runs in the driver's process, on the cores the population shares.
        trials: set[int] = set()
        while not self._stop.wait(self.period_s):
            table = processes()
            self._sample_cpu(table)
            available = _proc_fields("/proc/meminfo").get("MemAvailable")  # kB
            if available is not None:
                self.min_available_mb = min(self.min_available_mb, available / 1024)
            for pid, (_, parent, _) in table.items():
                # A worker of the cluster's raylets (not, say, one of the probe's local Ray
                # still going down).
                if parent not in self.raylets:
                    continue
                if pid not in trials:
                    try:
                        title = Path(f"/proc/{pid}/cmdline").read_bytes()
                    except OSError:
                        continue
                    if not title.startswith(TRIAL_TITLE):
                        continue
                    trials.add(pid)
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                rss = next((ln for ln in status.splitlines() if ln.startswith("VmRSS:")), "")
                if not rss:
                    continue
                mb = int(rss.split()[1]) / 1024
                self.peak_mb[pid] = max(self.peak_mb.get(pid, 0.0), mb)
                self.node_of.setdefault(pid, self.raylets[parent])
        self.own_cpu_s = time.thread_time()


class PlacementWatch:
    """Ray's placement groups while the population runs, polled from its state API
    (``ray.util.placement_group_table``): the node of every bundle of every group created,
    at the moment the most groups were (the whole population placed at once). It stops
    polling once ``expected`` groups are placed (None: never)."""

    def __init__(
        self, labels: dict[str, str], period_s: float = 1.0, expected: int | None = None
    ) -> None:
        self.labels = labels  # Ray's node id -> the node's label (node_0, ...)
        self.period_s = period_s
        self.expected = expected
        self.groups: list[list[str]] = []
        self.own_cpu_s = 0.0  # the polling thread's CPU, which is not the driver's work
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> PlacementWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _poll(self) -> None:
        import ray

        while not self._stop.wait(self.period_s):
            with contextlib.suppress(Exception):  # the cluster may be losing a node
                table = ray.util.placement_group_table()
                created = [g for g in table.values() if g["state"] == "CREATED"]
                if len(created) > len(self.groups):
                    self.groups = [
                        [self.labels.get(n, n) for _, n in sorted(g["bundles_to_node_id"].items())]
                        for g in created
                    ]
            if self.expected is not None and len(self.groups) >= self.expected:
                break
        self.own_cpu_s = time.thread_time()

    def bundles_per_node(self) -> dict[str, int]:
        counts = {label: 0 for label in sorted(self.labels.values())}
        for group in self.groups:
            for label in group:
                counts[label] = counts.get(label, 0) + 1
        return counts

    @property
    def spanning(self) -> int:
        return sum(len(set(group)) > 1 for group in self.groups)


# Machine-wide counters read before and after a run: memory pressure (major page faults,
# pages the kernel scanned to reclaim, by kswapd and directly by a process that allocated)
# and context switches, to tell a crowded machine's CPU from a short-of-memory one's.
VMSTAT = ("pgmajfault", "pgscan_kswapd", "pgscan_direct")


def _proc_fields(path: str) -> dict[str, int]:
    """``name value`` lines of a /proc file (``name:`` in meminfo) as numbers; empty
    where it cannot be read."""
    out: dict[str, int] = {}
    try:
        for line in Path(path).read_text().splitlines():
            name, _, value = line.partition(" ")
            if value.split():
                out[name.rstrip(":")] = int(value.split()[0])
    except (OSError, ValueError):
        return {}
    return out


def machine_counters() -> dict[str, int]:
    """The VMSTAT counters of /proc/vmstat, /proc/stat's context switches (ctxt), and the
    microseconds some task waited on I/O (io_some_us, io_full_us: /proc/pressure/io)."""
    vmstat = _proc_fields("/proc/vmstat")
    counters = {name: vmstat[name] for name in VMSTAT if name in vmstat}
    ctxt = _proc_fields("/proc/stat").get("ctxt")
    if ctxt is not None:
        counters["ctxt"] = ctxt
    try:
        pressure = Path("/proc/pressure/io").read_text().splitlines()
    except OSError:
        pressure = []  # a kernel without pressure stall information
    for line in pressure:
        kind, *fields = line.split()
        total = dict(f.split("=", 1) for f in fields).get("total")
        if total is not None:
            counters[f"io_{kind}_us"] = int(total)
    return counters


def long_waits(
    trials: dict[str, list[dict[str, Any]]], started_at: float, at_least_s: float = 10.0
) -> list[tuple[float, float, str, int, int]]:
    """Each wait between a trial's results of ``at_least_s`` or more, less the second
    result's own iteration, in the order they ended: (seconds into fit() it ended, the
    wait, the trial, the iteration before, the iteration after: a PBT clone's jumps). A
    stall of the whole population shows as many of them ending together."""
    waits = []
    for name, rows in trials.items():
        for before, after in itertools.pairwise(rows):
            wait = (
                float(after["timestamp"])
                - float(before["timestamp"])
                - float(after["time_this_iter_s"])
            )
            if wait >= at_least_s:
                waits.append(
                    (
                        float(after["timestamp"]) - started_at,
                        wait,
                        name,
                        int(before["training_iteration"]),
                        int(after["training_iteration"]),
                    )
                )
    return sorted(waits)


def node_labels() -> dict[str, str]:
    """Ray's node id -> the custom resource that labels the node (deploy/local_cluster.py)."""
    import ray

    return {
        n["NodeID"]: next((k for k in n["Resources"] if k.startswith("node_")), n["NodeID"][:8])
        for n in ray.nodes()
        if n.get("Alive")
    }


class NodeLoss:
    """Kills the raylet of the cluster's last node once every trial of the population has
    ``after`` results (the drill of issue 29: a node lost while its trials train)."""

    def __init__(self, cluster: LocalCluster, results_dir: Path, size: int, after: int) -> None:
        self.cluster, self.results_dir, self.size, self.after = cluster, results_dir, size, after
        self.node = cluster.nodes[-1]
        self.killed_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> NodeLoss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            counts = [
                len(f.read_text().splitlines()) for f in self.results_dir.glob("*/result.json")
            ]
            if len(counts) == self.size and min(counts) >= self.after:
                os.kill(self.cluster.raylet(self.node), signal.SIGKILL)
                self.killed_at = time.time()
                return


def drill_checks(resolved: Any, iterations: int) -> dict[str, Any]:
    """What the drill must leave: every trial at its stop rule, one MLflow run a trial,
    FINISHED, with no gap in its steps, and a lineage without a hole; and how many trials
    failed (their processes were on the lost node) and went on from a checkpoint."""
    from mlflow.tracking import MlflowClient

    from workbench.analysis.lineage import check_sequence, read_jsonl
    from workbench.names import LINEAGE_FILE, STORE_FILE

    trials = read_trials(resolved.results_dir)
    client = MlflowClient(f"sqlite:///{resolved.results_dir.parent / STORE_FILE}")
    experiment = client.get_experiment_by_name(resolved.experiment.name)
    runs = client.search_runs(
        [experiment.experiment_id], filter_string="tags.`workbench.role` = 'trial'"
    )
    gaps = []
    for run in runs:
        steps = sorted(
            m.step for m in client.get_metric_history(run.info.run_id, "training_iteration")
        )
        if steps != list(range(1, len(steps) + 1)):
            gaps.append(run.info.run_name)
    lineage = resolved.results_dir / LINEAGE_FILE
    records = read_jsonl(lineage) if lineage.exists() else []
    return {
        "finished": sum(rows[-1]["training_iteration"] == iterations for rows in trials.values()),
        "failed_and_restored": sum(int(r.data.tags.get("workbench.failures", 0)) > 0 for r in runs),
        "mlflow_runs": len(runs),
        "mlflow_finished": sum(r.info.status == "FINISHED" for r in runs),
        "mlflow_gaps": gaps,
        "lineage_records": len(records),
        "lineage_problems": check_sequence(records),
    }


def experiment_data(
    size: int,
    iterations: int,
    node_cpus: float,
    nodes: int,
    folder: Path,
    runners: int = 0,
    stop: str = "iterations",
) -> dict[str, Any]:
    """The main experiment at this size, each of a trial's processes (its main one and each
    env runner) at a share of a node such that the whole population is placed at once:
    ceil(processes / nodes) a node. With env runners, a node's share need not be whole
    trials, so that some trials' placement groups span nodes. ``stop``: ``iterations``
    each trial, or (``budget``) the same env steps as a budget for the whole population
    (``stop.population_env_steps``), which ends every trial at once."""
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
    data["search_space"]["file"] = str(ROOT / "search_spaces" / data["search_space"]["file"])
    return data


def write_experiment(
    size: int, args: argparse.Namespace, folder: Path, name: str = "", stop: str = "iterations"
) -> Path:
    where = folder / (name or f"size{size}")
    where.mkdir(parents=True)
    path = where / "scale.yaml"
    data = experiment_data(
        size, args.iterations, args.cpus_per_node, args.nodes, where, args.env_runners, stop
    )
    path.write_text(yaml.safe_dump(data))
    return path


def probe(args: argparse.Namespace, folder: Path) -> tuple[Any, Any]:
    """The plan's --probe of the experiment (one trial's sampling and learner, measured
    here), and the trial's costs the forecast makes of it: the probe whose train() cost is
    the median of three."""
    from workbench.experiment.resolve import load_and_resolve
    from workbench.plan.population import trial_costs
    from workbench.plan.throughput import probe_throughput
    from workbench.trial.config import build_config

    resolved = load_and_resolve(write_experiment(4, args, folder, "probe"))
    config = build_config(resolved.experiment, resolved.defaults)
    probes = []
    for _ in range(1 if args.quick else 3):  # a probe is a few seconds: the median of three
        try:
            seconds = 0.5 if args.quick else 2.0
            rate = probe_throughput(resolved.experiment, resolved.search_space, config, seconds)
        finally:
            import ray

            ray.shutdown()  # in case building the algorithm started a local Ray
        costs = trial_costs(resolved.search_space, config, rate, processes=1 + args.env_runners)
        probes.append((costs.iteration_cpu_s if costs else 0.0, rate, costs))
    _, rate, costs = sorted(probes, key=lambda p: p[0])[len(probes) // 2]
    return rate, costs


_START = """
import resource, sys
from workbench.experiment.resolve import load_and_resolve
from workbench.trial.config import build_config
resolved = load_and_resolve(sys.argv[1])
config = build_config(resolved.experiment, resolved.defaults).env_runners(num_env_runners=0)
from workbench.trial import eager_torch
eager_torch.install()  # as a trial process does before it builds its algorithm
algo = config.build_algo()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(usage.ru_utime + usage.ru_stime)
algo.stop()
"""


def start_cpu_s(args: argparse.Namespace, folder: Path) -> float:
    """CPU seconds of a fresh process that imports the workbench, torch and RLlib and builds
    the experiment's algorithm (what each trial process does before its first train()),
    the median of three."""
    path = write_experiment(4, args, folder, "start")
    runs = []
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-c", _START, str(path)],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
            env={**os.environ, "RAY_ADDRESS": ""},
        )
        runs.append(float(out.stdout.split()[-1]))
    return statistics.median(runs)


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


def clone_jumps(results_dir: Path) -> dict[str, int]:
    """The population's clones by where they moved the target (its lineage): ahead to a
    donor further on, back to one behind it, or to the same iteration; and the iterations
    they skipped, net (the train() calls they saved)."""
    from workbench.analysis.lineage import read_jsonl
    from workbench.names import LINEAGE_FILE

    lineage = results_dir / LINEAGE_FILE
    out = {"clones": 0, "ahead": 0, "back": 0, "same": 0, "net_skipped": 0}
    for record in read_jsonl(lineage) if lineage.exists() else []:
        # From the iteration of the result the exploit was decided on: Tune's
        # target_iteration is the result before it.
        jump = record.restored_from - record.stopped_at
        out["clones"] += 1
        out["ahead" if jump > 0 else "back" if jump < 0 else "same"] += 1
        out["net_skipped"] += jump
    return out


def run_size(
    size: int,
    args: argparse.Namespace,
    cluster: LocalCluster,
    folder: Path,
    rate: Any,
    round_: int = 1,
    stop: str = "iterations",
) -> Any:
    from workbench.experiment.resolve import load_and_resolve

    resolved = load_and_resolve(
        write_experiment(size, args, folder, f"size{size}-{stop}-{round_}", stop)
    )
    plan = planned(resolved, cluster.address, rate)
    if plan.concurrent < size:
        raise SystemExit(f"population of {size}: only {plan.concurrent} at once; {plan.summary()}")
    labels = node_labels()
    plan_labels = {node.name: labels.get(node.node_id, node.name) for node in plan.cluster.nodes}
    raylets = {cluster.raylet(node): node.name for node in cluster.nodes}
    loss = NodeLoss(cluster, resolved.results_dir, size, args.iterations // 3)
    cpu_before = os.times()
    counters_before = machine_counters()
    with (
        TrialMemory(raylets, cluster) as memory,
        PlacementWatch(labels, expected=None if args.lose_node else size) as placement,
        loss if args.lose_node else contextlib.nullcontext(),
    ):
        summary, fit = timed_launch_run(resolved)
    cpu_after = os.times()
    counters_after = machine_counters()
    # The driver's work: its process's CPU less the benchmark's own sampling threads'.
    watching_cpu_s = memory.own_cpu_s + placement.own_cpu_s
    driver_cpu_s = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    driver_cpu_s -= watching_cpu_s
    if summary.errors:
        raise SystemExit(f"population of {size}: {summary.errors} trials errored")
    trials = read_trials(resolved.results_dir)
    steps = sum(
        number_at(r, "env_runners", "num_env_steps_sampled") or 0.0
        for rows in trials.values()
        for r in rows
    )
    train_s = sum(float(r["time_this_iter_s"]) for rows in trials.values() for r in rows)
    peaks = sorted(memory.peak_mb.values())
    per_node: dict[str, int] = {}
    for pid in memory.peak_mb:
        node = memory.node_of.get(pid, "?")
        per_node[node] = per_node.get(node, 0) + 1
    trial_cpu_s, ray_cpu_s = memory.cpu_s()
    figures = {
        "size": size,
        "round": round_,
        "stop": stop,
        "nodes": args.nodes,
        "env_runners": args.env_runners,
        "wall_s": fit.seconds,
        "env_steps": steps,
        "rate": steps / fit.seconds,
        "results": sum(len(rows) for rows in trials.values()),
        "iterations": args.iterations,
        "driver_cpu_s": driver_cpu_s,
        "watching_cpu_s": watching_cpu_s,
        "trial_cpu_s": trial_cpu_s,
        "ray_cpu_s": ray_cpu_s,
        "outside": 1.0 - train_s / (size * fit.seconds),
        "trial_processes": len(peaks),
        "rss_median_mb": statistics.median(peaks) if peaks else float("nan"),
        "rss_max_mb": peaks[-1] if peaks else float("nan"),
        "rss_sum_mb": sum(peaks),
        "per_node": dict(sorted(per_node.items())),
        "machine": {
            name: counters_after[name] - counters_before[name]
            for name in counters_after
            if name in counters_before
        },
        "min_available_mb": memory.min_available_mb,
    }
    figures["placement"] = {
        "planned": {plan_labels[k]: v for k, v in plan.bundles_per_node().items()},
        "planned_across_nodes": plan.spanning,
        "ray": placement.bundles_per_node(),
        "ray_across_nodes": placement.spanning,
        "ray_groups": len(placement.groups),
    }
    # Ray breaks ties between equally free nodes in its own order: the plan names which
    # nodes hold how many bundles up to that.
    figures["placement"]["same_counts"] = sorted(
        figures["placement"]["planned"].values()
    ) == sorted(figures["placement"]["ray"].values())
    forecast = plan.forecast
    if forecast is not None:
        figures["forecast"] = {
            "results_per_s": forecast.iterations_per_s,
            "results": forecast.results,
            "outside": forecast.outside,
            "before": forecast.before,
            "after": forecast.after,
            "clones": forecast.clones,
            "clones_back": forecast.clones_back,
            "wall_s": forecast.wall_s,
            "bound": forecast.bound,
            "cores": forecast.cores,
            "iteration_cpu_s": forecast.costs.iteration_cpu_s,
            "iteration_costs": forecast.costs.iterations,  # (CPU s, own s) of the draws
            # The same of each trial's own first draw, in the run's order (None: unknown).
            "drawn_costs": forecast.costs.drawn,
        }
    figures["clones"] = clone_jumps(resolved.results_dir)
    if len(trials) == size:
        figures.update(outside_train_split(trials, fit))
        figures["long_waits"] = long_waits(trials, fit.started_at)
        # Each trial's wait before its first train() began, shortest first: how the starts
        # spread over the population (all alike where they share the cores evenly).
        figures["first_train_at_s"] = sorted(
            float(rows[0]["timestamp"]) - fit.started_at - float(rows[0]["time_this_iter_s"])
            for rows in trials.values()
            if rows
        )
        # Each trial's time from its last result to the end of fit(), shortest first: the
        # shortest is the run's end after the population's last result (the last
        # checkpoints, the actors stopping, fit() returning); the rest is the trials that
        # finished first waiting for the slowest.
        figures["last_result_to_end_s"] = sorted(
            fit.ended_at - float(rows[-1]["timestamp"]) for rows in trials.values() if rows
        )
    if args.lose_node:
        if loss.killed_at is None:
            raise SystemExit(f"population of {size}: the node was never lost")
        figures["lost"] = {
            "node": loss.node.name,
            "seconds_into_fit": loss.killed_at - fit.started_at,
            **drill_checks(resolved, args.iterations),
        }
    return figures


def driver_drill(size: int, args: argparse.Namespace, cluster: LocalCluster, folder: Path) -> Any:
    """The killed-driver drill at this size: `workbench run --address` as its own process,
    SIGKILLed once every trial has reached a third of its iterations, then `workbench resume
    --address` on the same cluster; what the drill must leave (``drill_checks``), and how
    many trials went on from a checkpoint rather than from the start."""
    from workbench.experiment.resolve import load_and_resolve

    path = write_experiment(size, args, folder)
    resolved = load_and_resolve(path)
    planned(resolved, cluster.address, None)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": ""}
    workbench = str(Path(sys.executable).parent / "workbench")
    log = folder / f"drill{size}.log"
    after = args.iterations // 3
    started = time.monotonic()
    with log.open("w") as sink:
        driver = subprocess.Popen(
            [
                workbench,
                "run",
                str(path),
                "--name",
                resolved.experiment.name,
                "--address",
                cluster.address,
            ],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=path.parent,
        )
    try:
        while True:
            rows = read_trials(resolved.results_dir) if resolved.results_dir.is_dir() else {}
            # PBT's clones jump ahead: a trial's iteration, not its count of results.
            reached = [r[-1]["training_iteration"] for r in rows.values() if r]
            if len(reached) == size and min(reached) >= after:
                break
            if driver.poll() is not None:
                raise SystemExit(f"the driver ended before the kill: see {log}")
            time.sleep(0.5)
        killed_at = time.monotonic() - started
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    before = {name: len(r) for name, r in read_trials(resolved.results_dir).items()}
    resume_started = time.monotonic()
    resumed = subprocess.run(
        [workbench, "resume", str(resolved.results_dir), "--address", cluster.address],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=path.parent,
    )
    if resumed.returncode != 0:
        raise SystemExit(f"resume failed ({resumed.returncode}): {resumed.stderr[-2000:]}")
    trials = read_trials(resolved.results_dir)
    restored = sum(
        1
        for name, rows in trials.items()
        if before.get(name, 0) < args.iterations
        and len(rows) > before.get(name, 0)
        and rows[before[name]].get("iterations_since_restore") == 1
        and rows[before[name]]["training_iteration"] > 1
    )
    return {
        "size": size,
        "driver_drill": {
            "killed_s": killed_at,
            "results_at_kill": sum(before.values()),
            "resume_s": time.monotonic() - resume_started,
            "training_at_kill": sum(n < args.iterations for n in before.values()),
            "restored_from_checkpoint": restored,
            **drill_checks(resolved, args.iterations),
        },
    }


def _trials(f: dict[str, Any]) -> str:
    """A run's population, and its stop where it is the population's budget."""
    return f"{f['size']}" + (" (budget)" if f.get("stop") == "budget" else "")


def report(every: list[dict[str, Any]]) -> None:
    rows = [f for f in every if "wall_s" in f]  # the timed sizes (not the driver drill's)
    if rows:
        print(
            "\n| trials | round | fit s | env steps/s | outside train() | before first | between "
            "| after last | trial RSS MB median [max] | RSS sum GB | trial processes per node |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for f in rows:
            split = [
                100 * f.get(f"outside_{p}", float("nan")) for p in ("before", "between", "after")
            ]
            nodes = ", ".join(f"{k} {v}" for k, v in f["per_node"].items())
            print(
                f"| {_trials(f)} | {f.get('round', 1)} | {f['wall_s']:.0f} | {f['rate']:.0f} "
                f"| {100 * f['outside']:.1f}% "
                f"| {split[0]:.1f}% | {split[1]:.1f}% | {split[2]:.1f}% "
                f"| {f['rss_median_mb']:.0f} [{f['rss_max_mb']:.0f}] "
                f"| {f['rss_sum_mb'] / 1024:.1f} | {nodes} |"
            )
        for f in rows:
            print(
                f"population {_trials(f)}, round {f.get('round', 1)}: the driver's process used "
                f"{f['driver_cpu_s']:.0f} CPU s "
                f"({100 * f['driver_cpu_s'] / f['wall_s']:.0f}% of a core over fit()), "
                f"{1000 * f['driver_cpu_s'] / max(f['results'], 1):.0f} ms a result "
                f"({f['results']} results)"
                + (
                    f"; the benchmark's sampling threads beside it {f['watching_cpu_s']:.1f} CPU s"
                    if "watching_cpu_s" in f
                    else ""
                )
            )
            if "trial_cpu_s" in f:
                cores = f.get("forecast", {}).get("cores")
                used = (
                    f["driver_cpu_s"]
                    + f.get("watching_cpu_s", 0.0)
                    + f["trial_cpu_s"]
                    + f["ray_cpu_s"]
                )
                print(
                    f"  the trial processes {f['trial_cpu_s']:.0f} CPU s "
                    f"({f['trial_cpu_s'] / max(f['results'], 1):.2f} a result), Ray's other "
                    f"processes {f['ray_cpu_s']:.0f} CPU s "
                    f"({100 * f['ray_cpu_s'] / f['wall_s']:.0f}% of a core)"
                    + (
                        f"; with the driver {100 * used / (cores * f['wall_s']):.0f}% of the "
                        f"{cores:g} cores over fit()"
                        if cores
                        else ""
                    )
                )
            ends = f.get("last_result_to_end_s")
            if ends:
                slot = len(ends) * f["wall_s"]
                end = ends[0]
                print(
                    f"  after the last results: fit() ended {end:.0f} s after the population's "
                    f"last result ({100 * len(ends) * end / slot:.1f}% of the slot time); the "
                    f"trials that finished first waited {statistics.median(ends) - end:.0f} s "
                    f"(median) for the slowest ({100 * (sum(ends) - len(ends) * end) / slot:.1f}%)"
                )
            clones = f.get("clones")
            if clones:
                predicted = f.get("forecast", {}).get("results")
                print(
                    f"  clones: {clones['clones']} ({clones['ahead']} to a donor ahead, "
                    f"{clones['back']} back, {clones['same']} to the same iteration), "
                    f"{clones['net_skipped']:+d} iterations skipped net"
                    + (
                        f"; the model cloned {f['forecast'].get('clones', float('nan')):.1f} "
                        f"times ({f['forecast'].get('clones_back', 0.0):.1f} back) and skipped "
                        f"{f['size'] * f['iterations'] - predicted:+.0f}"
                        if predicted is not None and f.get("stop", "iterations") == "iterations"
                        else ""
                    )
                )
            machine = f.get("machine")
            if machine:
                print(
                    f"  the machine: {machine.get('pgmajfault', 0)} major page faults, "
                    f"{machine.get('pgscan_kswapd', 0) + machine.get('pgscan_direct', 0)} "
                    f"pages scanned to reclaim ({machine.get('pgscan_direct', 0)} by "
                    f"allocating processes), {machine.get('ctxt', 0) / f['wall_s']:.0f} "
                    f"context switches a second, MemAvailable down to "
                    f"{f['min_available_mb'] / 1024:.1f} GB"
                    + (
                        f", some task waiting on I/O {machine['io_some_us'] / 1e6:.0f} s "
                        f"({100 * machine['io_some_us'] / 1e6 / f['wall_s']:.0f}% of fit())"
                        if "io_some_us" in machine
                        else ""
                    )
                )
            waits = f.get("long_waits")
            if waits:
                # Where the population stalled: the 10 s waits between results, by the
                # tenth of fit() they ended in.
                tenths = [0.0] * 10
                for ended, wait, *_ in waits:
                    tenths[min(9, max(0, int(10 * ended / f["wall_s"])))] += wait
                waited = sum(tenths)
                print(
                    f"  {len(waits)} waits of 10 s or more between a trial's results, "
                    f"{waited:.0f} s in all ("
                    f"{100 * waited / (f['size'] * f['wall_s']):.1f}% "
                    "of the slot time); by tenth of fit(): " + ", ".join(f"{t:.0f}" for t in tenths)
                )
        print(
            "\nPlacement: bundles per node as `workbench plan` places the trials at once, and as "
            "Ray placed them (its placement group table, at the moment the most groups existed; "
            "Ray breaks ties between equally free nodes in its own order, so the counts a node "
            "are compared, not the names)"
        )
        for f in rows:
            place = f["placement"]
            planned = ", ".join(f"{k} {v}" for k, v in sorted(place["planned"].items()))
            actual = ", ".join(f"{k} {v}" for k, v in place["ray"].items())
            print(
                f"population {_trials(f)}, round {f.get('round', 1)}: plan {planned} "
                f"({place['planned_across_nodes']} trials "
                f"across nodes); Ray {actual} ({place['ray_groups']} groups, "
                f"{place['ray_across_nodes']} across nodes); "
                f"{'the same' if place.get('same_counts') else 'not the same'} counts a node"
            )
    forecasts = [f for f in rows if "forecast" in f]
    if forecasts:
        forecast_table(forecasts)
    for f in every:
        if "driver_drill" in f:
            d = f["driver_drill"]
            print(
                f"population {f['size']}: the driver SIGKILLed {d['killed_s']:.0f} s into the "
                f"run ({d['results_at_kill']} results, {d['training_at_kill']} trials "
                f"training); `workbench resume --address` took {d['resume_s']:.0f} s; "
                f"{d['restored_from_checkpoint']} of them went on from a checkpoint; "
                f"{d['finished']} of {f['size']} reached their stop rule; MLflow "
                f"{d['mlflow_runs']} trial runs, {d['mlflow_finished']} FINISHED, gaps in "
                f"{d['mlflow_gaps'] or 'none'}; lineage {d['lineage_records']} records, "
                f"problems: {d['lineage_problems'] or 'none'}"
            )
    for f in rows:
        if "lost" in f:
            lost = f["lost"]
            print(
                f"population {f['size']}: {lost['node']} lost {lost['seconds_into_fit']:.0f} s "
                f"into fit(); {lost['failed_and_restored']} trials failed and went on from a "
                f"checkpoint; {lost['finished']} of {f['size']} reached their stop rule; MLflow "
                f"{lost['mlflow_runs']} trial runs, {lost['mlflow_finished']} FINISHED, gaps in "
                f"{lost['mlflow_gaps'] or 'none'}; lineage {lost['lineage_records']} records, "
                f"problems: {lost['lineage_problems'] or 'none'}"
            )


def _spread(values: list[float], scale: float = 1.0, digits: int = 2, unit: str = "") -> str:
    """median [min-max] of values (times scale)."""
    low, mid, high = (scale * v for v in (min(values), statistics.median(values), max(values)))
    return f"{mid:.{digits}f}{unit} [{low:.{digits}f}-{high:.{digits}f}]"


def forecast_table(forecasts: list[dict[str, Any]]) -> None:
    """``workbench plan``'s forecast of each size beside the measured median [min-max] over
    its rounds; the error is against the median, and within its runs' range where the
    forecast lies between the slowest and the fastest round."""
    print(
        "\n`workbench plan`'s forecast beside the measurement, median [min-max] over the rounds "
        "(results per second: all the trials' train() results over fit(); error: forecast / "
        "measured median - 1)"
    )
    print(
        "| trials | rounds | train() calls forecast | measured | results/s forecast | measured "
        "| error | outside train() forecast | measured | error | before the first result "
        "forecast | measured | error | after the last result forecast | measured | error "
        "| forecast bound |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    within = total = 0
    for size, stop in sorted({(f["size"], f.get("stop", "iterations")) for f in forecasts}):
        runs = [f for f in forecasts if (f["size"], f.get("stop", "iterations")) == (size, stop)]
        fc = runs[0]["forecast"]
        rates = [f["results"] / f["wall_s"] for f in runs]
        outside = [f["outside"] for f in runs]
        before = [f.get("outside_before", float("nan")) for f in runs]
        after = [f.get("outside_after", float("nan")) for f in runs]
        errors = (
            fc["results_per_s"] / statistics.median(rates) - 1,
            fc["outside"] / statistics.median(outside) - 1,
        )
        within += sum(abs(e) <= 0.25 for e in errors)
        total += len(errors)
        print(
            f"| {_trials(runs[0])} | {len(runs)} | {fc.get('results', float('nan')):.0f} "
            f"| {_spread([f['results'] for f in runs], digits=0)} "
            f"| {fc['results_per_s']:.2f} | {_spread(rates)} | {100 * errors[0]:+.0f}% "
            f"| {100 * fc['outside']:.1f}% | {_spread(outside, 100, 1, '%')} "
            f"| {100 * errors[1]:+.0f}% "
            f"| {100 * fc.get('before', float('nan')):.1f}% | {_spread(before, 100, 1, '%')} "
            f"| {100 * (fc.get('before', float('nan')) / statistics.median(before) - 1):+.0f}% "
            f"| {100 * fc.get('after', float('nan')):.1f}% | {_spread(after, 100, 1, '%')} "
            f"| {100 * (fc.get('after', float('nan')) / statistics.median(after) - 1):+.0f}% "
            f"| {fc['bound']} |"
        )
    first = forecasts[0]["forecast"]
    print(
        f"within 25% of the measured median: {within} of {total} (results a second and the "
        f"share outside train())\nforecast inputs: one train() ~{first['iteration_cpu_s']:.3g} "
        f"CPU s (the probe, averaged over the search space), {first['cores']:g} cores shared "
        f"by the nodes"
    )


def calibration(
    rows: list[dict[str, Any]],
    grid: list[tuple[float, ...]] | None = None,
    shipped: Any = None,
) -> dict[str, float]:
    """The constants of workbench/plan/population.py from these runs (each population
    placed at once; the train() costs are their probe's, which the runs carry):

    * measured: the driver's CPU a result (its process's over the runs, a result), and the
      share of a core Ray's own processes kept busy on each node (the median over the runs);
    * fitted first, alone: the noise of the scores about the trials' progress (0 to 32
      iterations) and, under the experiment's tested rule, the share of the decisions with
      a donor that clone (1, 0.95, ..., 0): the pair whose simulated runs come nearest the
      runs' clones and the iterations those skipped net (over the sizes, the sum of each
      size's median; the larger relative error of the two as small as it can be), the
      other constants as shipped (``shipped``: others; the counts hardly depend on them:
      they are figures of the population's scores, not of the machine's speed);
    * fitted: a process's start, a result's fixed wait outside train(), its wait growing
      with the trial processes per core (a factor and an exponent), and how much dearer a
      train() is a process per core: the five, on a grid refined around its best point
      (``grid``: another grid to start from), whose
      simulated runs come nearest the median over each size's rounds of the results per
      second, of the share outside train() (the figures the benchmark's bar judges) and of
      the part of that share before the trials' first results (the largest relative error
      of those, over the sizes, as small as it can be). Without that part, the start is free
      to stand in for whatever the waits between results miss, and the forecast then puts
      the trials' time outside train() in the wrong place.
    """
    from workbench.plan.population import (
        MEASURED,
        Constants,
        TrialCosts,
        exploits_of,
        forecast,
        with_constants,
    )

    probe = rows[0]["forecast"]
    costs = TrialCosts(
        processes=1 + int(rows[0].get("env_runners", 0)),
        start_s=0.0,
        iterations=tuple((float(c), float(w)) for c, w in probe["iteration_costs"]),
        result_s=0.0,
        result_s_per_process=0.0,
        crowd_exponent=1.0,
        train_per_process=0.0,
        driver_s=0.0,
        ray_cores_per_node=0.0,
        clone_share=1.0,
        source="the runs' probe",
    )
    cores = probe["cores"]
    driver = sum(f["driver_cpu_s"] for f in rows) / max(sum(f["results"] for f in rows), 1)
    ray = statistics.median(f["ray_cpu_s"] / f["wall_s"] / f["nodes"] for f in rows)
    exploits = exploits_of(_scheduler())
    groups: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
    for f in rows:  # the rounds of each size
        groups.setdefault((f["size"], f.get("iterations", 40), f["nodes"]), []).append(f)
    measured = {
        key: (
            statistics.median(f["results"] / f["wall_s"] for f in runs),
            statistics.median(f["outside"] for f in runs),
            statistics.median(f["outside_before"] for f in runs),
            statistics.median(f["results"] for f in runs),
            _median_clones(runs),
        )
        for key, runs in groups.items()
    }

    # Each size's own first draws (the same seed every round), where its runs recorded them.
    drawn = {
        key: tuple((float(c), float(w)) for c, w in own)
        if (own := runs[0].get("forecast", {}).get("drawn_costs"))
        else None
        for key, runs in groups.items()
    }

    def forecasts(constants: Constants) -> Iterator[tuple[Any, tuple[float, ...]]]:
        model = with_constants(costs, constants)
        for (size, iterations, nodes), figures in measured.items():
            fc = forecast(
                replace(model, drawn=drawn[(size, iterations, nodes)]),
                trials=size,
                at_once=size,
                cores=cores,
                iterations=iterations,
                exploits=exploits,
                nodes=nodes,
            )
            yield fc, figures

    def clones_error(point: tuple[float, float]) -> float:
        """The larger relative error of the clones and of the calls they skipped."""
        noise, share = point
        constants = replace(
            shipped or MEASURED,
            driver_s=driver,
            ray_cores_per_node=ray,
            clone_share=share,
            score_noise=noise,
        )
        clones = skipped = clones_measured = skipped_measured = 0.0
        for fc, figures in forecasts(constants):
            if math.isnan(figures[4]):  # runs from before the benchmark counted clones
                continue
            all_calls = fc.trials * fc.iterations
            clones += fc.clones
            skipped += all_calls - fc.results
            clones_measured += figures[4]
            skipped_measured += all_calls - figures[3]
        return max(
            abs(clones / clones_measured - 1) if clones_measured > 0 else clones,
            abs(skipped / skipped_measured - 1) if skipped_measured > 0 else abs(skipped),
        )

    score_noise, clone_share = 0.0, 1.0
    if exploits is not None and not all(math.isnan(figures[4]) for figures in measured.values()):
        shares = [i / 20 for i in range(20, -1, -1)] if exploits.tested else [1.0]
        # (Points that fit alike: the least noise, the largest share.)
        noises = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0)
        score_noise, clone_share = min(
            ((noise, share) for noise in noises for share in shares), key=clones_error
        )

    def error(point: tuple[float, ...]) -> float:
        start, rest, crowd, exponent, dearer = point
        constants = Constants(
            start_s=start,
            result_s=rest,
            result_s_per_process=crowd,
            crowd_exponent=exponent,
            train_per_process=dearer,
            driver_s=driver,
            ray_cores_per_node=ray,
            clone_share=clone_share,
            score_noise=score_noise,
        )
        worst = 0.0
        for fc, (rate, outside, before, *_) in forecasts(constants):
            worst = max(
                worst,
                abs(fc.iterations_per_s / rate - 1),
                abs(fc.outside / outside - 1),
                abs(fc.before / before - 1),
            )
        return worst

    # start s, fixed wait s, wait s per (process per core) ** exponent, exponent, train()
    # dearer per process per core
    grid = grid or [
        (2.0 * s, 0.2 * r, k, e, d)
        for s in range(1, 8)
        for r in range(6)
        for k in (0.0, *(0.002 * 2**i for i in range(8)))
        for e in (1.0, 2.0)
        for d in (0.0, 0.02, 0.05, 0.1)
    ]
    best = min(grid, key=error)
    steps = (1.0, 0.1, max(best[2], 0.002) / 2, 0.0, max(best[4], 0.01) / 2)
    for _ in range(3):  # halve the steps around the best point so far
        near = {
            tuple(max(0.0, b + k * step) for b, k, step in zip(best, ks, steps, strict=True))
            for ks in itertools.product((-1, 0, 1), repeat=5)
        }
        best = min(near, key=error)
        steps = tuple(step / 2 for step in steps)
    start, rest, crowd, exponent, dearer = best
    return {
        "start_s": start,
        "result_s": rest,
        "result_s_per_process": crowd,
        "crowd_exponent": exponent,
        "train_per_process": dearer,
        "driver_s": driver,
        "ray_cores_per_node": ray,
        "clone_share": clone_share,
        "score_noise": score_noise,
        "clones_error": clones_error((score_noise, clone_share)),
        "largest_error": error(best),
    }


def _median_clones(runs: list[dict[str, Any]]) -> float:
    """The median count of clones of the runs that counted them (nan: none did)."""
    counts = [f["clones"]["clones"] for f in runs if "clones" in f]
    return float(statistics.median(counts)) if counts else math.nan


def calibrate(rows: list[dict[str, Any]], earlier: list[str]) -> None:
    """Prints the constants these runs and the earlier ones (files --json wrote) give: the
    runs stopped at their iterations (the model's budget runs are checked, not fitted)."""

    def fitted(f: dict[str, Any]) -> bool:
        return "outside_before" in f and f.get("stop", "iterations") == "iterations"

    runs = [f for f in rows if fitted(f)]
    for extra in earlier:
        runs += [f for f in json.loads(Path(extra).read_text()) if fitted(f)]
    if not runs:
        raise SystemExit("--calibrate: no timed runs to fit")
    constants = calibration(runs)
    print(f"\ncalibration on {len(runs)} runs, workbench/plan/population.py's Constants:")
    for name, value in constants.items():
        print(f"  {name} = {value:.4g}")


def _scheduler() -> Any:
    """The experiment's scheduler section, as the schema reads it."""
    from pydantic import TypeAdapter

    from workbench.experiment.schema import SchedulerSection

    section = yaml.safe_load(EXPERIMENT.read_text())["scheduler"]
    return TypeAdapter(SchedulerSection).validate_python(section)


def forecast_only(args: argparse.Namespace, sizes: list[int], stops: list[str]) -> None:
    """The forecast of every size and stop, as `workbench plan` makes it against the
    benchmark's cluster (``--nodes`` nodes on loopback declaring ``--cpus-per-node`` CPUs,
    which share this machine's cores), from a probe taken now: to set beside runs measured
    earlier, the probe's cost of a train() being the one input that moves with the machine."""
    from workbench.experiment.resolve import load_and_resolve
    from workbench.plan.capacity import make_plan
    from workbench.plan.resources import cluster_from_ray_nodes

    now = datetime.datetime.now(datetime.timezone.utc)
    print("command:", command_line())
    print(f"{now:%Y-%m-%d %H:%M:%S} UTC; load average {os.getloadavg()[0]:.1f} at the start")
    folder = Path(tempfile.mkdtemp(prefix="population_scale-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    rate, costs = probe(args, folder)
    node = {"CPU": args.cpus_per_node, "memory": args.memory_gb_per_node * 2**30 or 2**36}
    nodes = [
        {"Alive": True, "NodeManagerAddress": "127.0.0.1", "NodeID": str(i), "Resources": node}
        for i in range(args.nodes)
    ]
    cluster = cluster_from_ray_nodes(nodes, "the benchmark's nodes on this machine")
    print(
        f"one train() ~{costs.iteration_cpu_s:.3g} CPU s (the probe, averaged over the search "
        f"space); {cluster.cores:g} cores shared by the nodes"
    )
    print(
        "| trials | train() calls | PBT's clones | results/s | outside train() "
        "| before the first result | after the last result | bound |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for size, stop in itertools.product(sizes, stops):
        path = write_experiment(size, args, folder, f"size{size}-{stop}", stop)
        plan = make_plan(load_and_resolve(path), cluster, throughput=rate)
        fc = plan.forecast
        if fc is None:
            raise SystemExit(f"population of {size}: the plan made no forecast")
        label = f"{size}" if stop == "iterations" else f"{size} (budget)"
        print(
            f"| {label} | {fc.results:.0f} | {fc.clones:.1f} | {fc.iterations_per_s:.2f} "
            f"| {100 * fc.outside:.1f}% "
            f"| {100 * fc.before:.1f}% | {100 * fc.after:.1f}% | {fc.bound} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4,8,16,32", help="population sizes, in order")
    parser.add_argument("--iterations", type=int, default=40, help="per trial")
    parser.add_argument(
        "--stops",
        default="iterations",
        help="how each run stops, interleaved: iterations (each trial its --iterations), "
        "budget (the same env steps as stop.population_env_steps: every trial ends at once)",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="runs of every size, the sizes interleaved"
    )
    parser.add_argument("--nodes", type=int, default=4, help="cluster nodes, head included")
    parser.add_argument("--cpus-per-node", type=float, default=2.0)
    parser.add_argument(
        "--memory-gb-per-node",
        type=float,
        default=4.5,
        help="memory a node declares (0: `make cluster-up`'s share of what is free at start, "
        "which holds 28 trials of 0.5 GB rather than 32 when less than 22.9 GiB is free)",
    )
    parser.add_argument(
        "--env-runners",
        type=int,
        default=0,
        help="env runner processes a trial (0: the main process samples), so that a trial's "
        "placement group may span nodes",
    )
    parser.add_argument(
        "--lose-node",
        action="store_true",
        help="kill the last node's raylet once every trial has a third of its iterations",
    )
    parser.add_argument(
        "--kill-driver",
        action="store_true",
        help="instead of timing each size: SIGKILL `workbench run --address` once every "
        "trial has a third of its iterations, then `workbench resume --address`",
    )
    parser.add_argument(
        "--no-forecast", action="store_true", help="skip the plan's probe and forecast"
    )
    parser.add_argument(
        "--forecast-only",
        action="store_true",
        help="the plan's probe and its forecast of each size and stop on the same cluster "
        "(its nodes on this machine), without starting the cluster or any run",
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="also print the constants of workbench/plan/population.py these runs give",
    )
    parser.add_argument(
        "--with-runs",
        nargs="*",
        default=[],
        help="with --calibrate: also fit to these earlier runs (files --json wrote); with "
        '--sizes "" only to them, running nothing',
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run (the test)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    stops = [s for s in args.stops.split(",") if s]
    if not stops or set(stops) - {"iterations", "budget"}:
        parser.error(f"--stops {args.stops!r}: a list of iterations and budget")
    if "budget" in stops and (args.lose_node or args.kill_driver):
        parser.error("--stops budget: the drills count the trials at their iterations")
    if not sizes and args.calibrate:  # --sizes "": a fit to earlier runs only
        calibrate([], args.with_runs)
        return 0
    if args.forecast_only:
        forecast_only(args, sizes, stops)
        return 0
    if args.quick:
        # Trials sampling in their own process: each env runner is one more process to
        # start (about 5 CPU s alone); tests/cluster places trials whose runners span nodes.
        sizes, args.iterations, args.nodes, args.env_runners = [4], 2, 2, 0
        args.rounds = 1

    os.environ["RAY_AUTH_MODE"] = "disabled"  # the cluster's setting (deploy/local_cluster.py)
    os.environ.pop("RAY_ADDRESS", None)
    import ray

    print("command:", command_line())
    now = datetime.datetime.now(datetime.timezone.utc)
    print(
        f"{now:%Y-%m-%d %H:%M:%S} UTC; {os.cpu_count()} CPUs ({cpu_model()}), load average "
        f"{os.getloadavg()[0]:.1f} at the start; python {platform.python_version()}, "
        f"ray {ray.__version__}; {args.nodes} nodes x {args.cpus_per_node:g} CPUs, "
        f"{args.iterations} iterations a trial",
        flush=True,
    )
    cluster = LocalCluster(
        cpus=[args.cpus_per_node] * args.nodes,
        memory_gb=[args.memory_gb_per_node] * args.nodes if args.memory_gb_per_node else None,
        ray=str(Path(sys.executable).parent / "ray"),
    )
    folder = Path(tempfile.mkdtemp(prefix="population_scale-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    rows: list[dict[str, Any]] = []
    skip_probe = args.no_forecast or args.kill_driver
    rate, _ = (None, None) if skip_probe else probe(args, folder)
    try:
        cluster.up()
        ray.init(address=cluster.address, log_to_driver=False)
        for round_ in range(1, (1 if args.kill_driver else args.rounds) + 1):
            # The sizes and stops interleaved, round after round.
            for size, stop in itertools.product(sizes, stops):
                started = time.monotonic()
                if args.kill_driver:
                    rows.append(driver_drill(size, args, cluster, folder))
                else:
                    rows.append(run_size(size, args, cluster, folder, rate, round_, stop))
                print(
                    f"population {_trials(rows[-1])}, round {round_}: done in "
                    f"{time.monotonic() - started:.0f} s",
                    flush=True,
                )
                if args.json:  # each run as it ends: a long series stopped early keeps them
                    Path(args.json).write_text(json.dumps(rows, indent=1))
    finally:
        ray.shutdown()
        left = cluster.stop()
    report(rows)
    if args.calibrate:
        print(f"\na trial process started alone: {start_cpu_s(args, folder):.3g} CPU s")
        calibrate(rows, args.with_runs)
    if left:
        print(f"processes of the cluster left running: {left}")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
