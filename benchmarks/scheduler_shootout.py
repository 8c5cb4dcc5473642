"""Scheduler shoot-out: PBT, PB2, ASHA+Optuna and random search at an equal env-step budget
per task, judged by the agent each population hands its user.

Usage::

    .venv/bin/python benchmarks/scheduler_shootout.py --task mountaincar --seeds dev:10-13 \
        --arms pbt,pbt_score,random --root /tmp/dev-mc          # developing defaults
    .venv/bin/python benchmarks/scheduler_shootout.py --task mountaincar --seeds report \
        --root results/shootout-mc --plot mc.png                # the report, resumable
    .venv/bin/python benchmarks/scheduler_shootout.py --quick    # a smoke run (the test)

Protocol:

* Seeds. Defaults are developed and chosen on seeds 0-49 (``dev``); the report uses
  seeds 100-109 (``report``) only, after the defaults are frozen. Any other seed is
  held out, for checks made outside the project; the script labels every seed so.
* A task is a shipped experiment (``experiments/mountaincar_continuous_pbt.yaml``,
  ``experiments/lunarlander_pb2.yaml``) and its search space; every arm runs it with
  ``workbench run`` in a subprocess, changing only the scheduler and the searcher.
  ``pbt`` and ``pb2`` run with the workbench's shipped defaults (ranking on short
  evaluations, Welch's test before an exploit) and the task's own exploit rules
  (``scheduler.exploit_min_gain`` of its experiment: 50 on MountainCar;
  ``scheduler.spare_improving``; ``scheduler.burn_in_period``, the first decision, else
  iteration 4); ``pbt_score``
  is PBT as it was before them (the training window ranks, any higher score clones),
  ``pbt_no_margin`` PBT without the margin, and ``pbt_spare`` / ``pb2_spare`` with
  ``scheduler.spare_improving`` (a member still improving is not cloned over), and
  ``pbt_late`` / ``pb2_late`` with the first decision at iteration 8 instead of 4
  (``burn_in_period``), all kept for development.
* Equal budget: ``--budget`` env steps in all per run. ``pbt``, ``pbt_score``, ``pb2``
  and ``random`` (FIFO with random draws): ``--population`` members, each stopped at
  budget/population env steps; ``asha_optuna``: twice the members, suggested by
  Optuna's TPE (modelling after 3 trials), ``population`` at a time, ASHA rungs at
  max_t/4, max_t/2 and max_t. Every arm also ends once its trials have sampled the
  budget together (``stop.population_env_steps``). Nothing stops on a return target.
  Every arm evaluates its members the same way (``evaluation.every``), and the env
  steps those evaluations take are reported beside the budget, not taken from it.
* What is scored: the population's result (`workbench.run.population_result`: the
  best policy any member produced, nominated by short evaluations and confirmed over
  100 episodes by the run itself), the same rule for every arm. Second row: each
  member's final policy over ``--episodes`` episodes (seeds 10000 + ...), their median.
  Beside the result: the best short evaluation the run recorded (the result must not
  fall below it by more than the evaluations' noise).
* Report: per task and arm, the median and IQM over seeds; against random search the
  paired per-seed differences (median and mean with 95% bootstrap intervals) and the
  probability of improvement (benchmarks/shootout_stats.py says how).
* Resumable: with ``--root DIR`` each finished run leaves ``<arm>-seed<N>.measure.json``
  there and is not run again; ``--measure-again`` re-reads the kept runs under ROOT.
* The anytime curve: the best short evaluation any member had made so far (what the
  result would be nominated from) against the env steps the whole population had
  sampled by then, one line per run, as a PNG.
* Exploits from each PBT/PB2 run's lineage.jsonl: how many, and the first few.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass, field
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
from benchmarks.shootout_stats import (
    improvement,
    iqm,
    iqm_interval,
    mean_difference,
    median_difference,
)

TASKS = {
    "mountaincar": ROOT / "experiments" / "mountaincar_continuous_pbt.yaml",
    "lunarlander": ROOT / "experiments" / "lunarlander_pb2.yaml",
}
ARMS = (
    "pbt",
    "pb2",
    "asha_optuna",
    "random",
    "pbt_score",
    "pbt_no_margin",
    "pbt_spare",
    "pb2_spare",
    "pbt_late",
    "pb2_late",
)
DEFAULT_ARMS = ("pbt", "pb2", "asha_optuna", "random")
ANCHOR = "random"
DEV_SEEDS = range(0, 50)
REPORT_SEEDS = range(100, 110)


def seed_set(seed: int) -> str:
    if seed in DEV_SEEDS:
        return "development"
    if seed in REPORT_SEEDS:
        return "report"
    return "held-out"


def parse_seeds(text: str) -> list[int]:
    """``report`` (100-109), ``dev:A-B`` (within 0-49), or a list ``7,8,9``."""
    if text == "report":
        return list(REPORT_SEEDS)
    if text.startswith("dev:"):
        first, _, last = text[4:].partition("-")
        seeds = list(range(int(first), int(last or first) + 1))
        if not all(s in DEV_SEEDS for s in seeds):
            raise ValueError(f"development seeds are {DEV_SEEDS.start}-{DEV_SEEDS.stop - 1}")
        return seeds
    return [int(s) for s in text.split(",") if s.strip()]


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


def _task_scheduler(task: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(task.read_text()).get("scheduler") or {}


def task_min_gain(task: Path) -> float:
    """The task's ``scheduler.exploit_min_gain``: part of its reward's structure, which
    its PBT and PB2 arms keep (0 when the experiment sets none)."""
    return float(_task_scheduler(task).get("exploit_min_gain", 0.0))


def task_spare(task: Path) -> bool:
    """The task's ``scheduler.spare_improving``, which its PBT and PB2 arms keep (the
    schema's default, false, when the experiment sets none)."""
    return bool(_task_scheduler(task).get("spare_improving", False))


