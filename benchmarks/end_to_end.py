"""End to end, one PPO trial: env steps per second with learning included, and the time to 475.

The anchor is RLlib's tuned PPO example for CartPole (``rllib/tuned_examples/ppo/
cartpole_ppo.py``: lr 3e-4, 6 epochs, vf_loss_coeff 0.01, one 32-unit linear layer
shared by policy and value; RLlib's defaults for the rest, a 4,000-step train batch in
minibatches of 128) with 8 envs, sampling and learning in the trial's one process on one
core, as a Tune trial with one CPU runs it. The arms:

* ``rllib_example``: that example as RLlib ships it: Gymnasium's CartPole-v1, RLlib's
  ``SingleAgentEnvRunner`` (the anchor);
* ``rllib_example_sim_ext``: the same on sim_ext's C++ CartPole (what the env alone buys);
* ``fast_runner_only``: the same with the workbench's fast env runner (what the runner alone
  buys: the learner is left as it was, Amdahl's law);
* ``workbench``: the same hyperparameters (lr, epochs, vf_loss_coeff, batch, 8 envs) in a
  workbench experiment that sets nothing else, built by the workbench (``resolve`` and
  ``algorithm_config``): the fast runner and the small-env defaults
  (workbench/experiment/defaults.py: 64x64 tanh policy and value networks, four minibatches
  per batch, one torch thread).

Throughput: every arm is built once, then each round runs ``--iterations`` ``train()`` calls
of every arm in turn (interleaved); env steps sampled per wall second over those calls,
median/min/max over the rounds, and each arm's median over the anchor's. The rows also give
the sampling share of an iteration (RLlib's env-runner sampling timer over the iteration).

Learning (``--seeds``): per seed, ``rllib_example`` and ``workbench`` each trained from a
fresh build until the iteration's mean return reaches 475 (or the budget): env steps and
wall seconds to 475. Throughput means nothing if learning per env step got worse.

RL Zoo's hyperparameters (``--zoo-seeds``): RL Zoo's tuned PPO for CartPole-v1 (8 envs x 32
steps, minibatch 256, 20 epochs, gae_lambda 0.8, gamma 0.98, lr 1e-3 and clip 0.2 decaying
linearly to 0 over 1e5 steps; SB3's defaults where RLlib's differ: vf_loss_coeff 0.5,
grad_clip 0.5, no KL term, no value clipping), per seed in turn:

* ``zoo_workbench``: a workbench experiment with those values (the lean learner, the fast
  runner, the small-env networks: one workbench trial);
* ``zoo_rllib_learner``: the same experiment run by RLlib's own ``Learner.update`` loop and
  PPO loss (``learner_config_dict: {lean_learner: false}``: the lean learner class with its
  loop switched off, which gives RLlib's loss the scheduled clip; RLlib's own learner class
  has no clip schedule): learning parity per env step;
* ``workbench_fast`` (``--zoo-arms``): one workbench trial with fewer updates per env step
  (``FAST_TRAINING``: 16 envs x 32 steps, 10 epochs, lr 2e-3 decaying), chosen by a sweep on
  seeds 0-2;
* ``sb3``: Stable-Baselines3 with RL Zoo's own entry (`benchmarks/sb3_cartpole.py` in RL
  Zoo's virtualenv, ``make zoo-venv``; ``--zoo-python``);
* ``sb3_fast`` (``--zoo-arms``): SB3 given the care ``workbench_fast`` got: the same
  one-change-at-a-time sweep of RL Zoo's entry on seeds 0-2 (``--zoo-sweep``,
  ``SB3_SWEEP``), its lowest median (``SB3_FAST``).

The tuned arms were chosen on seeds 0-2; the race that compares them runs on the report
seeds 100-109, and prints each arm against its anchor per seed (``ZOO_PAIRS``): the ratio
of wall times and the paired median difference in seconds with its 95% bootstrap interval.

Each until the mean return of the episodes that ended in a block of 4,000 env steps
(`zoo_reference.Crossing`) reaches 475: wall seconds (from the first update, the algorithm
built) and env steps. All on the same one core.

    .venv/bin/python benchmarks/end_to_end.py [--rounds 5] [--iterations 3] [--seeds 0,1,2]
    .venv/bin/python benchmarks/end_to_end.py --rounds 0 --seeds '' --zoo-seeds 0,1,2
    .venv/bin/python benchmarks/end_to_end.py --rounds 0 --seeds '' --zoo-seeds 0,1,2 --zoo-sweep
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: python benchmarks/end_to_end.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import (
    ROOT,
    command_line,
    interleaved,
    median_min_max,
    pin_to_one_cpu,
    spread,
)
from benchmarks.shootout_stats import median_difference
from benchmarks.zoo_reference import Crossing

# rllib/tuned_examples/ppo/cartpole_ppo.py (Ray 2.60)
EXAMPLE_TRAINING: dict[str, Any] = {"lr": 3e-4, "num_epochs": 6, "vf_loss_coeff": 0.01}
EXAMPLE_MODEL: dict[str, Any] = {
    "fcnet_hiddens": [32],
    "fcnet_activation": "linear",
    "vf_share_layers": True,
}
ENVS = 8
BATCH = 4000  # RLlib's PPO default train batch, which the example keeps
ARMS = ("rllib_example", "rllib_example_sim_ext", "fast_runner_only", "workbench")
LEARNING_ARMS = ("rllib_example", "workbench")
# RL Zoo's hyperparams/ppo.yml for CartPole-v1, in RLlib's names; SB3's defaults where
# RLlib's differ (vf_coef 0.5, max_grad_norm 0.5, no KL penalty, no value clipping).
ZOO_STEPS = 100_000  # RL Zoo's n_timesteps: the linear schedules reach 0 there
ZOO_TRAINING: dict[str, Any] = {
    "train_batch_size_per_learner": 256,
    "minibatch_size": 256,
    "num_epochs": 20,
    "lambda_": 0.8,
    "gamma": 0.98,
    "lr": [[0, 1e-3], [ZOO_STEPS, 0.0]],
    "clip_param": [[0, 0.2], [ZOO_STEPS, 0.0]],
    "entropy_coeff": 0.0,
    "vf_loss_coeff": 0.5,
    "grad_clip": 0.5,
    "use_kl_loss": False,
    "vf_clip_param": 1e9,
}
# RL Zoo's settings with fewer updates per env step: 16 envs x 32 steps, 10 epochs of one
# minibatch of 256 each (20 updates per 512 env steps against RL Zoo's 20 per 256) and a
# doubled learning rate. Chosen by a sweep on seeds 0-2 (docs/benchmarks/end-to-end.md
# lists every setting tried); the race runs it on other seeds.
FAST_ENVS = 16
FAST_TRAINING: dict[str, Any] = {
    **ZOO_TRAINING,
    "train_batch_size_per_learner": 512,
    "num_epochs": 10,
    "lr": [[0, 2e-3], [ZOO_STEPS, 0.0]],
}
# SB3 given the same care as `workbench_fast`: the same one-change-at-a-time sweep of RL
# Zoo's entry (``--zoo-sweep``, SB3's names: a batch is n_envs x n_steps, the minibatch
# batch_size), on the same seeds 0-2. Each setting as ``--set`` items of sb3_cartpole.py.
SB3_SWEEP: dict[str, tuple[str, ...]] = {
    "RL Zoo's (8 envs, batch 256, 20 epochs, lr 1e-3)": (),
    "10 epochs": ("n_epochs=10",),
    "batch 512, 10 epochs, lr 2e-3": ("n_steps=64", "n_epochs=10", "learning_rate=lin_2e-3"),
    "10 epochs, lr 2e-3, 16 envs": (
        "n_envs=16", "n_steps=16", "n_epochs=10", "learning_rate=lin_2e-3",
    ),
    "batch 512, 10 epochs": ("n_steps=64", "n_epochs=10"),
    "batch 512, 10 epochs, lr 2e-3, 16 envs": (
        "n_envs=16", "n_steps=32", "n_epochs=10", "learning_rate=lin_2e-3",
    ),
    "batch 512, 10 epochs, lr 2e-3, 32 envs": (
        "n_envs=32", "n_steps=16", "n_epochs=10", "learning_rate=lin_2e-3",
    ),
    "batch 512, 10 epochs, lr 3e-3, 16 envs": (
        "n_envs=16", "n_steps=32", "n_epochs=10", "learning_rate=lin_3e-3",
    ),
    "batch 512, 8 epochs, lr 2e-3, 16 envs": (
        "n_envs=16", "n_steps=32", "n_epochs=8", "learning_rate=lin_2e-3",
    ),
    "batch 512, 6 epochs": ("n_steps=64", "n_epochs=6"),
    "batch 512, 5 epochs, lr 2e-3": ("n_steps=64", "n_epochs=5", "learning_rate=lin_2e-3"),
    "batch 512, minibatch 512, 10 epochs": ("n_steps=64", "batch_size=512", "n_epochs=10"),
    "batch 512, minibatch 128, 5 epochs": ("n_steps=64", "batch_size=128", "n_epochs=5"),
    "batch 1024, 10 epochs": ("n_steps=128", "n_epochs=10"),
    "batch 1024, 10 epochs, 16 envs": ("n_envs=16", "n_steps=64", "n_epochs=10"),
    "batch 1024, 10 epochs, lr 2e-3, 16 envs": (
        "n_envs=16", "n_steps=64", "n_epochs=10", "learning_rate=lin_2e-3",
    ),
    "batch 1024, minibatch 512, 10 epochs": ("n_steps=128", "batch_size=512", "n_epochs=10"),
    "batch 1024, 6 epochs": ("n_steps=128", "n_epochs=6"),
    "batch 1024, 5 epochs, lr 2e-3, 16 envs": (
        "n_envs=16", "n_steps=64", "n_epochs=5", "learning_rate=lin_2e-3",
    ),
    "gamma 0.99, lambda 0.95, batch 512, 10 epochs": (
        "gamma=0.99", "gae_lambda=0.95", "n_steps=64", "n_epochs=10",
    ),
}  # fmt: skip
# The sweep's choice for SB3 (its lowest median over seeds 0-2; docs/benchmarks/end-to-end.md).
SB3_FAST: tuple[str, ...] = SB3_SWEEP["batch 1024, 10 epochs, lr 2e-3, 16 envs"]
ZOO_ARMS = ("zoo_workbench", "zoo_rllib_learner", "workbench_fast", "sb3", "sb3_fast")
# Each arm's anchor in the race's paired comparisons: the same care on both sides.
ZOO_PAIRS = (("zoo_workbench", "sb3"), ("workbench_fast", "sb3_fast"), ("workbench_fast", "sb3"))
DEFAULT_ZOO_ARMS = ("zoo_workbench", "zoo_rllib_learner", "sb3")
ZOO_BLOCK = 4000


def example_config(env: str, *, fast: bool, seed: int, batch: int) -> Any:
    """RLlib's tuned CartPole example, sampling in the trial's process with 8 envs."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from workbench.trial.config import register_env
    from workbench.trial.fast_runner import FastEnvRunner

    sim = env.startswith("sim_ext/")
    config = (
        PPOConfig()
        .environment(env=register_env(env) if sim else env)
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=ENVS,
            gym_env_vectorize_mode="vector_entry_point" if sim else "sync",
        )
        .rl_module(model_config=dict(EXAMPLE_MODEL))
        .training(**EXAMPLE_TRAINING, train_batch_size_per_learner=batch)
        .debugging(seed=seed)
    )
    if fast:
        config.env_runners(env_runner_cls=FastEnvRunner)
    return config


