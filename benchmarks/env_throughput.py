"""Environment steps per second: a sim_ext env vs Gymnasium's (and EnvPool where it imports).

Usage::

    .venv/bin/python benchmarks/env_throughput.py            # full default run (CartPole)
    .venv/bin/python benchmarks/env_throughput.py --sizes 4096 --substeps 10 --json out.json
    .venv/bin/python benchmarks/env_throughput.py --env MountainCar-v0

``--env`` names the environment (default ``CartPole-v1``): any sim_ext env with a Gymnasium
twin (CartPole-v1, Acrobot-v1, Pendulum-v1, MountainCar-v0, MountainCarContinuous-v0).

Cases (``--cases``; N is the number of environments stepped by one call):

* ``sim_view``: ``sim_ext.vector_env_class(ENV)(num_envs=N, copy=False)``, the
  Gymnasium VectorEnv handing out read-only views of its C++ output buffers;
* ``sim_copy``: the same with ``copy=True`` (the default): fresh arrays every step;
* ``sim_core``: the raw compiled core ``env._core.step(actions)`` (no Python wrapper), a floor
  for what the wrapper costs;
* ``gym_vector``: Gymnasium's own vector env, ``gym.make_vec(ENV, num_envs=N,
  vectorization_mode=...)``: its numpy-vectorized class where it has one
  (``vector_entry_point``: CartPole), else a ``SyncVectorEnv`` of N single envs (``sync``:
  MountainCar, the only way Gymnasium batches it);
* ``gym_single``: ``gym.make(ENV)`` stepped in a Python loop, reset when an episode
  ends (N=1 only);
* ``envpool``: EnvPool's synchronous API with one worker thread (``batch_size=N``), if
  ``envpool`` imports; otherwise the run says why and carries on without it.

Method:

* One core: the process is pinned to one CPU (``--cpu``, default the first one allowed) with
  ``os.sched_setaffinity`` before anything starts a thread, and the OpenMP/MKL/OpenBLAS thread
  counts are set to 1 before numpy is imported. EnvPool's worker thread inherits the pinning.
* Actions are drawn before timing: a pool of 64 random, valid, C-contiguous batches in each
  env's own action dtype, cycled, so the action sampler is not measured (uniform over the
  action space: every discrete action, or forces uniform in a Box's bounds). Each step does
  the work a user's loop does: the vector envs (sim_ext, Gymnasium, EnvPool) reset finished
  episodes themselves on the next step; the single-env loop calls ``reset()`` on
  ``terminated or truncated``. Random actions end a CartPole episode about every 20 steps, so
  resets are part of every CartPole measurement; MountainCar's episodes run to their time
  limit (200 or 999 steps).
* Every env is built and reset once, warmed up for about 0.1 s, which also sizes a chunk of
  calls to about 5 ms. Then the cases run in interleaved rounds: round r runs every case once,
  then round r+1 (``--rounds``, default 5), each run stepping whole chunks for at least
  ``--seconds`` (default 0.5) of ``time.perf_counter``. A run's figure is
  ``calls * N / elapsed``; the table gives the median, min and max over rounds, and the
  median of each case over the median of ``gym_vector`` at the same N.
* ``--substeps K`` passes ``substeps=K`` to sim_ext's CartPole (K physics integrations of
  tau/K per env step) to show how the cost scales with heavier physics; the other libraries
  keep their single integration, so the ratios then compare different amounts of work.

Targets (median over median, same run): sim_ext CartPole at least 10x Gymnasium's
numpy-vectorized CartPole at N=4096 and at least 20x at N=1, checked for each sim_ext
VectorEnv mode (``copy=False`` and ``copy=True``) that ran; with ``--substeps`` above 1, or
for another ``--env``, the ratios are printed without a verdict. The exit status is 0 either
way (a measurement, not a test).
"""

from __future__ import annotations

import os

# Before numpy is imported: one thread for any BLAS/OpenMP pool it might start.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import sim_ext

if __package__ in (None, ""):  # run as a file: python benchmarks/env_throughput.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import cpu_model, interleaved, median_min_max, pin_to_one_cpu

DEFAULT_ENV = "CartPole-v1"
# The sim_ext envs with a Gymnasium twin to compare against.
ENVS = ("CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0")
ACTION_POOL = 64  # pre-drawn action batches, cycled
WARMUP_SECONDS = 0.1
CHUNK_SECONDS = 0.005
DEFAULT_SIZES = (1, 16, 256, 4096)
TARGETS = {4096: 10.0, 1: 20.0}  # N -> minimum sim_ext / gym_vector ratio
BASELINE = "gym_vector"