def task_burn_in(task: Path) -> int:
    """The task's ``scheduler.burn_in_period`` (iterations before the first decision),
    which its PBT and PB2 arms keep; 4 (one interval) when the experiment sets none."""
    return int(_task_scheduler(task).get("burn_in_period") or 4)


def arm_overrides(
    arm: str,
    budget: Budget,
    seed: int,
    quantile: float = 0.25,
    min_gain: float = 0.0,
    spare_improving: bool = False,
    burn_in: int = 4,
) -> list[str]:
    """The `--set`s that make the task's experiment into this arm (see Protocol);
    ``min_gain``, ``spare_improving`` and ``burn_in`` are the task's (task_min_gain,
    task_spare, task_burn_in)."""
    common = [
        f"seed={seed}",
        "stop.return_mean=null",
        "stop.wall_time_s=null",
        "evaluation.at_end=best",
        f"stop.population_env_steps={budget.total_env_steps}",
    ]
    members = [f"population={budget.population}", f"stop.env_steps={budget.member_steps}"]
    margin = f", exploit_min_gain: {min_gain}" if min_gain else ""
    spare = ", spare_improving: true"
    task_rules = margin + (spare if spare_improving else "")
    # The first decision: the task's (one interval unless it says), 8 for the "late" arms.
    burn_in = 8 if arm.endswith("_late") else burn_in
    if arm in ("pbt", "pbt_score", "pbt_no_margin", "pbt_spare", "pbt_late"):
        rules = {
            "pbt": task_rules,
            "pbt_score": ", rank_on: score, exploit_test: none",
            "pbt_spare": margin + spare,
            "pbt_late": task_rules,
        }.get(arm, "")
        scheduler = (
            f"scheduler={{type: pbt, perturbation_interval: 4, burn_in_period: {burn_in}, "
            f"quantile_fraction: {quantile}{rules}}}"
        )
        # PBT clones the donor's newest checkpoint: one at every decision at least.
        return [*common, *members, scheduler, "checkpoint.frequency=4"]
    if arm in ("pb2", "pb2_spare", "pb2_late"):
        rules = margin + spare if arm == "pb2_spare" else task_rules
        scheduler = (
            f"scheduler={{type: pb2, perturbation_interval: 4, burn_in_period: {burn_in}, "
            f"quantile_fraction: {quantile}{rules}}}"
        )
        return [*common, *members, scheduler, "checkpoint.frequency=4"]
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
            f"search={{type: optuna, seed: {seed}, startup_trials: 3}}",
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
    # The population's result: its member, iteration and confirming evaluation.
    result: float = math.nan
    result_member: str = ""
    result_iteration: int = 0
    # The best short evaluation any member recorded during the run.
    best_short: float = math.nan
    median_final: float = math.nan  # the members' final policies, their median
    eval_env_steps: float = 0.0
    eval_time_s: float = 0.0
    exploits: int = 0
    exploit_notes: list[str] = field(default_factory=list)
    # (population env steps, best short evaluation so far).
    curve: list[list[float]] = field(default_factory=list)


