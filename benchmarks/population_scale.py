"""Population scale: a PBT population of 4, 8, 16 and 32 trials on a four-node Ray cluster on
this machine, each size timed for its time outside ``train()`` and measured for the memory of
its trial processes and where Ray placed them.

Usage::

    .venv/bin/python benchmarks/population_scale.py                  # 4, 8, 16, 32 on 4 nodes
    .venv/bin/python benchmarks/population_scale.py --sizes 8,32 --iterations 20
    .venv/bin/python benchmarks/population_scale.py --sizes 32 --stops iterations,budget
    .venv/bin/python benchmarks/population_scale.py --sizes 32 --costs searched,equal
    .venv/bin/python benchmarks/population_scale.py --sizes 32,16 --costs equal --snapshot-lags 0,2
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
interleaves the two. With ``--costs equal`` the search space's two keys that set a
``train()``'s learning work (``num_epochs``, ``minibatch_size``) are fixed where a
``train()`` costs about what the space's do in a run (``scale_setup.EQUAL_COSTS``), the
rest searched as before: every member's ``train()`` costs the same, so what is left
outside ``train()`` is the population's coordination, with no member waiting for a dearer
one; ``--costs searched,equal`` interleaves the two, each with its own probe. With
``--snapshot-lags 0,2`` each run is made once with the experiment snapshot written after every
trial checkpoint (0, the anchor) and once within two seconds of it (the workbench's,
``workbench.tune_ext.snapshot_pace``), interleaved, and a table sets each lag's figures
beside the anchor's with the paired difference of each round.

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

This file runs a size and holds the command line; its parts are ``scale_setup`` (the
experiment at a size, the probe), ``scale_watch`` (what is sampled during a run and read
after it), ``scale_drills`` (the lost node, the killed driver), ``scale_report`` (the
tables) and ``scale_calibration`` (``--calibrate``).
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
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: python benchmarks/population_scale.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (
    command_line,
    cpu_model,
    number_at,
    outside_train_split,
    read_trials,
    timed_launch_run,
)
from benchmarks.scale_calibration import calibrate
from benchmarks.scale_drills import NodeLoss, drill_checks, driver_drill
from benchmarks.scale_report import population_label, report
from benchmarks.scale_setup import COSTS, planned, probe, write_experiment
from benchmarks.scale_watch import (
    CheckpointFolders,
    PlacementWatch,
    TrialMemory,
    clone_jumps,
    long_waits,
    machine_counters,
    node_labels,
)
from deploy.local_cluster import LocalCluster


def first_train_began(result: dict[str, Any]) -> float:
    """When the ``train()`` that gave ``result`` began: Tune's whole-second stamp (the
    middle of that second) less the iteration's time."""
    return float(result["timestamp"]) + 0.5 - float(result["time_this_iter_s"])


def _crowd_text(trial: Any) -> str:
    if not trial.crowd_measured:
        return "a crowded train() priced by the documented line"
    return (
        f"a train() among {trial.crowd_saturation:.3g} processes a core cost "
        f"{trial.crowd_ratio:.3g} "
        "times its cost alone (the probe)"
    )