CASE_LABELS = {
    "sim_view": "sim_ext VectorEnv copy=False",
    "sim_copy": "sim_ext VectorEnv copy=True",
    "sim_core": "sim_ext raw core (_core.step)",
    "gym_vector": "gymnasium numpy-vectorized",
    "gym_single": "gymnasium single env loop",
    "envpool": "envpool sync, 1 thread",
}
SIM_VECTOR_CASES = ("sim_view", "sim_copy")

# A stepper runs `calls` consecutive env calls (each call steps N envs).
Stepper = Callable[[int], None]


@dataclass
class Case:
    """One (case, N) pair: its env, stepper, calibrated chunk size and per-round results."""

    name: str
    num_envs: int
    env: Any  # kept alive here: the stepper may hold only a bound method of its core
    step: Stepper
    chunk: int = 1
    rates: list[float] = field(default_factory=list)  # env steps per second, one per round


def import_envpool() -> tuple[Any | None, str]:
    """Returns (envpool module or None, a line saying what happened)."""
    try:
        import envpool
    except Exception as exc:  # ImportError, or numpy ABI errors raised at import
        return None, f"envpool not measured: import failed ({type(exc).__name__}: {exc})"
    return envpool, f"envpool {getattr(envpool, '__version__', '?')} imported"


def vector_action_pool(
    space: gym.Space[Any], num_envs: int, dtype: Any, seed: int
) -> list[np.ndarray]:
    """ACTION_POOL random batches of actions of one env's `space` (every discrete action, or
    forces uniform in a Box's bounds), C-contiguous, of `dtype`."""
    rng = np.random.default_rng(seed)
    if isinstance(space, gym.spaces.Discrete):
        return [
            np.ascontiguousarray(rng.integers(0, int(space.n), size=num_envs), dtype=dtype)
            for _ in range(ACTION_POOL)
        ]
    assert isinstance(space, gym.spaces.Box)
    shape = (num_envs, *space.shape)
    return [
        np.ascontiguousarray(rng.uniform(space.low, space.high, size=shape), dtype=dtype)
        for _ in range(ACTION_POOL)
    ]


def single_action_space(env_name: str) -> gym.Space[Any]:
    return sim_ext.vector_env_class(env_name)(num_envs=1).single_action_space


def sim_config(substeps: int) -> dict[str, int]:
    """sim_ext's env_config: `substeps` only where asked (MountainCar has none)."""
    return {} if substeps == 1 else {"substeps": substeps}


def gym_vector_mode(env_name: str) -> str:
    """Gymnasium's numpy-vectorized class where the id has one, else one env after another."""
    return "vector_entry_point" if gym.spec(env_name).vector_entry_point else "sync"


def cycle_batches(step: Callable[[np.ndarray], object], pool: list[np.ndarray]) -> Stepper:
    """A stepper calling a vector env's `step` on the pre-drawn batches in turn."""
    mask = ACTION_POOL - 1  # ACTION_POOL is a power of two

    def run(calls: int) -> None:
        for i in range(calls):
            step(pool[i & mask])

    return run


def _pool(env: Any, num_envs: int, seed: int) -> list[np.ndarray]:
    """Batches for a Gymnasium-style vector env, in the dtype of its single action space."""
    space = env.single_action_space
    dtype = np.int64 if isinstance(space, gym.spaces.Discrete) else space.dtype
    return vector_action_pool(space, num_envs, dtype, seed)


def make_sim_vector(
    env_name: str, num_envs: int, copy: bool, substeps: int, seed: int
) -> tuple[Any, Stepper]:
    env = sim_ext.vector_env_class(env_name)(num_envs=num_envs, copy=copy, **sim_config(substeps))
    env.reset(seed=seed)
    return env, cycle_batches(env.step, _pool(env, num_envs, seed))


def make_sim_core(env_name: str, num_envs: int, substeps: int, seed: int) -> tuple[Any, Stepper]:
    env = sim_ext.vector_env_class(env_name)(num_envs=num_envs, copy=False, **sim_config(substeps))
    env.reset(seed=seed)
    return env, cycle_batches(env._core.step, _pool(env, num_envs, seed))


def make_gym_vector(env_name: str, num_envs: int, seed: int) -> tuple[Any, Stepper]:
    env = gym.make_vec(env_name, num_envs=num_envs, vectorization_mode=gym_vector_mode(env_name))
    env.reset(seed=seed)
    return env, cycle_batches(env.step, _pool(env, num_envs, seed))