def short_evaluation_curve(
    results_dir: Path, trials: dict[str, list[dict[str, Any]]]
) -> tuple[list[list[float]], float]:
    """The best short evaluation made so far against the env steps the whole population
    had sampled when it was made (its result rows up to that moment, by timestamp), and
    the best of all."""
    from workbench.trial.candidates import evaluations

    rows = sorted(
        (float(row.get("timestamp", 0)), number_at(row, "env_runners", "num_env_steps_sampled"))
        for rows in trials.values()
        for row in rows
    )
    done = sorted(
        (e for name in trials for e in evaluations(results_dir / name)), key=lambda e: e.at
    )
    curve, best, steps, i = [], -math.inf, 0.0, 0
    for evaluation in done:
        # Tune's timestamps are whole seconds: a row of the same second counts.
        while i < len(rows) and rows[i][0] <= evaluation.at + 1:
            steps += rows[i][1] or 0.0
            i += 1
        best = max(best, evaluation.return_mean)
        curve.append([steps, best])
    return curve, (best if done else math.nan)


def _final_evaluations(results_dir: Path, episodes: int, seed: int) -> dict[str, float]:
    """Each member's final policy over `episodes` episodes: trial folder -> mean return."""
    from workbench.policy.checkpoint import find_checkpoint, read_checkpoint
    from workbench.policy.evaluate import evaluate_checkpoint

    out = {}
    for trial_dir in sorted(p for p in results_dir.iterdir() if (p / "result.json").is_file()):
        try:
            # A member exploited as the budget ran out holds the donor checkpoint it was
            # handed (handed_checkpoint).
            checkpoint = read_checkpoint(find_checkpoint(trial_dir))
        except Exception as err:  # a member without a checkpoint: say so, go on
            print(f"  {trial_dir.name}: no checkpoint to evaluate ({err})", flush=True)
            continue
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


def _name(arm: str, seed: int) -> str:
    return f"{arm}-seed{seed}"


def run_once(
    task: Path,
    arm: str,
    seed: int,
    budget: Budget,
    root: Path,
    episodes: int,
    extra: list[str],
    quantile: float = 0.25,
    min_gain: float = 0.0,
    spare_improving: bool = False,
    burn_in: int = 4,
) -> Run:
    name = _name(arm, seed)
    storage = root / name
    log = root / f"{name}.log"
    rules = arm_overrides(arm, budget, seed, quantile, min_gain, spare_improving, burn_in)
    sets = [*rules, f"storage={storage}", *extra]
    command = [
        *workbench_command(),
        "run",
        str(task),
        *[arg for item in sets for arg in ("--set", item)],
        "--name",
        name,
    ]
    print(f"seed {seed} ({seed_set(seed)}), {arm}: {' '.join(command)}", flush=True)
    returncode, _, wall = run_logged(command, log)
    run = Run(seed, arm, returncode, wall)
    (root / f"{name}.run.json").write_text(json.dumps({"returncode": returncode, "wall_s": wall}))
    if returncode != 0:
        print_log_tail(log, 15, f"  exit status {returncode}; the end of {log}:")
    return measure(run, storage / name, episodes)


def finished(root: Path, arm: str, seed: int) -> Run | None:
    """A run an earlier sitting finished and measured under ``root`` (None: none)."""
    path = root / f"{_name(arm, seed)}.measure.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    print(f"seed {seed} ({seed_set(seed)}), {arm}: done in an earlier sitting", flush=True)
    return Run(**data)


def save(root: Path, run: Run) -> None:
    path = root / f"{_name(run.arm, run.seed)}.measure.json"
    path.write_text(json.dumps(asdict(run)))


def measure_again(root: Path, arm: str, seed: int, episodes: int) -> Run:
    """A kept run measured again, without training: its result, evaluations, curve and
    lineage as the workbench reads them now. Its exit status and wall time are those
    the run recorded (unknown for a run kept before they were: shown as -)."""
    name = _name(arm, seed)
    record = root / f"{name}.run.json"
    saved = json.loads(record.read_text()) if record.is_file() else {}
    run = Run(seed, arm, int(saved.get("returncode", 0)), float(saved.get("wall_s", math.nan)))
    print(f"seed {seed}, {arm}: measured again from {root / name}", flush=True)
    return measure(run, root / name / name, episodes)


