"""Tune's overhead around RLlib: the cost of a PBT exploit, and how much of a population's
time is spent outside ``train()``, with the workbench's settings against Tune's defaults.

Usage::

    .venv/bin/python benchmarks/tune_overhead.py            # about 5 minutes
    .venv/bin/python benchmarks/tune_overhead.py --quick    # a smoke run (the test)

Method (one local Ray of ``--cpus`` CPUs for the whole script, every round interleaved):

* **A PBT exploit**, measured on Ray actors of the main experiment's algorithm
  (``experiments/cartpole_pbt.yaml``: PPO, sampling and learning in the actor, half a CPU),
  both ways Tune can do it: the donor's ``save()`` (an RLlib checkpoint on local disk),
  then either a NEW actor (a fresh worker process that imports torch and RLlib and builds
  the algorithm: Tune's default, ``reuse_actors=False``, the only way before the workbench
  gave the algorithm a ``reset_config``) and its ``restore()`` of that checkpoint, or
  what the workbench does (``reuse_actors=True``): Tune's ``reset()`` of a kept actor with
  the new config (the workbench's ``reset_config`` tears the algorithm down and builds it
  again in the same process) and its ``restore()``. Beside them, in the same rounds, the
  anchor: one ``train()`` of the donor. Each figure is the median/min/max over
  ``--exploit-rounds`` rounds, in ms.
* **Time outside train()**: a PBT population of ``--population`` trials (8) of the same
  experiment, each at a quarter of a CPU so that all of them run at once on 2 CPUs,
  ``--iterations`` iterations each, perturbation interval ``--interval``. Two setups per
  round, their order alternating between rounds:

  - *workbench*: ``workbench.run.launch.run`` (its PBT with clamped mutations and lineage,
    a checkpoint every ``checkpoint.frequency`` iterations, pruning by CheckpointGuard,
    an experiment snapshot after every trial checkpoint, MLflow tracking, the progress
    table, ``reuse_actors=True`` with its ``reset_config``);
  - *Tune defaults*: ``tune.Tuner`` with the same RLlib config, search space and a plain
    ``PopulationBasedTraining`` (same mutations; ``require_attrs=False``, without which
    Tune fails the run when the first iteration ends no episode), ``CheckpointConfig()``
    (no periodic checkpoints: PBT saves a donor when it exploits it; ``num_to_keep``
    None), Tune's automatic experiment-snapshot period, no callbacks, ``verbose=0``;
    ``reuse_actors`` False, Tune's default (True errors at the first exploit: RLlib's
    Algorithm has no ``reset_config``).

  The slot time is ``population x wall time`` of ``fit()`` (every trial runs at once), the
  train time the sum of every result row's ``time_this_iter_s`` (each trial's
  ``result.json``); the fraction outside ``train()`` is ``1 - train / slot``: actor starts,
  checkpoints, exploits (an actor start or reset, and a restore), waiting for a CPU, Tune's
  own loop.
  Restores are counted as result rows with ``iterations_since_restore == 1`` after the
  first. Median/min/max over ``--rounds`` rounds.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):  # run as a file: python benchmarks/tune_overhead.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import (
    EXPERIMENT,
    ROOT,
    command_line,
    interleaved,
    median_min_max,
    read_trials,
    spread,
    timed_launch_run,
)


def _cells(values: list[float]) -> list[str]:
    """Median, min and max, each with thousands separators and no decimals."""
    return [f"{v:,.0f}" for v in median_min_max(values)]


def _triple(values: list[float], fmt: str, unit: str = "") -> str:
    """'median [min-max]' in a 24-wide cell."""
    return spread(values, fmt, unit).rjust(24)


def experiment_data(args: argparse.Namespace, storage: Path, name: str) -> dict[str, Any]:
    data = yaml.safe_load(EXPERIMENT.read_text())
    data.update(
        name=name,
        population=args.population,
        storage=str(storage),
        stop={"iterations": args.iterations},
        evaluation={"at_end": "none"},
    )
    data["scheduler"]["perturbation_interval"] = args.interval
    # At least one trial in the bottom quantile (a population of 2 in --quick).
    data["scheduler"]["quantile_fraction"] = max(
        data["scheduler"]["quantile_fraction"], 1 / args.population
    )
    data["checkpoint"]["frequency"] = min(data["checkpoint"]["frequency"], args.interval)
    data["training"]["train_batch_size_per_learner"] = args.batch
    data["resources"].update(cpus_main=args.cpus_per_trial, cpus_per_learner=args.cpus_per_trial)
    data["search_space"]["file"] = str(ROOT / "search_spaces" / data["search_space"]["file"])
    return data


def resolved_experiment(data: dict[str, Any], folder: Path) -> Any:
    from workbench.experiment.resolve import load_and_resolve

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_and_resolve(path)


# --- a PBT exploit -----------------------------------------------------------------------------


def measure_exploits(args: argparse.Namespace, folder: Path) -> dict[str, list[float]]:
    import ray

    from workbench.trial.config import algorithm_config
    from workbench.trial.trainable import seeded_trainable

    resolved = resolved_experiment(experiment_data(args, folder, "exploit"), folder)
    config = algorithm_config(resolved.experiment, resolved.defaults)
    # The class the workbench hands Tune (per-trial seeds, reset_config).
    actor_cls = ray.remote(num_cpus=args.cpus_per_trial)(seeded_trainable(config.algo_class))
    figures: dict[str, list[float]] = {
        k: [] for k in ("train", "save", "new_actor", "restore_new", "reset", "restore_same")
    }

    def timed(ref: Any) -> tuple[Any, float]:
        start = time.perf_counter()
        value = ray.get(ref)
        return value, 1000 * (time.perf_counter() - start)

    donor = actor_cls.remote(config=config)
    ray.get(donor.train.remote())  # warm: the first iteration's one-off costs
    for round_ in range(args.exploit_rounds):
        _, ms = timed(donor.train.remote())
        figures["train"].append(ms)
        saved, ms = timed(donor.save.remote())
        figures["save"].append(ms)
        mutated = config.copy(copy_frozen=False).training(lr=config.lr * 0.8)
        start = time.perf_counter()
        clone = actor_cls.remote(config=mutated)
        ray.get(clone.__ray_ready__.remote())
        figures["new_actor"].append(1000 * (time.perf_counter() - start))
        _, ms = timed(clone.restore.remote(saved))
        figures["restore_new"].append(ms)
        # As Tune reuses an actor: reset() with the new trial config, then restore().
        reset, ms = timed(donor.reset.remote(mutated.to_dict()))
        if not reset:
            raise SystemExit("reset() returned False: Tune could not reuse the actor")
        figures["reset"].append(ms)
        _, ms = timed(donor.restore.remote(saved))
        figures["restore_same"].append(ms)
        ray.get(clone.stop.remote())
        ray.kill(clone)
        print(f"exploit round {round_ + 1}/{args.exploit_rounds} done", file=sys.stderr)
    ray.get(donor.stop.remote())
    ray.kill(donor)
    return figures


# --- a population ------------------------------------------------------------------------------


def population_figures(experiment_dir: Path, wall_s: float, population: int) -> dict[str, float]:
    trials = list(read_trials(experiment_dir).values())
    train_s = sum(float(r.get("time_this_iter_s", 0.0)) for rows in trials for r in rows)
    restores = sum(
        max(0, sum(1 for r in rows if r.get("iterations_since_restore") == 1) - 1)
        for rows in trials
    )
    iterations = sum(len(rows) for rows in trials)
    slot_s = population * wall_s
    return {
        "wall_s": wall_s,
        "train_s": train_s,
        "outside": 1.0 - train_s / slot_s,
        "restores": float(restores),
        "iterations": float(iterations),
        "trials": float(len(trials)),
    }


def run_workbench(args: argparse.Namespace, folder: Path) -> dict[str, float]:
    resolved = resolved_experiment(experiment_data(args, folder, "workbench"), folder)
    start = time.perf_counter()
    summary, fit = timed_launch_run(resolved)
    command_s = time.perf_counter() - start
    if summary.errors:
        raise SystemExit(f"workbench population: {summary.errors} trials errored")
    figures = population_figures(resolved.results_dir, fit.seconds, args.population)
    figures["command_s"] = command_s
    figures["driver_ms"] = 1e3 * fit.cpu_s / max(figures["iterations"], 1.0)
    return figures


def run_workbench_tunes_encoding(args: argparse.Namespace, folder: Path) -> dict[str, float]:
    """The workbench with Tune's own encoding of the trials in its experiment snapshot
    (``Trial.get_json_state``), where the workbench's save uses
    ``workbench.tune_ext.state_sync.trial_states``: the anchor of that change."""
    from workbench.tune_ext import state_sync

    ours = state_sync.trial_states
    state_sync.trial_states = lambda controller: list(  # type: ignore[assignment]
        controller._get_trial_checkpoints().values()
    )
    try:
        return run_workbench(args, folder)
    finally:
        state_sync.trial_states = ours  # type: ignore[assignment]


def run_tune_defaults(args: argparse.Namespace, folder: Path) -> dict[str, float]:
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    from workbench.names import RETURN_METRIC
    from workbench.trial.config import algorithm_config, param_space

    resolved = resolved_experiment(experiment_data(args, folder, "tune"), folder)
    config = algorithm_config(resolved.experiment, resolved.defaults)
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        metric=RETURN_METRIC,
        mode="max",
        perturbation_interval=args.interval,
        hyperparam_mutations={k: s.mutation() for k, s in resolved.tune_space.items()},
        quantile_fraction=resolved.experiment.scheduler.quantile_fraction,
        require_attrs=False,
    )
    tuner = tune.Tuner(
        config.algo_class,
        param_space=param_space(resolved.tune_space, config),
        tune_config=tune.TuneConfig(scheduler=pbt, num_samples=args.population),
        run_config=tune.RunConfig(
            name="tune",
            storage_path=str(folder / "tune_results"),
            stop={"training_iteration": args.iterations},
            verbose=0,
        ),
    )
    start, cpu = time.perf_counter(), time.process_time()
    results = tuner.fit()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    if results.errors:
        raise SystemExit(f"Tune-defaults population: {len(results.errors)} trials errored")
    figures = population_figures(folder / "tune_results" / "tune", wall, args.population)
    figures["command_s"] = wall
    figures["driver_ms"] = 1e3 * cpu / max(figures["iterations"], 1.0)
    return figures


SETUPS = {
    "workbench": run_workbench,
    "Tune defaults": run_tune_defaults,
    "workbench with Tune's snapshot encoding": run_workbench_tunes_encoding,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="population rounds (default 2)")
    parser.add_argument("--exploit-rounds", type=int, default=5)
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--interval", type=int, default=2, help="PBT perturbation interval")
    parser.add_argument("--batch", type=int, default=512, help="train_batch_size_per_learner")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray")
    parser.add_argument("--cpus-per-trial", type=float, default=0.25)
    parser.add_argument("--quick", action="store_true", help="a smoke run (the test)")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the results folders")
    parser.add_argument(
        "--setups",
        default=",".join(SETUPS),
        help=f"population setups, of {', '.join(SETUPS)} (default: all)",
    )
    parser.add_argument("--no-exploits", action="store_true", help="skip the exploit timings")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.exploit_rounds = 1, 1
        args.population, args.iterations, args.interval, args.batch = 2, 2, 1, 512

    warnings.filterwarnings("ignore")
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"  # both: RLlib's first iteration
    import ray

    print("command:", command_line())
    now = datetime.datetime.now(datetime.timezone.utc)
    print(
        f"{now:%Y-%m-%d %H:%M:%S} UTC  {os.cpu_count()} CPUs  python "
        f"{platform.python_version()}  ray {ray.__version__}"
    )
    print(
        f"population {args.population} x {args.iterations} iterations (PBT every "
        f"{args.interval}), {args.cpus_per_trial} CPU per trial, batch {args.batch}; "
        f"{args.rounds} population rounds, {args.exploit_rounds} exploit rounds",
        flush=True,
    )
    folder = Path(tempfile.mkdtemp(prefix="tune_overhead-"))
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    try:
        exploits = {} if args.no_exploits else measure_exploits(args, folder / "exploits")
        setups = {name: SETUPS[name] for name in args.setups.split(",")}

        def population(name: str) -> dict[str, float]:
            slug = re.sub(r"\W+", "_", name)
            where = folder / f"round{len(list(folder.glob('round*')))}-{slug}"
            where.mkdir(parents=True)
            return setups[name](args, where)

        rounds = interleaved(
            args.rounds, list(setups), population, alternate=True, label="population round"
        )
        runs = dict(zip(setups, rounds, strict=True))
    finally:
        ray.shutdown()
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)

    if exploits:
        train = statistics.median(exploits["train"])
        exploit_new = [
            s + a + r
            for s, a, r in zip(
                exploits["save"], exploits["new_actor"], exploits["restore_new"], strict=True
            )
        ]
        exploit_same = [
            s + a + r
            for s, a, r in zip(
                exploits["save"], exploits["reset"], exploits["restore_same"], strict=True
            )
        ]
        rows = [
            ("train() (the anchor)", exploits["train"]),
            ("save() on the donor", exploits["save"]),
            ("new actor: start + build", exploits["new_actor"]),
            ("restore() in the new actor", exploits["restore_new"]),
            ("reset() of a kept actor: rebuild", exploits["reset"]),
            ("restore() in the kept actor", exploits["restore_same"]),
            ("exploit, new actor (Tune default)", exploit_new),
            ("exploit, reused actor (workbench)", exploit_same),
        ]
        print(f"\nA PBT exploit, ms ({args.exploit_rounds} interleaved rounds)")
        print(f"| {'step':<38} | {'median':>9} | {'min':>9} | {'max':>9} | {'/ train()':>9} |")
        print(f"|{'-' * 40}|{'-' * 11}|{'-' * 11}|{'-' * 11}|{'-' * 11}|")
        for label, values in rows:
            cells = _cells(values)
            ratio = statistics.median(values) / train
            print(
                f"| {label:<38} | {cells[0]:>9} | {cells[1]:>9} | {cells[2]:>9} | {ratio:>8.2f}x |"
            )

    print(
        f"\nPopulation {args.population} on {args.cpus} CPUs: time outside train() "
        f"({args.rounds} interleaved rounds)"
    )
    print(
        f"| {'setup':<36} | {'fit() s':>24} | {'outside train()':>24} | "
        f"{'driver CPU ms a result':>24} | {'restarts':>8} | {'iterations':>10} | "
        f"{'whole run s':>11} |"
    )
    print(f"|{'-' * 38}|{'-' * 26}|{'-' * 26}|{'-' * 26}|{'-' * 10}|{'-' * 12}|{'-' * 13}|")
    for name, figures in runs.items():
        walls = [f["wall_s"] for f in figures]
        outside = [100 * f["outside"] for f in figures]
        driver = [f["driver_ms"] for f in figures]
        print(
            f"| {name:<36} | {_triple(walls, '.1f')} | {_triple(outside, '.1f', '%')} | "
            f"{_triple(driver, '.0f')} | "
            f"{statistics.median([f['restores'] for f in figures]):>8.0f} | "
            f"{statistics.median([f['iterations'] for f in figures]):>10.0f} | "
            f"{statistics.median([f['command_s'] for f in figures]):>11.1f} |"
        )
    print("(median [min-max] over rounds; driver CPU: the driver process's CPU seconds during")
    print(" fit(), all its threads, over the results; restarts: actors restarted from a")
    print(" checkpoint, by exploits and by PBT pausing a trial while others wait; whole run:")
    print(" launch.run including its pre-flight, MLflow start and end, and plots)")

    def median_of(name: str, key: str) -> float:
        return statistics.median([f[key] for f in runs[name]])

    if {"workbench", "Tune defaults"} <= runs.keys():
        ratio = median_of("workbench", "wall_s") / median_of("Tune defaults", "wall_s")
        print(f"\nworkbench fit() / Tune defaults' fit(): {ratio:.2f}x (medians)")
    anchor = "workbench with Tune's snapshot encoding"
    if {"workbench", anchor} <= runs.keys():
        pairs = list(zip(runs["workbench"], runs[anchor], strict=True))
        saved = [b["driver_ms"] - a["driver_ms"] for a, b in pairs]
        print(
            "driver CPU a result, Tune's snapshot encoding less the workbench's, per round: "
            + ", ".join(f"{d:+.0f} ms" for d in saved)
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"exploits": exploits, "populations": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