def make_gym_single(env_name: str, seed: int) -> tuple[Any, Stepper]:
    env = gym.make(env_name)
    env.reset(seed=seed)
    batch = vector_action_pool(env.action_space, 1, env.action_space.dtype, seed)
    pool = [int(a[0]) if isinstance(env.action_space, gym.spaces.Discrete) else a[0] for a in batch]
    step, reset = env.step, env.reset
    mask = ACTION_POOL - 1

    def run(calls: int) -> None:
        for i in range(calls):
            _, _, terminated, truncated, _ = step(pool[i & mask])
            if terminated or truncated:
                reset()

    return env, run


def make_envpool(envpool: Any, env_name: str, num_envs: int, seed: int) -> tuple[Any, Stepper]:
    env = envpool.make(
        env_name,
        env_type="gymnasium",
        num_envs=num_envs,
        batch_size=num_envs,
        num_threads=1,
        seed=seed,
    )
    env.reset()
    dtype = env.spec.action_array_spec["action"].dtype  # EnvPool's own (int32 for CartPole)
    pool = vector_action_pool(single_action_space(env_name), num_envs, dtype, seed)
    return env, cycle_batches(env.step, pool)


def build_case(
    name: str, env_name: str, num_envs: int, substeps: int, seed: int, envpool: Any | None
) -> Case | None:
    """The env and stepper for (name, N), or None where the case does not apply."""
    made: tuple[Any, Stepper] | None
    if name == "sim_view":
        made = make_sim_vector(env_name, num_envs, False, substeps, seed)
    elif name == "sim_copy":
        made = make_sim_vector(env_name, num_envs, True, substeps, seed)
    elif name == "sim_core":
        made = make_sim_core(env_name, num_envs, substeps, seed)
    elif name == "gym_vector":
        made = make_gym_vector(env_name, num_envs, seed)
    elif name == "gym_single":
        made = make_gym_single(env_name, seed) if num_envs == 1 else None
    elif name == "envpool":
        made = make_envpool(envpool, env_name, num_envs, seed) if envpool is not None else None
    else:
        raise ValueError(f"unknown case {name!r}")
    return None if made is None else Case(name, num_envs, *made)


def warm_up(case: Case) -> None:
    """Runs the case for about WARMUP_SECONDS and sizes its chunk to about CHUNK_SECONDS."""
    calls, elapsed = 1, 0.0
    start = time.perf_counter()
    while time.perf_counter() - start < WARMUP_SECONDS:
        t0 = time.perf_counter()
        case.step(calls)
        elapsed = time.perf_counter() - t0
        if elapsed < CHUNK_SECONDS:
            calls *= 2
    per_call = elapsed / calls
    case.chunk = max(1, round(CHUNK_SECONDS / per_call))


def measure(case: Case, seconds: float) -> float:
    """Steps whole chunks for at least `seconds`; returns env steps per second."""
    step, chunk = case.step, case.chunk
    calls = 0
    start = time.perf_counter()
    while True:
        step(chunk)
        calls += chunk
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return calls * case.num_envs / elapsed


