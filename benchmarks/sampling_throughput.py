"""RLlib env-runner sampling throughput: env steps per second of ``EnvRunner.sample()``.

Compares, on one pinned core, with the same default PPO module:

* RLlib's ``SingleAgentEnvRunner`` vs the workbench's ``FastEnvRunner``;
* sim_ext's C++ CartPole vs Gymnasium's CartPole, each with RLlib's ``sync``
  vectorization (a Python loop over N envs) and ``vector_entry_point`` (the env's
  own vector class: sim_ext's one C++ call, Gymnasium's numpy-vectorized class);
* N = 1, 8, 64, 256 envs per runner, and optionally sim_ext with ``--substeps`` of
  physics per step (a heavier simulator: where the environment starts to matter).

Each round measures every case once (interleaved), for ``--seconds`` each; the
table gives the median, min and max over rounds and each case's median relative to
RLlib's runner on the same env, mode and N.

    python benchmarks/sampling_throughput.py [--rounds 5] [--seconds 1.5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: python benchmarks/sampling_throughput.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import command_line, interleaved, median_min_max, pin_to_one_cpu


@dataclass(frozen=True)
class Case:
    env: str  # "sim_ext" | "gymnasium"
    mode: str  # "sync" | "vector_entry_point"
    runner: str  # "rllib" | "fast"
    n: int
    substeps: int = 1

    @property
    def label(self) -> str:
        env = self.env if self.substeps == 1 else f"{self.env} x{self.substeps} substeps"
        return f"{env:<26} {self.mode:<18} N={self.n:<4} {self.runner}"

    @property
    def anchor(self) -> Case:
        return Case(self.env, self.mode, "rllib", self.n, self.substeps)


def build_runner(case: Case, seed: int = 0) -> Any:
    import gymnasium as gym
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    import sim_ext  # noqa: F401  (registers sim_ext/* with Gymnasium)
    from workbench.trial.fast_runner import FastEnvRunner

    env_id = "sim_ext/CartPole-v1" if case.env == "sim_ext" else "CartPole-v1"
    env_config = {"substeps": case.substeps} if case.substeps != 1 else {}
    assert env_id in gym.registry
    config = (
        PPOConfig()
        .environment(env=env_id, env_config=env_config)
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=case.n,
            gym_env_vectorize_mode=case.mode,
        )
        .debugging(seed=seed)
    )
    cls = FastEnvRunner if case.runner == "fast" else SingleAgentEnvRunner
    runner = cls(config=config)
    if case.runner == "fast" and not runner.fast:
        raise SystemExit(f"{case.label}: the fast runner fell back ({runner.fallback_reason})")
    return runner


def measure(runner: Any, n: int, seconds: float) -> float:
    """Env steps per second of sample() calls of about 4000 steps (at least 2 calls)."""
    per_call = max(4000, n * 8)
    runner.sample(num_timesteps=per_call, explore=True)  # warm
    steps = 0
    calls = 0
    start = time.perf_counter()
    while calls < 2 or time.perf_counter() - start < seconds:
        steps += sum(len(e) for e in runner.sample(num_timesteps=per_call, explore=True))
        calls += 1
    return steps / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--substeps", type=int, default=50, help="0: skip the heavy-physics cases")
    parser.add_argument("--core", type=int, default=None, help="pin to this CPU (default: last)")
    parser.add_argument("--quick", action="store_true", help="sim_ext vector_entry_point only")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)

    warnings.filterwarnings("ignore")
    core = pin_to_one_cpu(args.core, default="last")
    import torch

    torch.set_num_threads(1)

    cases: list[Case] = []
    for n in args.sizes:
        cases += [
            Case("sim_ext", "vector_entry_point", "rllib", n),
            Case("sim_ext", "vector_entry_point", "fast", n),
        ]
        if not args.quick:
            cases += [
                Case("sim_ext", "sync", "rllib", n),
                Case("gymnasium", "sync", "rllib", n),
                Case("gymnasium", "vector_entry_point", "rllib", n),
                Case("gymnasium", "vector_entry_point", "fast", n),
            ]
        if args.substeps > 1 and n == 64:
            cases += [
                Case("sim_ext", "vector_entry_point", "rllib", n, args.substeps),
                Case("sim_ext", "vector_entry_point", "fast", n, args.substeps),
            ]

    print("command:", command_line())
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, one core (#{core}), "
        f"{args.rounds} interleaved rounds of {args.seconds} s per case"
    )
    runners = {case: build_runner(case) for case in cases}
    rounds = interleaved(
        args.rounds, cases, lambda case: measure(runners[case], case.n, args.seconds)
    )
    figures = dict(zip(cases, rounds, strict=True))

    print(f"\n{'case':<58} {'median':>10} {'min':>10} {'max':>10} {'vs RLlib':>9}")
    out = []
    for case in cases:
        median, low, high = median_min_max(figures[case])
        anchor = statistics.median(figures[case.anchor])
        ratio = median / anchor
        print(f"{case.label:<58} {median:>10,.0f} {low:>10,.0f} {high:>10,.0f} {ratio:>8.2f}x")
        out.append(
            {
                "env": case.env,
                "mode": case.mode,
                "runner": case.runner,
                "n": case.n,
                "substeps": case.substeps,
                "median": median,
                "min": low,
                "max": high,
                "vs_rllib": ratio,
            }
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