def measure(run: Run, results_dir: Path, episodes: int) -> Run:
    """A finished run's figures: members, env steps, its result, the best short
    evaluation it recorded, each member's final evaluation and their median, the curve
    and the exploits from its lineage."""
    from workbench.trial.candidates import read_result

    if not results_dir.is_dir():
        return run
    trials = read_trials(results_dir)
    run.members = len(trials)
    run.env_steps = sum(
        number_at(row, "env_runners", "num_env_steps_sampled") or 0.0
        for rows in trials.values()
        for row in rows
    )
    run.curve, run.best_short = short_evaluation_curve(results_dir, trials)
    result = read_result(results_dir)
    if result is None:
        print("  no population's result recorded", flush=True)
    else:
        run.result = result.return_mean
        run.result_member, run.result_iteration = result.trial_name, result.iteration
        run.eval_env_steps, run.eval_time_s = result.eval_env_steps, result.eval_time_s
    finals = _final_evaluations(results_dir, episodes, run.seed)
    if finals:
        run.median_final = statistics.median(finals.values())
        shown = ", ".join(f"{name} {value:.1f}" for name, value in sorted(finals.items()))
        print(f"  members' final policies: {shown}", flush=True)
    run.exploits, run.exploit_notes = _lineage(results_dir)
    print(
        f"  {_cell(run.wall_s, '.0f')} s, {run.env_steps:,.0f} env steps; result "
        f"{_cell(run.result)} ({run.result_member} at {run.result_iteration}), best short "
        f"evaluation {_cell(run.best_short)}, members' median {_cell(run.median_final)}, "
        f"{run.exploits} exploits, evaluations {run.eval_env_steps:,.0f} env steps",
        flush=True,
    )
    return run


def _cell(value: float, fmt: str = ".1f") -> str:
    return "-" if math.isnan(value) else format(value, fmt)