def fmt_rate(rate: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if rate >= scale:
            return f"{rate / scale:.3g}{unit}"
    return f"{rate:.3g}"


def ratios(cases: list[Case]) -> dict[tuple[str, int], float]:
    """Median over the median of BASELINE at the same N, for every case that has one."""
    base = {c.num_envs: statistics.median(c.rates) for c in cases if c.name == BASELINE}
    return {
        (c.name, c.num_envs): statistics.median(c.rates) / base[c.num_envs]
        for c in cases
        if c.num_envs in base
    }


def case_label(name: str, env_name: str) -> str:
    if name == "gym_vector" and gym_vector_mode(env_name) == "sync":
        return "gymnasium SyncVectorEnv"
    return CASE_LABELS[name]


def table(cases: list[Case], env_name: str = DEFAULT_ENV) -> str:
    """A Markdown table: median/min/max steps/s and the ratio to BASELINE."""
    rel = ratios(cases)
    lines = [
        f"| N | case | median steps/s | min | max | median / {BASELINE} |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for c in cases:
        ratio = rel.get((c.name, c.num_envs))
        median, low, high = median_min_max(c.rates)
        lines.append(
            f"| {c.num_envs} | {case_label(c.name, env_name)} | {fmt_rate(median)} "
            f"| {fmt_rate(low)} | {fmt_rate(high)} "
            f"| {'-' if ratio is None else f'{ratio:.2f}x'} |"
        )
    return "\n".join(lines)


def target_lines(cases: list[Case], substeps: int, env_name: str = DEFAULT_ENV) -> list[str]:
    """PASS/FAIL lines for TARGETS (plain ratios when sim_ext runs extra substeps, or for an env
    other than CartPole, which the targets are not about)."""
    rel = ratios(cases)
    lines = []
    for n, need in TARGETS.items():
        for name in SIM_VECTOR_CASES:
            ratio = rel.get((name, n))
            if ratio is None:
                continue
            line = f"{CASE_LABELS[name]} at N={n} is {ratio:.1f}x {BASELINE} (target >= {need:g}x)"
            if env_name != DEFAULT_ENV:
                lines.append(f"n/a (targets are for {DEFAULT_ENV}; this is {env_name}): {line}")
            elif substeps == 1:
                lines.append(f"{'PASS' if ratio >= need else 'FAIL'}: {line}")
            else:
                lines.append(
                    f"n/a (targets are for substeps=1; this is substeps={substeps}): {line}"
                )
    if not lines:
        lines.append(
            f"targets not checked: they need {BASELINE} and sim_view or sim_copy "
            f"at N in {sorted(TARGETS)}"
        )
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--seconds", type=float, default=0.5, help="seconds per case per round")
    p.add_argument(
        "--sizes",
        default=",".join(map(str, DEFAULT_SIZES)),
        help="comma-separated numbers of envs (default 1,16,256,4096)",
    )
    p.add_argument(
        "--cases",
        default=",".join(CASE_LABELS),
        help=f"comma-separated subset of {','.join(CASE_LABELS)}",
    )
    p.add_argument(
        "--env", default=DEFAULT_ENV, choices=ENVS, help=f"environment (default {DEFAULT_ENV})"
    )
    p.add_argument("--substeps", type=int, default=1, help="sim_ext CartPole substeps (K)")
    p.add_argument("--cpu", type=int, default=None, help="CPU to pin to (default: first allowed)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", help="write the raw per-round figures here")
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    args.cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(args.cases) - set(CASE_LABELS))
    if unknown:
        p.error(f"unknown case(s) {unknown}; valid: {','.join(CASE_LABELS)}")
    if args.rounds < 1 or args.seconds <= 0 or args.substeps < 1 or not args.sizes:
        p.error("--rounds and --substeps must be >= 1, --seconds > 0, --sizes non-empty")
    if any(n < 1 for n in args.sizes):
        p.error("--sizes must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cpu = pin_to_one_cpu(args.cpu)
    envpool, envpool_line = import_envpool() if "envpool" in args.cases else (None, "")
    versions = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "gymnasium": gym.__version__,
        "envpool": getattr(envpool, "__version__", None),
    }
    print(
        f"{datetime.datetime.now().isoformat(timespec='seconds')}  pinned to CPU {cpu} "
        f"of {os.cpu_count()} ({cpu_model()})"
    )
    print("  ".join(f"{k} {v}" for k, v in versions.items() if v is not None))
    if envpool_line:
        print(envpool_line)
    print(
        f"env={args.env} rounds={args.rounds} seconds={args.seconds} sizes={args.sizes} "
        f"substeps={args.substeps} cases={args.cases}"
    )

    cases: list[Case] = []
    with warnings.catch_warnings():
        # EnvPool's gymnasium spaces warn about float64 bounds cast to float32.
        warnings.simplefilter("ignore", UserWarning)
        for n in args.sizes:
            for name in args.cases:
                case = build_case(name, args.env, n, args.substeps, args.seed, envpool)
                if case is not None:
                    cases.append(case)
    for case in cases:
        warm_up(case)

    rounds = interleaved(args.rounds, cases, lambda case: measure(case, args.seconds))
    for case, rates in zip(cases, rounds, strict=True):
        case.rates = rates

    print()
    print(table(cases, args.env))
    print()
    print("\n".join(target_lines(cases, args.substeps, args.env)))
    if "envpool" in args.cases and envpool is None:
        print(envpool_line)

    if args.json:
        raw = {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "cpu": cpu,
            "cpu_model": cpu_model(),
            "nproc": os.cpu_count(),
            "versions": versions,
            "envpool_status": envpool_line,
            "args": {k: v for k, v in vars(args).items() if k != "json"},
            "results": [
                {
                    "case": c.name,
                    "label": case_label(c.name, args.env),
                    "num_envs": c.num_envs,
                    "chunk_calls": c.chunk,
                    "steps_per_s": c.rates,
                    "median": statistics.median(c.rates),
                    "ratio_to_gym_vector": ratios(cases).get((c.name, c.num_envs)),
                }
                for c in cases
            ],
        }
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=2)
        print(f"raw figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