def workbench_config(
    seed: int,
    batch: int,
    folder: Path,
    training: dict[str, Any] | None = None,
    envs: int = ENVS,
    **fields: Any,
) -> Any:
    """The example's hyperparameters (or `training`) in a workbench experiment, built as
    `workbench run` builds a trial's config (everything else: the workbench's defaults)."""
    import yaml

    from workbench.experiment.resolve import load_and_resolve
    from workbench.trial.config import algorithm_config

    experiment = {
        "name": "end_to_end",
        "algorithm": "PPO",
        "env": {"id": "sim_ext/CartPole-v1"},
        "training": training or {**EXAMPLE_TRAINING, "train_batch_size_per_learner": batch},
        "resources": {"env_runners": {"count": 0, "envs_per_runner": envs}},
        "stop": {"return_mean": 475},
        "population": 1,
        "seed": seed,
        "storage": str(folder),
        **fields,
    }
    path = folder / "end_to_end.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False))
    resolved = load_and_resolve(path, check_results=False)
    print(f"  workbench {resolved.defaults.summary()}", file=sys.stderr)
    return algorithm_config(resolved.experiment, resolved.defaults).debugging(seed=seed)


def builder(arm: str, batch: int, folder: Path) -> Callable[[int], Any]:
    sim = "sim_ext/CartPole-v1"
    if arm == "rllib_example":
        return lambda seed: example_config("CartPole-v1", fast=False, seed=seed, batch=batch)
    if arm == "rllib_example_sim_ext":
        return lambda seed: example_config(sim, fast=False, seed=seed, batch=batch)
    if arm == "fast_runner_only":
        return lambda seed: example_config(sim, fast=True, seed=seed, batch=batch)
    if arm == "workbench":
        return lambda seed: workbench_config(seed, batch, folder)
    if arm == "zoo_workbench":
        return lambda seed: workbench_config(seed, batch, folder, ZOO_TRAINING)
    if arm == "workbench_fast":
        return lambda seed: workbench_config(seed, batch, folder, FAST_TRAINING, envs=FAST_ENVS)
    if arm == "zoo_rllib_learner":
        # RLlib's own update loop and loss (with the clip schedule: RLlib's learner class
        # has none), through the lean learner class with its loop switched off.
        training = {**ZOO_TRAINING, "learner_config_dict": {"lean_learner": False}}
        return lambda seed: workbench_config(seed, batch, folder, training)
    raise ValueError(arm)