def run_size(
    size: int,
    args: argparse.Namespace,
    cluster: LocalCluster,
    folder: Path,
    rate: Any,
    round_: int = 1,
    stop: str = "iterations",
    costs: str = "searched",
    snapshot_lag_s: float | None = None,
) -> Any:
    from workbench.experiment.resolve import load_and_resolve
    from workbench.tune_ext import snapshot_pace

    resolved = load_and_resolve(
        write_experiment(
            size,
            args,
            folder,
            f"size{size}-{stop}-{costs}-{round_}"
            + ("" if snapshot_lag_s is None else f"-lag{snapshot_lag_s:g}"),
            stop,
            costs,
        )
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
    shipped_lag = snapshot_pace.LAG_S
    if snapshot_lag_s is not None:
        snapshot_pace.LAG_S = snapshot_lag_s  # this run's arm (the driver is this process)
    with (
        TrialMemory(raylets, cluster) as memory,
        PlacementWatch(labels, expected=None if args.lose_node else size) as placement,
        CheckpointFolders(resolved.results_dir) as folders,
        loss if args.lose_node else contextlib.nullcontext(),
    ):
        try:
            summary, fit = timed_launch_run(resolved)
        finally:
            snapshot_pace.LAG_S = shipped_lag
    cpu_after = os.times()
    counters_after = machine_counters()
    # The driver's work: its process's CPU less the benchmark's own sampling threads'.
    watching_cpu_s = memory.own_cpu_s + placement.own_cpu_s + folders.own_cpu_s
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
        "costs": costs,
        **({} if snapshot_lag_s is None else {"snapshot_lag_s": snapshot_lag_s}),
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
    # --no-forecast: no probe, so no forecast (the plan's own estimate is not the probe's).
    forecast = plan.forecast if rate is not None else None
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
            "start_s": forecast.costs.start_s,  # a trial process's, with no crowd
            "start_crowded_s": forecast.start_s,  # among this population's processes
            "start_alone_s": forecast.costs.start_measured_s,  # the probe's fresh process
            # The same of each trial's own first draw, in the run's order (None: unknown).
            "drawn_costs": forecast.costs.drawn,
            # The probe's figures that price a train() at any values (a clone's explored
            # values in the model: --calibrate's).
            "probe": {
                "per_core": rate.per_core,
                "learner_costs": rate.learner_costs,
                "learner_call_s_per_sample": rate.learner_call_s_per_sample,
                "runners": rate.runners,
                "evaluation_s": rate.evaluation_s,
            },
            # The crowd the probe measured: [processes a core, a train() there over alone].
            "crowd": list(rate.crowd) if rate.crowd else None,
            "evaluation_cpu_s": forecast.costs.evaluation_s,  # a train()'s, alone
        }
    folders.look()  # the folders left at the end, should the last sample have missed them
    figures["checkpoint_folders"] = {
        "keep": resolved.experiment.checkpoint.keep,
        "period_s": folders.period_s,
        "peaks": sorted(folders.peak.values()),
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
        # Each trial process's CPU seconds when its first train() began (Tune stamps a
        # result in whole seconds: the middle of that second): its start among the
        # others, to set beside the probe's fresh process alone (``start_alone_s``). A
        # process that Tune handed to a later trial (actor reuse) started once.
        began: dict[int, float] = {}
        for rows in trials.values():
            if rows and "pid" in rows[0]:
                pid = int(rows[0]["pid"])
                began[pid] = min(began.get(pid, math.inf), first_train_began(rows[0]))
        starts = [cpu for pid, at in began.items() if (cpu := memory.cpu_at(pid, at)) is not None]
        figures["start_cpu_s"] = sorted(starts)
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


def forecast_only(
    args: argparse.Namespace, sizes: list[int], stops: list[str], costs: list[str]
) -> None:
    """The forecast of every size, stop and costs, as `workbench plan` makes it against the
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
    probes = {c: probe(args, folder, c) for c in costs}
    node = {"CPU": args.cpus_per_node, "memory": args.memory_gb_per_node * 2**30 or 2**36}
    nodes = [
        {"Alive": True, "NodeManagerAddress": "127.0.0.1", "NodeID": str(i), "Resources": node}
        for i in range(args.nodes)
    ]
    cluster = cluster_from_ray_nodes(nodes, "the benchmark's nodes on this machine")
    for c, (_, trial) in probes.items():
        print(
            f"one train() ~{trial.iteration_cpu_s:.3g} CPU s (the probe, averaged over the "
            f"search space{'' if c == 'searched' else ', its costs equal'}, the short "
            f"evaluations' {trial.evaluation_s:.2g} included); {cluster.cores:g} cores "
            f"shared by the nodes; {_crowd_text(trial)}"
        )
    print(
        "| trials | train() calls | PBT's clones | results/s | outside train() "
        "| before the first result | after the last result | bound |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for size, stop, c in itertools.product(sizes, stops, costs):
        path = write_experiment(size, args, folder, f"size{size}-{stop}-{c}", stop, c)
        plan = make_plan(load_and_resolve(path), cluster, throughput=probes[c][0])
        fc = plan.forecast
        if fc is None:
            raise SystemExit(f"population of {size}: the plan made no forecast")
        label = population_label({"size": size, "stop": stop, "costs": c})
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
        "--costs",
        default="searched",
        help="the members' train() costs, interleaved: searched (the main experiment's "
        "search space), equal (num_epochs and minibatch_size fixed where a train() costs "
        "about what the space's do in a run, the rest searched: no member waits for a "
        "dearer one)",
    )
    parser.add_argument(
        "--snapshot-lags",
        default="",
        help="arms, interleaved: the longest a trial checkpoint waits for the experiment "
        "snapshot, in seconds (workbench.tune_ext.snapshot_pace; 0: a snapshot after every "
        "checkpoint, the anchor); default: the workbench's, one arm",
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
        help="also print the constants of workbench/plan/population.py these runs give, and "
        "the forecast's errors on them with the shipped constants, with the measured ones "
        "taken from the runs, and with the fit's",
    )
    parser.add_argument(
        "--with-runs",
        nargs="*",
        default=[],
        help="with --calibrate: also fit to these earlier runs (files --json wrote); with "
        '--sizes "" only to them, running nothing',
    )
    parser.add_argument(
        "--keep-clones",
        action="store_true",
        help="with --calibrate: keep the shipped scores' noise and clone share (the "
        "population's counts, not the machine's) and fit the machine's constants only",
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
    costs = [c for c in args.costs.split(",") if c]
    if not costs or set(costs) - set(COSTS):
        parser.error(f"--costs {args.costs!r}: a list of {' and '.join(COSTS)}")
    if costs != ["searched"] and (args.lose_node or args.kill_driver):
        parser.error("--costs: the drills run the main experiment's search space")
    try:
        lags: list[float | None] = [float(x) for x in args.snapshot_lags.split(",") if x]
    except ValueError:
        lags = [-1.0]
    if any(lag is not None and not 0 <= lag < 60 for lag in lags):
        parser.error(f"--snapshot-lags {args.snapshot_lags!r}: seconds, each in [0, 60)")
    if lags and args.kill_driver:
        parser.error("--snapshot-lags: the driver drill runs the workbench's own")
    lags = lags or [None]
    if not sizes and args.calibrate:  # --sizes "": a fit to earlier runs only
        calibrate([], args.with_runs, keep_clones=args.keep_clones)
        return 0
    if args.forecast_only:
        forecast_only(args, sizes, stops, costs)
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
    rates = {c: None if skip_probe else probe(args, folder, c)[0] for c in costs}
    try:
        cluster.up()
        ray.init(address=cluster.address, log_to_driver=False)
        for round_ in range(1, (1 if args.kill_driver else args.rounds) + 1):
            # The sizes, stops, costs and lags interleaved, round after round; the lags in
            # turn first (a machine that slows within a round favours neither arm).
            order = lags if round_ % 2 else lags[::-1]
            for size, stop, c, lag in itertools.product(sizes, stops, costs, order):
                started = time.monotonic()
                if args.kill_driver:
                    rows.append(driver_drill(size, args, cluster, folder))
                else:
                    rows.append(
                        run_size(size, args, cluster, folder, rates[c], round_, stop, c, lag)
                    )
                print(
                    f"population {population_label(rows[-1])}, round {round_}: done in "
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
        calibrate(rows, args.with_runs, keep_clones=args.keep_clones)
    if left:
        print(f"processes of the cluster left running: {left}")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