def report(runs: list[Run], arms: list[str], episodes: int) -> None:
    print()
    print(
        "| seed | set | arm | exit | members | wall s | env steps | result (100 ep.) | "
        "result's member | best short eval | members' final median | eval env steps | "
        "exploits |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for r in runs:
        print(
            f"| {r.seed} | {seed_set(r.seed)} | {r.arm} | {r.returncode} | {r.members} | "
            f"{_cell(r.wall_s, '.0f')} | {r.env_steps:,.0f} | {_cell(r.result)} | "
            f"{r.result_member or '-'} @ {r.result_iteration} | {_cell(r.best_short)} | "
            f"{_cell(r.median_final)} | {r.eval_env_steps:,.0f} | {r.exploits} |"
        )
    print()
    print("per arm over seeds (IQM with a 95% bootstrap interval over seeds):")
    print(
        "| arm | runs | result: median | result: IQM | members' final median: median | "
        "members' final median: IQM | wall s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for arm in arms:
        mine = [r for r in runs if r.arm == arm]
        result = [r.result for r in mine]
        final = [r.median_final for r in mine]
        print(
            f"| {arm} | {len(mine)} | {_median(result)} | {iqm_interval(_finite(result)).text()} "
            f"| {_median(final)} | {_cell(iqm(final))} | "
            f"{spread([r.wall_s for r in mine if not math.isnan(r.wall_s)], '.0f')} |"
        )
    anchor = {r.seed: r for r in runs if r.arm == ANCHOR}
    if not anchor:
        return
    print()
    print(
        f"against {ANCHOR} search, paired by seed (arm minus {ANCHOR}; 95% bootstrap "
        "intervals over seeds; P(improvement): rliable's, with its interval):"
    )
    print(
        "| arm | figure | seeds | per-seed differences | median difference | mean "
        "difference | P(improvement) |"
    )
    print("|---|---|---:|---|---:|---:|---:|")
    for arm in arms:
        if arm == ANCHOR:
            continue
        for label, get in (
            ("result", lambda r: r.result),
            ("members' final median", lambda r: r.median_final),
        ):
            pairs = [
                (get(r), get(anchor[r.seed]))
                for r in runs
                if r.arm == arm
                and r.seed in anchor
                and math.isfinite(get(r))
                and math.isfinite(get(anchor[r.seed]))
            ]
            if not pairs:
                continue
            mine, theirs = [a for a, _ in pairs], [b for _, b in pairs]
            diffs = ", ".join(f"{a - b:+.1f}" for a, b in pairs)
            print(
                f"| {arm} | {label} | {len(pairs)} | {diffs} | "
                f"{median_difference(mine, theirs).text()} | "
                f"{mean_difference(mine, theirs).text()} | "
                f"{improvement(mine, theirs).text('.2f')} |"
            )
    for r in runs:
        if r.exploit_notes:
            shown = "; ".join(r.exploit_notes[:6])
            more = f" (+{len(r.exploit_notes) - 6} more)" if len(r.exploit_notes) > 6 else ""
            print(f"exploits, {r.arm} seed {r.seed}: {shown}{more}")


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def _median(values: list[float]) -> str:
    finite = _finite(values)
    return _cell(statistics.median(finite)) if finite else "-"


def plot(runs: list[Run], arms: list[str], path: Path, title: str) -> None:
    """The anytime curves (short_evaluation_curve) of every run, coloured by arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, arm in enumerate(arms):
        for j, r in enumerate(x for x in runs if x.arm == arm and x.curve):
            xs, ys = zip(*r.curve, strict=True)
            # A best-so-far is a step function: it holds until the next better evaluation.
            ax.plot(
                xs,
                ys,
                drawstyle="steps-post",
                color=colors[i % len(colors)],
                alpha=0.7,
                label=arm if j == 0 else None,
            )
    ax.set_xlabel("population env steps")
    ax.set_ylabel("best short evaluation so far")
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
    parser.add_argument(
        "--seeds",
        default="dev:0-2",
        help="'report' (seeds 100-109, after the defaults are frozen), 'dev:A-B' (within "
        "0-49), or a list such as 7,8,9 (held out: checks outside the project)",
    )
    parser.add_argument("--budget", type=int, default=400_000, help="env steps per run")
    parser.add_argument("--population", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=100, help="final evaluation episodes")
    parser.add_argument("--plot", type=Path, default=None, help="the anytime curve's PNG")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="passed on to run"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run (the test)")
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="keep every run under this folder; a run already finished there is not run "
        "again (spread a report over several sittings)",
    )
    parser.add_argument(
        "--measure-again",
        type=Path,
        default=None,
        metavar="ROOT",
        help="measure the runs kept under ROOT again, without training",
    )
    args = parser.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        parser.error(f"--arms: no arm {unknown}; arms: {', '.join(ARMS)}")
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as err:
        parser.error(f"--seeds: {err}")
    task = TASKS[args.task]
    import yaml

    training = yaml.safe_load(task.read_text()).get("training", {})
    extra = list(args.set)
    steps_per_iteration = int(training.get("train_batch_size_per_learner", 4000))
    if args.quick:
        # Two members, four iterations of 512 env steps on 2 envs each: an episode (999
        # steps on MountainCar at most) ends in every env; short evaluations of 2
        # episodes every 2 iterations.
        seeds, args.population, args.episodes = seeds[:1], 2, 5
        steps_per_iteration = 512
        args.budget = 2 * 4 * steps_per_iteration
        extra += [
            f"training.train_batch_size_per_learner={steps_per_iteration}",
            "training.minibatch_size=128",
            "training.num_epochs=1",
            "checkpoint.frequency=2",
            "resources.env_runners.envs_per_runner=2",
            "evaluation.short_episodes=2",
            "evaluation.episodes=5",
            "evaluation.confirm=2",
        ]
    budget = Budget(args.budget, args.population, steps_per_iteration)
    # Two members: the bottom half is one member (quantile 0.25 would exploit none).
    quantile = 0.5 if args.population < 4 else 0.25
    min_gain, spare_improving, burn_in = task_min_gain(task), task_spare(task), task_burn_in(task)
    again = args.measure_again
    if again is not None and not again.is_dir():
        parser.error(f"--measure-again: {again} is not a folder a --root run left")
    root = again or args.root or Path(tempfile.mkdtemp(prefix="scheduler_shootout-"))
    root.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    print("command:", command_line())
    sets = sorted({seed_set(s) for s in seeds})
    print(
        f"{now:%Y-%m-%d %H:%M:%S} UTC; task {task.relative_to(ROOT)}; {budget.total_env_steps:,} "
        f"env steps per run ({budget.population} members x {budget.member_steps:,}, "
        f"{budget.member_iterations} iterations of {steps_per_iteration}); seeds "
        f"{', '.join(map(str, seeds))} ({', '.join(sets)}); load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; runs under {root}"
    )
    runs = []
    for i, seed in enumerate(seeds):
        turn = i % len(arms)
        for arm in arms[turn:] + arms[:turn]:
            if again is not None:
                run = measure_again(root, arm, seed, args.episodes)
            else:
                done = finished(root, arm, seed)
                run = done or run_once(
                    task,
                    arm,
                    seed,
                    budget,
                    root,
                    args.episodes,
                    extra,
                    quantile,
                    min_gain,
                    spare_improving,
                    burn_in,
                )
            if run.returncode == 0:  # a failed run is tried again in the next sitting
                save(root, run)
            runs.append(run)
    report(runs, arms, args.episodes)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if args.plot is not None:
        title = (
            f"{args.task}: {budget.total_env_steps:,} env steps a run, best short evaluation so far"
        )
        plot(runs, arms, args.plot, title)
        print(f"anytime curve: {args.plot}")
    print(f"kept {root}")
    return 1 if any(r.returncode != 0 for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
