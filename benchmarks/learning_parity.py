"""Learning parity: PPO with the fast env runner learns as fast, per env step, as with RLlib's.

PPO on sim_ext CartPole-v1 with fixed hyperparameters, for several seeds, once with
RLlib's ``SingleAgentEnvRunner`` and once with the workbench's ``FastEnvRunner``
(interleaved: seed 0 rllib, seed 0 fast, seed 1 rllib, ...), each until the mean
return reaches the target (475) or the env-step budget runs out. Prints env steps and
wall time to the target per run, and the median per runner.

    python benchmarks/learning_parity.py [--seeds 0 1 2] [--target 475] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: python benchmarks/learning_parity.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import RETURN_METRIC, command_line, median_min_max, number_at

STEPS = "num_env_steps_sampled_lifetime"


def run_once(runner: str, seed: int, target: float, budget: int) -> dict[str, Any]:
    from ray.rllib.algorithms.ppo import PPOConfig

    from workbench.trial.config import register_env
    from workbench.trial.fast_runner import FastEnvRunner

    env_id = register_env("sim_ext/CartPole-v1")
    config = (
        PPOConfig()
        .environment(env=env_id)
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=16,
            gym_env_vectorize_mode="vector_entry_point",
        )
        .training(
            lr=3e-4,
            num_epochs=6,
            minibatch_size=256,
            vf_loss_coeff=0.01,
            train_batch_size_per_learner=2000,
        )
        .debugging(seed=seed)
    )
    if runner == "fast":
        config.env_runners(env_runner_cls=FastEnvRunner)
    algo = config.build_algo()
    start = time.perf_counter()
    steps, best, reached = 0, float("-inf"), None
    try:
        while steps < budget:
            result = algo.train()
            steps = int(result[STEPS])
            value = number_at(result, *RETURN_METRIC)
            if value is not None:
                best = max(best, float(value))
                if float(value) >= target:
                    reached = steps
                    break
    finally:
        algo.stop()
    return {
        "runner": runner,
        "seed": seed,
        "env_steps": reached,
        "best_return": best,
        "wall_s": time.perf_counter() - start,
        "iterations": int(result["training_iteration"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--budget", type=int, default=400_000, help="env steps per run")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray
    import torch

    torch.set_num_threads(1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    print("command:", command_line())
    runs = []
    for seed in args.seeds:
        for runner in ("rllib", "fast"):
            run = run_once(runner, seed, args.target, args.budget)
            runs.append(run)
            shown = run["env_steps"] if run["env_steps"] is not None else "not reached"
            print(
                f"seed {seed} {runner:<5}: env steps to {args.target:g}: {shown} "
                f"(best {run['best_return']:.1f}, {run['iterations']} iterations, "
                f"{run['wall_s']:.0f} s)",
                flush=True,
            )
    ray.shutdown()
    print(f"\n{'runner':<8} {'median env steps':>17} {'min':>8} {'max':>8} {'median wall s':>14}")
    for runner in ("rllib", "fast"):
        mine = [r for r in runs if r["runner"] == runner]
        steps = [r["env_steps"] if r["env_steps"] is not None else args.budget for r in mine]
        median, low, high = median_min_max(steps)
        wall, _, _ = median_min_max([r["wall_s"] for r in mine])
        print(f"{runner:<8} {median:>17,.0f} {low:>8,} {high:>8,} {wall:>14.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
