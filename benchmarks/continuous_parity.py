"""Learning parity on continuous control: the workbench's path (the fast env runner and the
lean learner) learns as much per env step as RLlib's own (its env runner and learner), on
the same seeds and settings; and what the network size does.

    .venv/bin/python benchmarks/continuous_parity.py [--task lunarlander] [--seeds 0 1 2] \\
        [--budget 500000] [--arms fast,rllib,fast_256] [--jobs 2] [--json out.json]

Each run is one PPO trial (no Tune) in a process of its own with one torch thread, ``--jobs``
at a time, each pinned to a CPU of its own. The settings are the task's experiment file
(``training``, ``model``, env, envs per runner) with the searched hyperparameters fixed at RL
Zoo's values for the task (``FIXED``). Arms:

* ``fast``: the workbench's defaults (``env_runner: auto``, ``learner: auto``): the fast env
  runner and the lean learner, RL Zoo's 64x64 tanh networks;
* ``rllib``: RLlib's ``SingleAgentEnvRunner`` and ``PPOTorchLearner``, the same networks;
* ``fast_256``: the workbench's path with 256x256 ReLU networks (RLlib's default size; its
  default activation is tanh).

Every ``--eval-every`` env steps, and at the end, the policy is evaluated deterministically
(``--eval-episodes`` episodes, ``--final-episodes`` (100) at the end; episode k reset with
seed 10_000 + k) by the workbench's evaluation rollout. Printed: per run its evaluations and
wall time; per arm the final evaluation and the area under the evaluation curve (the mean
of its evaluations: learning per env step), median [min-max] over seeds; and each arm's
per-seed differences with ``rllib`` (the anchor); all runs as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):  # run as a file: python benchmarks/continuous_parity.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, command_line, cpu_model, number_at, spread

TASKS = {"lunarlander": ROOT / "experiments" / "lunarlander_pb2.yaml"}
# RL Zoo's PPO entry for LunarLanderContinuous (hyperparams/ppo.yml): the values of the
# hyperparameters the experiment searches (its lr and clip range are SB3's defaults).
FIXED = {"lunarlander": {"lr": 3e-4, "lambda_": 0.98, "gamma": 0.999, "clip_param": 0.2}}
ARMS = ("fast", "rllib", "fast_256")
RLLIB_NETWORK = {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"}
ZOO_NETWORK = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": False}
EVAL_SEED = 10_000


def run_main(
    task: str, arm: str, seed: int, budget: int, every: int, episodes: int, final_episodes: int
) -> int:
    """One run, in this process: prints one JSON line."""
    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    import tempfile

    from workbench.experiment.resolve import load_and_resolve
    from workbench.trial.config import algorithm_config
    from workbench.trial.rollout import Policy, rollout, torch_actor

    data = yaml.safe_load(TASKS[task].read_text())
    for key in ("search_space", "scheduler", "checkpoint"):
        data.pop(key, None)
    data.update(population=1, seed=seed, env_runner="auto", learner="auto")
    data["stop"] = {"env_steps": budget}  # this loop stops itself; resolve wants a rule
    data["training"] = {**data.get("training", {}), **FIXED[task]}
    if arm == "rllib":
        data.update(env_runner="rllib", learner="rllib")
    data["model"] = dict(RLLIB_NETWORK if arm == "fast_256" else ZOO_NETWORK)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "parity.yaml"
        data["storage"] = folder
        path.write_text(yaml.safe_dump(data))
        resolved = load_and_resolve(path, check_results=False)
    config = algorithm_config(resolved.experiment, resolved.defaults).env_runners(num_env_runners=0)
    algo = config.build_algo()
    env_id = resolved.experiment.env.id
    env_config = dict(resolved.experiment.env.config)

    def evaluate(n: int) -> float:
        module = algo.get_module()
        policy = Policy(
            module,
            algo.env_runner.env.single_action_space,
            normalize_actions=bool(config.normalize_actions),
            clip_actions=bool(config.clip_actions),
        )
        returns, _ = rollout(torch_actor(policy), env_id, env_config, episodes=n, seed=EVAL_SEED)
        return statistics.fmean(returns)

    curve: list[tuple[int, float | None]] = []
    evaluations: list[tuple[int, float]] = []
    steps, next_eval, start, eval_s = 0, every, time.perf_counter(), 0.0
    runner = type(algo.env_runner).__name__
    learner = type(algo.learner_group._learner).__name__
    try:
        while steps < budget:
            result = algo.train()
            steps = int(number_at(result, "num_env_steps_sampled_lifetime") or 0)
            curve.append((steps, number_at(result, "env_runners", "episode_return_mean")))
            if steps >= next_eval and steps < budget:
                began = time.perf_counter()
                evaluations.append((steps, evaluate(episodes)))
                eval_s += time.perf_counter() - began
                next_eval += every
        train_s = time.perf_counter() - start - eval_s
        final = evaluate(final_episodes)
    finally:
        algo.stop()
    evaluations.append((steps, final))
    print(
        json.dumps(
            {
                "task": task,
                "arm": arm,
                "seed": seed,
                "runner": runner,
                "learner": learner,
                "env_steps": steps,
                "train_s": train_s,
                "final": final,
                "evaluations": evaluations,
                "curve": curve,
            }
        )
    )
    return 0


def launch(args: argparse.Namespace, arm: str, seed: int, cpu: int) -> subprocess.Popen[str]:
    command = [sys.executable, str(Path(__file__).resolve()), "--one", arm, "--task", args.task]
    command += ["--seeds", str(seed), "--budget", str(args.budget)]
    command += ["--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes)]
    command += ["--final-episodes", str(args.final_episodes)]
    command = ["taskset", "-c", str(cpu), *command]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="lunarlander")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=500_000, help="env steps per run")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--eval-every", type=int, default=100_000)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--final-episodes", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, a CPU each")
    parser.add_argument("--json")
    parser.add_argument("--one", choices=ARMS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        return run_main(
            args.task,
            args.one,
            args.seeds[0],
            args.budget,
            args.eval_every,
            args.eval_episodes,
            args.final_episodes,
        )
    arms = [a for a in args.arms.split(",") if a]
    if set(arms) - set(ARMS):
        parser.error(f"--arms: valid: {', '.join(ARMS)}")
    print("command:", command_line())
    now = datetime.datetime.now(datetime.timezone.utc)
    print(
        f"{now:%Y-%m-%d %H:%M:%S} UTC; {os.cpu_count()} CPUs ({cpu_model()}), load average "
        f"{os.getloadavg()[0]:.1f}; {args.task}, {args.budget:,} env steps a run, seeds "
        f"{', '.join(map(str, args.seeds))}",
        flush=True,
    )
    cpus = sorted(os.sched_getaffinity(0))
    queue = [(seed, arm) for seed in args.seeds for arm in arms]  # a seed's arms together
    running: list[tuple[int, str, int, subprocess.Popen[str]]] = []
    runs: list[dict[str, Any]] = []
    while queue or running:
        while queue and len(running) < args.jobs:
            seed, arm = queue.pop(0)
            busy = {r[2] for r in running}
            cpu = next((c for c in cpus if c not in busy), cpus[0])
            running.append((seed, arm, cpu, launch(args, arm, seed, cpu)))
        time.sleep(1.0)
        for item in list(running):
            seed, arm, _, process = item
            if process.poll() is None:
                continue
            running.remove(item)
            out, err = process.communicate()
            if process.returncode != 0:
                print(f"seed {seed} {arm}: failed\n{err[-2000:]}", flush=True)
                continue
            run = json.loads(out.strip().splitlines()[-1])
            runs.append(run)
            shown = ", ".join(f"{s // 1000}k {v:.1f}" for s, v in run["evaluations"])
            print(
                f"seed {seed} {arm:<8} ({run['runner']}, {run['learner']}): evaluations "
                f"{shown}; {run['train_s']:.0f} s training",
                flush=True,
            )
    print(f"\nper arm over seeds, median [min-max] ({args.budget:,} env steps a run)")
    header = f"| {'arm':<9} | {'final':>24} | {'mean of evaluations':>24} | {'train s':>20} |"
    print(header)
    print(f"|{'-' * 11}|{'-' * 26}|{'-' * 26}|{'-' * 22}|")
    by_arm = {
        arm: sorted((r for r in runs if r["arm"] == arm), key=lambda r: r["seed"]) for arm in arms
    }
    for arm, mine in by_arm.items():
        if not mine:
            continue
        finals = [r["final"] for r in mine]
        areas = [statistics.fmean(v for _, v in r["evaluations"]) for r in mine]
        walls = [r["train_s"] for r in mine]
        print(
            f"| {arm:<9} | {spread(finals):>24} | {spread(areas):>24} | "
            f"{spread(walls, '.0f'):>20} |"
        )
    anchor = {r["seed"]: r for r in by_arm.get("rllib", [])}
    for arm, mine in by_arm.items():
        if arm == "rllib" or not anchor:
            continue
        pairs = [(r, anchor[r["seed"]]) for r in mine if r["seed"] in anchor]
        if not pairs:
            continue
        finals = ", ".join(f"{r['final'] - a['final']:+.1f}" for r, a in pairs)
        speed = ", ".join(f"{a['train_s'] / r['train_s']:.2f}x" for r, a in pairs)
        print(f"{arm} - rllib per seed: final {finals}; training speed {speed}")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    else:
        print(json.dumps(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