def build(config: Any) -> Any:
    import torch

    algo = config.build_algo()
    # One CPU per trial: Ray gives a 1-CPU trial actor OMP_NUM_THREADS=1; the workbench's
    # callbacks set it too. The same for every arm, in this one process.
    torch.set_num_threads(1)
    return algo


def timed_iterations(algo: Any, iterations: int) -> tuple[float, float]:
    """Env steps per second over `iterations` train() calls, and the sampling share."""
    steps = 0.0
    sampling = 0.0
    start = time.perf_counter()
    for _ in range(iterations):
        before = time.perf_counter()
        result = algo.train()
        took = time.perf_counter() - before
        steps += float(result["env_runners"]["num_env_steps_sampled"])
        sample_s = result.get("timers", {}).get("env_runner_sampling_timer")
        sampling += min(float(sample_s), took) if sample_s is not None else float("nan")
    elapsed = time.perf_counter() - start
    return steps / elapsed, sampling / elapsed


def time_to_target(
    algo: Any, target: float, max_steps: int, max_s: float
) -> tuple[int | None, float, float, int]:
    """Trains until an iteration's mean return reaches `target`: (env steps then, seconds,
    best return, iterations)."""
    start = time.perf_counter()
    best = float("-inf")
    steps = 0
    iterations = 0
    while steps < max_steps and time.perf_counter() - start < max_s:
        result = algo.train()
        iterations += 1
        steps = int(result["num_env_steps_sampled_lifetime"])
        value = result["env_runners"].get("episode_return_mean")
        if value is not None and value == value:
            best = max(best, float(value))
            if value >= target:
                return steps, time.perf_counter() - start, best, iterations
    return None, time.perf_counter() - start, best, iterations


