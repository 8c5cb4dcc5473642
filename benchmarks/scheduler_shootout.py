"""Scheduler shoot-out: PBT, PB2, ASHA+Optuna and random search at an equal env-step budget
per task, on the proving-ground tasks where schedules should matter.

Usage::

    .venv/bin/python benchmarks/scheduler_shootout.py --task mountaincar --seeds 0,1,2
    .venv/bin/python benchmarks/scheduler_shootout.py --task lunarlander --seeds 0,1,2
    .venv/bin/python benchmarks/scheduler_shootout.py --arms pbt,pbt_interval2   # burn-in/interval
    .venv/bin/python benchmarks/scheduler_shootout.py --quick    # a smoke run (the test)

Method:

* A task is a shipped experiment (``experiments/mountaincar_continuous_pbt.yaml``,
  ``experiments/lunarlander_pb2.yaml``) and its search space; every arm runs it with
  ``workbench run`` in a subprocess, changing only the scheduler and the searcher.
* Equal budget: ``--budget`` env steps in all per run, split as each arm spends it.
  ``pbt``, ``pbt_interval2`` and ``pb2``: ``--population`` members, each stopped at
  budget/population env steps (``stop.env_steps``: a member's lineage's steps, so an
  exploit that restores an older or newer donor moves that count); ``random``: the same
  members with random draws and no scheduler (FIFO); ``asha_optuna``: twice the members,
  suggested by Optuna's TPE, ``population`` at a time, ASHA rungs at max_t/4, max_t/2 and
  max_t (max_t = a member's iterations, reduction factor 2), which spends
  2P x max_t/4 + P x max_t/4 + P/2 x max_t/2 = P x max_t iterations if every rung fills.
  Asynchronous rungs do not fill that way (ASHA spent 1.6-1.75x the budget), so every
  arm also ends once its trials have sampled the budget together
  (``stop.population_env_steps``): no arm spends more than the budget and the
  iterations in flight when it ran out. Nothing stops on the return target
  (``stop.return_mean`` off); the table shows the env steps each actually sampled.
* Arms interleaved: per seed every arm, their order rotating from seed to seed.
* Per run: each member's final checkpoint evaluated over ``--episodes`` episodes
  (``workbench.policy.evaluate``, deterministic, seeds 10000 + ...); "best" is the
  evaluation of the member with the best final training score (picked on training,
  not on the evaluation), "median" the median of all members' evaluations.
* The anytime curve: every arm checkpoints every ``CURVE_EVERY`` iterations and keeps them
  all; after the run each checkpoint is evaluated over ``--curve-episodes`` episodes
  (deterministic, seeds 20000 + ...) and placed at the env steps the whole population had
  sampled when it was written (the result row it was saved after). The curve is the best
  evaluated return of any checkpoint so far against those env steps, one line per run, as
  a PNG. A maximum over noisy few-episode evaluations leans high, alike for every arm;
  the table's final evaluations are the unbiased figures.
* Exploits from each PBT/PB2 run's lineage.jsonl: how many, and the first few (target,
  donor, iteration) to say why a population won or lost.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: python benchmarks/scheduler_shootout.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import (
    ROOT,
    command_line,
    number_at,
    print_log_tail,
    read_trials,
    run_logged,
    spread,
    workbench_command,
)

TASKS = {
    "mountaincar": ROOT / "experiments" / "mountaincar_continuous_pbt.yaml",
    "lunarlander": ROOT / "experiments" / "lunarlander_pb2.yaml",
}
ARMS = ("pbt", "pb2", "asha_optuna", "random", "pbt_interval2")
DEFAULT_ARMS = ("pbt", "pb2", "asha_optuna", "random")
SCORE = ("score", "return_mean")
CURVE_EVERY = 4  # iterations between the checkpoints the anytime curve evaluates
KEEP_ALL = 100_000  # checkpoint.keep: every checkpoint stays for the curve


@dataclass(frozen=True)
class Budget:
    total_env_steps: int
    population: int
    steps_per_iteration: int

    @property
    def member_steps(self) -> int:
        return self.total_env_steps // self.population

    @property
    def member_iterations(self) -> int:
        return max(1, self.member_steps // self.steps_per_iteration)


def arm_overrides(arm: str, budget: Budget, seed: int, quantile: float = 0.25) -> list[str]:
    """The `--set`s that make the task's experiment into this arm (see Method)."""
    common = [
        f"seed={seed}",
        "stop.return_mean=null",
        "stop.wall_time_s=null",
        "evaluation.at_end=none",
        f"stop.population_env_steps={budget.total_env_steps}",
        f"checkpoint.frequency={CURVE_EVERY}",
        f"checkpoint.keep={KEEP_ALL}",
    ]
    members = [f"population={budget.population}", f"stop.env_steps={budget.member_steps}"]
    if arm in ("pbt", "pbt_interval2"):
        interval = 2 if arm == "pbt_interval2" else 4
        scheduler = (
            f"scheduler={{type: pbt, perturbation_interval: {interval}, "
            f"burn_in_period: {interval}, quantile_fraction: {quantile}}}"
        )
        # PBT clones the donor's newest checkpoint: one at every decision at least.
        return [*common, *members, scheduler, f"checkpoint.frequency={interval}"]
    if arm == "pb2":
        scheduler = (
            f"scheduler={{type: pb2, perturbation_interval: 4, quantile_fraction: {quantile}}}"
        )
        return [*common, *members, scheduler]
    if arm == "random":
        return [*common, *members, "scheduler={type: fifo}", "search={type: random}"]
    if arm == "asha_optuna":
        max_t = budget.member_iterations
        grace = max(1, max_t // 4)
        return [
            *common,
            f"population={2 * budget.population}",
            f"max_concurrent={budget.population}",
            f"stop.iterations={max_t}",
            f"scheduler={{type: asha, max_t: {max_t}, grace_period: {grace}, reduction_factor: 2}}",
            f"search={{type: optuna, seed: {seed}}}",
        ]
    raise ValueError(f"no arm {arm!r}; arms: {', '.join(ARMS)}")


@dataclass
class Run:
    seed: int
    arm: str
    returncode: int
    wall_s: float
    env_steps: float = 0.0
    members: int = 0
    best_eval: float = math.nan
    median_eval: float = math.nan
    best_member: str = ""
    exploits: int = 0
    exploit_notes: list[str] = field(default_factory=list)
    checkpoints: int = 0  # evaluated for the curve
    # (population env steps, best evaluated return so far), one point per checkpoint.
    curve: list[tuple[float, float]] = field(default_factory=list)


def checkpoint_steps(
    results_dir: Path, trials: dict[str, list[dict[str, Any]]]
) -> list[tuple[float, Path]]:
    """Every kept checkpoint of the run with the env steps the population had sampled when
    it was written: the cumulative env steps of all result rows (in time order) through
    the row it was saved after, i.e. its trial's latest row of the checkpoint's iteration
    reported by the time its manifest was written (a PBT member repeats iterations after
    an exploit, so the time tells which one)."""
    from workbench.policy.checkpoint import read_checkpoint, trial_checkpoints
    from workbench.trial.manifest import MANIFEST_FILE

    ordered = sorted(
        (
            (float(row.get("timestamp", 0)), name, i, row)
            for name, rows in trials.items()
            for i, row in enumerate(rows)
        ),
        key=lambda item: (item[0], item[1], item[2]),
    )
    cumulative: dict[tuple[str, int], tuple[float, float]] = {}  # (trial, row) -> (time, steps)
    steps = 0.0
    for stamp, name, i, row in ordered:
        steps += number_at(row, "env_runners", "num_env_steps_sampled") or 0.0
        cumulative[(name, i)] = (stamp, steps)
    points = []
    for name, rows in trials.items():
        for path in trial_checkpoints(results_dir / name):
            iteration = read_checkpoint(path).training_iteration
            manifest = path / MANIFEST_FILE
            written = manifest.stat().st_mtime if manifest.is_file() else math.inf
            # Tune's timestamps are whole seconds: a row of the same second counts.
            matches = [
                cumulative[(name, i)][1]
                for i, row in enumerate(rows)
                if row.get("training_iteration") == iteration
                and cumulative[(name, i)][0] <= written + 1
            ]
            if matches:
                points.append((matches[-1], path))
    return sorted(points, key=lambda point: point[0])


def evaluated_curve(
    points: list[tuple[float, Path]], episodes: int, seed: int
) -> list[tuple[float, float]]:
    """The best evaluated return of any checkpoint so far, at each checkpoint's env steps."""
    from workbench.policy.checkpoint import read_checkpoint
    from workbench.policy.evaluate import evaluate_checkpoint

    best, curve = -math.inf, []
    for steps, path in points:
        evaluation = evaluate_checkpoint(
            read_checkpoint(path), episodes=episodes, seed=20_000 + seed
        )
        best = max(best, float(statistics.fmean(evaluation.returns)))
        curve.append((steps, best))
    return curve


def _evaluate(results_dir: Path, episodes: int, seed: int) -> dict[str, float]:
    """Each member's final checkpoint over `episodes` episodes: trial folder -> mean return."""
    from workbench.policy.checkpoint import find_checkpoint, read_checkpoint
    from workbench.policy.evaluate import evaluate_checkpoint

    out = {}
    for trial_dir in sorted(p for p in results_dir.iterdir() if (p / "result.json").is_file()):
        try:
            # The policy the member held at the end: a member exploited as the budget ran
            # out holds the donor checkpoint it was handed (handed_checkpoint).
            checkpoint = read_checkpoint(find_checkpoint(trial_dir))
        except Exception as err:  # a member without a checkpoint: say so, go on
            print(f"  {trial_dir.name}: no checkpoint to evaluate ({err})", flush=True)
            continue
        if checkpoint.path.parent.name != trial_dir.name:
            print(
                f"  {trial_dir.name}: evaluated on {checkpoint.path.parent.name}'s checkpoint "
                f"of iteration {checkpoint.training_iteration}, handed to it by its last "
                "exploit as the run ended",
                flush=True,
            )
        evaluation = evaluate_checkpoint(checkpoint, episodes=episodes, seed=10_000 + seed)
        out[trial_dir.name] = float(statistics.fmean(evaluation.returns))
    return out


def _lineage(results_dir: Path) -> tuple[int, list[str]]:
    path = results_dir / "lineage.jsonl"
    if not path.is_file():
        return 0, []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    notes = [
        f"{r.get('target_name', r['target'])} <- {r.get('source_name', r['source'])} at "
        f"{r.get('exploit_iteration', r['target_iteration'])} (donor scored at "
        f"{r.get('source_score_iteration', '?')}, restart "
        f"{r.get('restored_iteration', r.get('checkpoint_iteration'))})"
        for r in records
    ]
    return len(records), notes


def run_once(
    task: Path,
    arm: str,
    seed: int,
    budget: Budget,
    root: Path,
    episodes: int,
    extra: list[str],
    quantile: float = 0.25,
    curve_episodes: int = 10,
) -> Run:
    name = f"{arm}-seed{seed}"
    storage = root / name
    log = root / f"{name}.log"
    sets = [*arm_overrides(arm, budget, seed, quantile), f"storage={storage}", *extra]
    command = [
        *workbench_command(),
        "run",
        str(task),
        *[arg for item in sets for arg in ("--set", item)],
        "--name",
        name,
    ]
    print(f"seed {seed}, {arm}: {' '.join(command)}", flush=True)
    returncode, _, wall = run_logged(command, log)
    run = Run(seed, arm, returncode, wall)
    (root / f"{name}.run.json").write_text(json.dumps({"returncode": returncode, "wall_s": wall}))
    if returncode != 0:
        print_log_tail(log, 15, f"  exit status {returncode}; the end of {log}:")
    return measure(run, storage / name, episodes, curve_episodes)


def measure_again(root: Path, arm: str, seed: int, episodes: int, curve_episodes: int) -> Run:
    """A kept run (``--keep``) measured again, without training: its evaluations, curve
    and lineage as the workbench reads them now. Its exit status and wall time are those
    the run recorded (unknown for a run kept before they were: shown as -)."""
    name = f"{arm}-seed{seed}"
    record = root / f"{name}.run.json"
    saved = json.loads(record.read_text()) if record.is_file() else {}
    run = Run(seed, arm, int(saved.get("returncode", 0)), float(saved.get("wall_s", math.nan)))
    print(f"seed {seed}, {arm}: measured again from {root / name}", flush=True)
    return measure(run, root / name / name, episodes, curve_episodes)


def measure(run: Run, results_dir: Path, episodes: int, curve_episodes: int) -> Run:
    """A finished run's figures: members, env steps, the evaluated curve, each member's
    final evaluation, the best and median, and the exploits from its lineage."""
    seed, wall = run.seed, run.wall_s
    if not results_dir.is_dir():
        return run
    trials = read_trials(results_dir)
    run.members = len(trials)
    run.env_steps = sum(
        number_at(row, "env_runners", "num_env_steps_sampled") or 0.0
        for rows in trials.values()
        for row in rows
    )
    points = checkpoint_steps(results_dir, trials)
    run.checkpoints = len(points)
    run.curve = evaluated_curve(points, curve_episodes, seed)
    evals = _evaluate(results_dir, episodes, seed)
    finals = {
        name: score
        for name, rows in trials.items()
        if rows and (score := number_at(rows[-1], *SCORE)) is not None and name in evals
    }
    if finals:
        run.best_member = max(finals, key=lambda n: finals[n])
        run.best_eval = evals[run.best_member]
    else:  # chosen by its score, as a user would: none to choose by (no episode ended)
        print("  no member had a training score at its end: no best member", flush=True)
    if evals:
        run.median_eval = statistics.median(evals.values())
        shown = ", ".join(f"{name} {value:.1f}" for name, value in sorted(evals.items()))
        print(f"  members: {shown}", flush=True)
    run.exploits, run.exploit_notes = _lineage(results_dir)
    print(
        f"  {_cell(wall, '.0f')} s, {run.env_steps:,.0f} env steps, best member {run.best_member} "
        f"eval {run.best_eval:.1f}, median {run.median_eval:.1f}, {run.exploits} exploits, "
        f"{run.checkpoints} checkpoints on the curve",
        flush=True,
    )
    return run


def _cell(value: float, fmt: str = ".1f") -> str:
    return "-" if math.isnan(value) else format(value, fmt)


def report(runs: list[Run], arms: list[str], episodes: int) -> None:
    print()
    print(
        f"| seed | arm | exit | members | wall s | env steps | best member's {episodes}-episode "
        "eval | members' median eval | exploits |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        print(
            f"| {r.seed} | {r.arm} | {r.returncode} | {r.members} | {_cell(r.wall_s, '.0f')} | "
            f"{r.env_steps:,.0f} | {_cell(r.best_eval)} | {_cell(r.median_eval)} | "
            f"{r.exploits} |"
        )
    print()
    print("median [min-max] over seeds:")
    print("| arm | runs | env steps | best member's eval | members' median eval | wall s |")
    print("|---|---:|---:|---:|---:|---:|")
    for arm in arms:
        mine = [r for r in runs if r.arm == arm]
        best = [r.best_eval for r in mine if not math.isnan(r.best_eval)]
        median = [r.median_eval for r in mine if not math.isnan(r.median_eval)]
        print(
            f"| {arm} | {len(mine)} | {spread([r.env_steps for r in mine], ',.0f')} | "
            f"{spread(best)} | {spread(median)} | "
            f"{spread([r.wall_s for r in mine if not math.isnan(r.wall_s)], '.0f')} |"
        )
    for r in runs:
        if r.exploit_notes:
            shown = "; ".join(r.exploit_notes[:6])
            more = f" (+{len(r.exploit_notes) - 6} more)" if len(r.exploit_notes) > 6 else ""
            print(f"exploits, {r.arm} seed {r.seed}: {shown}{more}")


def plot(runs: list[Run], arms: list[str], path: Path, title: str) -> None:
    """The anytime curves (evaluated_curve) of every run, coloured by arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, arm in enumerate(arms):
        for j, r in enumerate(x for x in runs if x.arm == arm and x.curve):
            xs, ys = zip(*r.curve, strict=True)
            ax.plot(xs, ys, color=colors[i % len(colors)], alpha=0.8, label=arm if j == 0 else None)
    ax.set_xlabel("population env steps")
    ax.set_ylabel("best evaluated return so far")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="mountaincar")
    parser.add_argument("--arms", default=",".join(DEFAULT_ARMS), help=f"of {', '.join(ARMS)}")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--budget", type=int, default=400_000, help="env steps per run")
    parser.add_argument("--population", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=100, help="evaluation episodes")
    parser.add_argument("--plot", type=Path, default=None, help="the anytime curve's PNG")
    parser.add_argument(
        "--curve-episodes", type=int, default=10, help="episodes per checkpoint on the curve"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="passed on to run"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run (the test)")
    parser.add_argument("--keep", action="store_true", help="keep the results folders")
    parser.add_argument(
        "--measure-again",
        type=Path,
        default=None,
        metavar="ROOT",
        help="measure the runs a --keep run left under ROOT again, without training",
    )
    args = parser.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        parser.error(f"--arms: no arm {unknown}; arms: {', '.join(ARMS)}")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    task = TASKS[args.task]
    import yaml

    training = yaml.safe_load(task.read_text()).get("training", {})
    extra = list(args.set)
    steps_per_iteration = int(training.get("train_batch_size_per_learner", 4000))
    if args.quick:
        # Two members, four iterations of 512 env steps on 2 envs each: an episode (999
        # steps on MountainCar at most) ends in every env.
        seeds, args.population, args.episodes, args.curve_episodes = seeds[:1], 2, 5, 2
        steps_per_iteration = 512
        args.budget = 2 * 4 * steps_per_iteration
        extra += [
            f"training.train_batch_size_per_learner={steps_per_iteration}",
            "training.minibatch_size=128",
            "training.num_epochs=1",
            "checkpoint.frequency=2",
            "resources.env_runners.envs_per_runner=2",
        ]
    budget = Budget(args.budget, args.population, steps_per_iteration)
    # Two members: the bottom half is one member (quantile 0.25 would exploit none).
    quantile = 0.5 if args.population < 4 else 0.25
    again = args.measure_again
    if again is not None and not again.is_dir():
        parser.error(f"--measure-again: {again} is not a folder a --keep run left")
    root = again if again is not None else Path(tempfile.mkdtemp(prefix="scheduler_shootout-"))
    now = datetime.datetime.now(datetime.timezone.utc)
    print("command:", command_line())
    print(
        f"{now:%Y-%m-%d %H:%M:%S} UTC; task {task.relative_to(ROOT)}; {budget.total_env_steps:,} "
        f"env steps per run ({budget.population} members x {budget.member_steps:,}, "
        f"{budget.member_iterations} iterations of {steps_per_iteration}); load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; results under {root}"
    )
    runs = []
    try:
        for i, seed in enumerate(seeds):
            turn = i % len(arms)
            for arm in arms[turn:] + arms[:turn]:
                if again is not None:
                    runs.append(measure_again(root, arm, seed, args.episodes, args.curve_episodes))
                    continue
                runs.append(
                    run_once(
                        task,
                        arm,
                        seed,
                        budget,
                        root,
                        args.episodes,
                        extra,
                        quantile,
                        args.curve_episodes,
                    )
                )
        report(runs, arms, args.episodes)
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        if args.plot is not None:
            title = (
                f"{args.task}: {budget.total_env_steps:,} env steps a run, "
                f"checkpoints over {args.curve_episodes} episodes"
            )
            plot(runs, arms, args.plot, title)
            print(f"anytime curve: {args.plot}")
    finally:
        if args.keep or again is not None:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if any(r.returncode != 0 for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