def time_to_block_target(
    algo: Any, target: float, block: int, max_steps: int, max_s: float
) -> tuple[int | None, float | None, float]:
    """Trains until the episodes that ended in a block of `block` env steps have a mean
    return of at least `target` (`zoo_reference.Crossing`, fed each iteration's mean
    return once per episode that ended in it): (env steps, seconds, best block mean)."""
    crossing = Crossing(target, block=block)
    start = time.perf_counter()
    steps = 0
    while steps < max_steps and time.perf_counter() - start < max_s:
        result = algo.train()
        steps = int(result["num_env_steps_sampled_lifetime"])
        runners = result["env_runners"]
        episodes = int(runners.get("num_episodes", 0) or 0)
        mean = runners.get("episode_return_mean")
        finished = [float(mean)] * episodes if episodes and mean == mean else []
        if crossing.add(finished, steps):
            return steps, time.perf_counter() - start, crossing.best
    return None, None, crossing.best


def sb3_run(
    python: str,
    seed: int,
    target: float,
    max_steps: int,
    max_s: float,
    sets: tuple[str, ...] = (),
) -> dict[str, Any]:
    """benchmarks/sb3_cartpole.py in RL Zoo's virtualenv (this process's CPU pinning is
    inherited), with ``sets`` applied to RL Zoo's entry: its JSON line."""
    import subprocess

    command = [
        python,
        str(ROOT / "benchmarks" / "sb3_cartpole.py"),
        f"--seed={seed}",
        f"--target={target}",
        f"--block={ZOO_BLOCK}",
        f"--max-steps={max_steps}",
        f"--max-seconds={max_s}",
        *(f"--set={item}" for item in sets),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    figures: dict[str, Any] = json.loads(lines[-1])
    return figures


def zoo_learning(args: argparse.Namespace, folder: Path, out: dict[str, Any]) -> None:
    seeds = [int(s) for s in args.zoo_seeds.split(",") if s.strip()]
    arms = tuple(a.strip() for a in args.zoo_arms.split(",") if a.strip())
    unknown = set(arms) - set(ZOO_ARMS)
    if unknown:
        raise SystemExit(f"--zoo-arms: unknown {sorted(unknown)}; valid: {', '.join(ZOO_ARMS)}")
    print(
        f"\nRL Zoo's CartPole hyperparameters: time to a {ZOO_BLOCK:,}-step block mean of "
        f"{args.target:g}, per seed (seconds from the first update)"
    )
    print(f"{'seed':>4} {'arm':<18} {'env steps':>10} {'seconds':>8} best")
    for seed in seeds:
        order = arms if seed % 2 == 0 else arms[::-1]
        for arm in order:
            if arm in ("sb3", "sb3_fast"):
                sets = SB3_FAST if arm == "sb3_fast" else ()
                figures = sb3_run(
                    args.zoo_python, seed, args.target, args.max_steps, args.max_seconds, sets
                )
                steps, seconds, best = figures["env_steps"], figures["seconds"], figures["best"]
            else:
                algo = build(builder(arm, 256, folder)(seed))
                try:
                    steps, seconds, best = time_to_block_target(
                        algo, args.target, ZOO_BLOCK, args.max_steps, args.max_seconds
                    )
                finally:
                    algo.stop()
            shown = f"{steps:,}" if steps is not None else "-"
            took = f"{seconds:.1f}" if seconds is not None else "-"
            print(f"{seed:>4} {arm:<18} {shown:>10} {took:>8} {best:.1f}", flush=True)
            out["zoo"].append(
                {"seed": seed, "arm": arm, "env_steps": steps, "seconds": seconds, "best": best}
            )
    print("\nmedian [min-max] over seeds, runs that reached the target")
    for arm in arms:
        runs = [r for r in out["zoo"] if r["arm"] == arm and r["seconds"] is not None]
        print(
            f"{arm:<18} reached {len(runs)}/{len(seeds)}: env steps "
            f"{spread([r['env_steps'] for r in runs], ',.0f')}, seconds "
            f"{spread([r['seconds'] for r in runs])}"
        )
    per_seed: dict[int, dict[str, Any]] = {}
    for r in out["zoo"]:
        per_seed.setdefault(r["seed"], {})[r["arm"]] = r["seconds"]
    for arm, anchor in ZOO_PAIRS:
        paired = [
            (times[arm], times[anchor])
            for times in per_seed.values()
            if times.get(arm) and times.get(anchor)
        ]
        if not paired:
            continue
        ratios = [a / b for a, b in paired]
        seconds = median_difference([a for a, _ in paired], [b for _, b in paired])
        faster = sum(a < b for a, b in paired)
        print(
            f"{arm} / {anchor} wall time, per seed: {spread(ratios, '.2f', 'x')}; paired "
            f"median difference {seconds.text('+.1f')} s; faster on {faster} of {len(paired)}"
        )


def zoo_sweep(args: argparse.Namespace, out: dict[str, Any]) -> None:
    """SB3's sweep (``SB3_SWEEP``) on ``--zoo-seeds``: seconds to the block target per
    setting and seed, the median over the seeds, and the lowest median."""
    seeds = [int(s) for s in args.zoo_seeds.split(",") if s.strip()]
    print("\nSB3 sweep of RL Zoo's CartPole entry, seconds to the block mean (env steps, k)")
    print(f"| setting (RL Zoo's otherwise) | {' | '.join(f'seed {s}' for s in seeds)} | median |")
    print(f"|---|{'---:|' * (len(seeds) + 1)}")
    medians: dict[str, float] = {}
    for name, sets in SB3_SWEEP.items():
        cells, times = [], []
        for seed in seeds:
            figures = sb3_run(
                args.zoo_python, seed, args.target, args.max_steps, args.max_seconds, sets
            )
            out["sweep"].append({"setting": name, "seed": seed, **figures})
            if figures["seconds"] is None:
                cells.append(f"not in {args.max_seconds:g} s")
                times.append(float("inf"))
            else:
                cells.append(f"{figures['seconds']:.1f} ({figures['env_steps'] / 1000:.0f}k)")
                times.append(float(figures["seconds"]))
        medians[name] = statistics.median(times)
        print(f"| {name} | {' | '.join(cells)} | {medians[name]:.1f} |", flush=True)
    best = min(medians, key=lambda n: medians[n])
    print(f"lowest median: {best} ({medians[best]:.1f} s): {' '.join(SB3_SWEEP[best])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=3, help="train() calls per round")
    parser.add_argument("--seeds", default="0,1,2", help="learning runs ('' to skip)")
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--max-steps", type=int, default=400_000)
    parser.add_argument("--max-seconds", type=float, default=240.0)
    parser.add_argument("--batch", type=int, default=BATCH, help="train batch (the test: less)")
    parser.add_argument("--core", type=int, default=None, help="pin to this CPU (default: last)")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument(
        "--zoo-seeds", default="", help="RL Zoo's hyperparameters: workbench, RLlib, SB3"
    )
    parser.add_argument(
        "--zoo-python",
        default=str(ROOT / ".venv-zoo" / "bin" / "python"),
        help="RL Zoo's virtualenv's python (make zoo-venv), for the SB3 arm",
    )
    parser.add_argument(
        "--zoo-arms", default=",".join(DEFAULT_ZOO_ARMS), help=f"of {', '.join(ZOO_ARMS)}"
    )
    parser.add_argument(
        "--zoo-sweep", action="store_true", help="SB3's sweep (SB3_SWEEP) on --zoo-seeds instead"
    )
    args = parser.parse_args(argv)

    warnings.filterwarnings("ignore")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    core = pin_to_one_cpu(args.core, default="last")
    import ray
    import torch

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    folder = Path(tempfile.mkdtemp(prefix="end_to_end-"))
    print("command:", command_line())
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, "
        f"ray {ray.__version__}, one core (#{core}), {ENVS} envs, train batch {args.batch}, "
        f"{args.rounds} interleaved rounds of {args.iterations} iterations per arm"
    )
    out: dict[str, Any] = {"throughput": [], "learning": [], "zoo": [], "sweep": []}
    if args.rounds > 0:
        throughput(args, folder, out)
    learning(args, folder, out)
    if args.zoo_seeds.strip() and args.zoo_sweep:
        zoo_sweep(args, out)
    elif args.zoo_seeds.strip():
        zoo_learning(args, folder, out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    ray.shutdown()
    return 0


def throughput(args: argparse.Namespace, folder: Path, out: dict[str, Any]) -> None:
    algos = {arm: build(builder(arm, args.batch, folder)(0)) for arm in ARMS}
    try:
        for arm in ARMS:  # warm: the first iteration pays for lazy set-up
            algos[arm].train()
        measured = interleaved(
            args.rounds, ARMS, lambda arm: timed_iterations(algos[arm], args.iterations)
        )
    finally:
        for algo in algos.values():
            algo.stop()
    rates = {arm: [rate for rate, _ in rounds] for arm, rounds in zip(ARMS, measured, strict=True)}
    shares = {arm: [sh for _, sh in rounds] for arm, rounds in zip(ARMS, measured, strict=True)}

    anchor = statistics.median(rates[ARMS[0]])
    print("\nenv steps per second, learning included (one PPO trial, one core)")
    print(f"{'arm':<24} {'median':>9} {'min':>9} {'max':>9} {'vs example':>11} {'sampling':>9}")
    for arm in ARMS:
        values = rates[arm]
        median, low, high = median_min_max(values)
        share = statistics.median(shares[arm])
        print(
            f"{arm:<24} {median:>9,.0f} {low:>9,.0f} {high:>9,.0f} "
            f"{median / anchor:>10.2f}x {100 * share:>8.0f}%"
        )
        out["throughput"].append(
            {
                "arm": arm,
                "median": median,
                "min": low,
                "max": high,
                "vs_example": median / anchor,
                "sampling_share": share,
                "rounds": values,
            }
        )


def learning(args: argparse.Namespace, folder: Path, out: dict[str, Any]) -> None:
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if seeds:
        print(f"\ntime to {args.target:g} (an iteration's mean return), per seed")
        print(f"{'seed':>4} {'arm':<14} {'env steps':>10} {'seconds':>8} {'iterations':>10} best")
    for seed in seeds:
        order = LEARNING_ARMS if seed % 2 == 0 else LEARNING_ARMS[::-1]
        for arm in order:
            algo = build(builder(arm, args.batch, folder)(seed))
            try:
                steps, seconds, best, iterations = time_to_target(
                    algo, args.target, args.max_steps, args.max_seconds
                )
            finally:
                algo.stop()
            shown = f"{steps:,}" if steps is not None else "-"
            print(f"{seed:>4} {arm:<14} {shown:>10} {seconds:>8.1f} {iterations:>10} {best:.1f}")
            out["learning"].append(
                {"seed": seed, "arm": arm, "env_steps": steps, "seconds": seconds, "best": best}
            )
    if seeds:
        print("\nmedian [min-max] over seeds, runs that reached the target")
        for arm in LEARNING_ARMS:
            runs = [r for r in out["learning"] if r["arm"] == arm and r["env_steps"] is not None]
            print(
                f"{arm:<14} reached {len(runs)}/{len(seeds)}: env steps "
                f"{spread([r['env_steps'] for r in runs], ',.0f')}, seconds "
                f"{spread([r['seconds'] for r in runs])}"
            )


if __name__ == "__main__":
    sys.exit(main())
