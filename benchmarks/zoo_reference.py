"""The user's alternative, as a reference for `time_to_target.py`: RL Zoo's Optuna tuning
(``rl_zoo3.train -optimize``) of Stable-Baselines3 PPO on Gymnasium CartPole-v1, then training
the best configuration it found until the mean return of its training episodes reaches the
target (475), counted as the workbench's trials count it: RLlib 2.60's ``episode_return_mean``,
the mean over the episodes that ended within one iteration's 2000 env steps.

It runs in its own virtualenv (RL Zoo pins its own Gymnasium and SB3, which the
workbench's environment does not need)::

    make zoo-venv                                    # .venv-zoo: CPU torch + rl_zoo3
    .venv-zoo/bin/python benchmarks/zoo_reference.py --seed 0

Method:

* Phase 1, the search, is RL Zoo's command line unchanged: ``python -m rl_zoo3.train --algo
  ppo --env CartPole-v1 -optimize`` with TPE and the median pruner, ``--n-trials`` trials of
  ``--n-timesteps`` env steps each, evaluated ``--n-evaluations`` times (a pruned trial stops
  at an evaluation), ``--n-jobs`` trials at a time, one torch thread each. Its wall time is
  measured around the command; the env steps it sampled are counted from the study it
  saves (a complete trial: n_timesteps; a pruned one: up to its last evaluation).
* Phase 2 trains the study's best trial, its parameters converted by RL Zoo's own
  ``convert_onpolicy_params`` over RL Zoo's CartPole defaults (8 envs), with SB3 and a
  callback that stops at the end of the first block of 2000 env steps whose finished
  training episodes average at least the target (`Crossing`), or when ``--train-budget-s``
  or ``--train-timesteps`` run out.
* The last line printed is one JSON object with the figures, which `time_to_target.py`
  reads; the lines before it are for a person.
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: python benchmarks/zoo_reference.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import print_log_tail, run_logged

ENV_ID = "CartPole-v1"
N_ENVS = 8  # RL Zoo's hyperparams/ppo.yml for CartPole-v1
WINDOW = 100  # at most this many episodes in a mean (RLlib's metrics_num_episodes_for_smoothing)
BLOCK = 2000  # env steps per mean: the main experiment's train_batch_size_per_learner


@dataclass
class ZooFigures:
    seed: int
    returncode: int
    search_s: float
    search_env_steps: int
    trials: int
    pruned: int
    best_value: float
    best_params: dict[str, Any]
    train_s: float | None  # phase 2 until the crossing (None: never crossed)
    train_env_steps: int
    best_return: float
    wall_s: float  # both phases, interpreter start to end

    @property
    def to_target_s(self) -> float | None:
        return None if self.train_s is None else self.search_s + self.train_s


class Crossing:
    """RLlib 2.60's ``episode_return_mean`` applied to another trainer's episodes: the
    mean return of the episodes that ended within each block of `block` env steps.

    An RLlib iteration samples ``train_batch_size_per_learner`` env steps (2000 in the
    main experiment) and its MeanStats are cleared at every reduce, so the figure a
    workbench trial reports is the mean over the episodes finished in that iteration
    (the 100-episode window only caps their count); a block in which no episode
    ended has no mean. Fed each step's finished-episode returns and the step count.
    """

    def __init__(self, threshold: float, block: int = BLOCK) -> None:
        self.threshold = threshold
        self.block = block
        self.block_end = block
        self.returns: list[float] = []
        self.best = math.nan

    def add(self, finished: Iterable[float], steps: int) -> bool:
        self.returns.extend(float(value) for value in finished)
        if steps < self.block_end:
            return False
        self.block_end = (steps // self.block + 1) * self.block
        returns, self.returns = self.returns[-WINDOW:], []
        if not returns:
            return False
        mean = sum(returns) / len(returns)
        if math.isnan(self.best) or mean > self.best:
            self.best = mean
        return mean >= self.threshold


def search_env_steps(study: Any, n_timesteps: int, n_evaluations: int) -> tuple[int, int]:
    """(env steps the study's trials sampled, how many were pruned). A trial reports
    after each of its evaluations, every n_timesteps // n_evaluations steps; a complete
    trial ran them all, a pruned or failed one up to its last report."""
    import optuna

    per_evaluation = n_timesteps // n_evaluations
    steps = pruned = 0
    for trial in study.trials:
        if trial.state == optuna.trial.TrialState.COMPLETE:
            steps += n_timesteps
            continue
        pruned += trial.state == optuna.trial.TrialState.PRUNED
        steps += max(trial.intermediate_values, default=0) * per_evaluation
    return steps, pruned


def _search(args: argparse.Namespace, folder: Path) -> tuple[int, float, Any]:
    command = [
        sys.executable,
        "-m",
        "rl_zoo3.train",
        "--algo",
        "ppo",
        "--env",
        ENV_ID,
        "-optimize",
        "--sampler",
        "tpe",
        "--pruner",
        "median",
        "--n-trials",
        str(args.n_trials),
        "--max-total-trials",
        str(args.n_trials),
        "--n-jobs",
        str(args.n_jobs),
        "-n",
        str(args.n_timesteps),
        "--n-evaluations",
        str(args.n_evaluations),
        "--seed",
        str(args.seed),
        "--num-threads",
        "1",
        "--no-optim-plots",
        "-f",
        str(folder),
    ]
    print("search:", " ".join(command), flush=True)
    log = folder.parent / "search.log"
    returncode, _, elapsed = run_logged(command, log, cwd=None)
    reports = sorted(folder.glob(f"ppo/report_{ENV_ID}_*.pkl"))
    if returncode != 0 or not reports:
        print_log_tail(log, 20, f"search failed (exit {returncode}); the end of {log}:")
        return returncode or 1, elapsed, None
    with reports[-1].open("rb") as f:
        return 0, elapsed, pickle.load(f)


def _train(args: argparse.Namespace, params: dict[str, Any]) -> tuple[float | None, int, float]:
    import torch
    from rl_zoo3.hyperparams_opt import convert_onpolicy_params
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    hyperparams = convert_onpolicy_params(dict(params))
    crossing = Crossing(args.threshold)
    start = time.perf_counter()
    reached: list[float] = []

    class StopAtTarget(BaseCallback):
        def _on_step(self) -> bool:
            finished = [i["episode"]["r"] for i in self.locals["infos"] if "episode" in i]
            if crossing.add(finished, self.num_timesteps):
                reached.append(time.perf_counter() - start)
                return False
            return time.perf_counter() - start < args.train_budget_s

    env = make_vec_env(ENV_ID, n_envs=N_ENVS, seed=args.seed)
    model = PPO("MlpPolicy", env, seed=args.seed, device="cpu", verbose=0, **hyperparams)
    model.learn(total_timesteps=args.train_timesteps, callback=StopAtTarget())
    return (reached[0] if reached else None), int(model.num_timesteps), crossing.best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, default=475.0)
    parser.add_argument("--n-trials", type=int, default=16)
    parser.add_argument("--n-timesteps", type=int, default=50_000)
    parser.add_argument("--n-evaluations", type=int, default=5)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--train-timesteps", type=int, default=500_000)
    parser.add_argument("--train-budget-s", type=float, default=300.0)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)

    begin = time.perf_counter()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="zoo-reference-"))
    workdir.mkdir(parents=True, exist_ok=True)
    code, search_s, study = _search(args, workdir / "logs")
    if study is None:
        print(json.dumps({"seed": args.seed, "returncode": code, "search_s": search_s}))
        return code
    steps, pruned = search_env_steps(study, args.n_timesteps, args.n_evaluations)
    best = study.best_trial
    print(
        f"search: {len(study.trials)} trials ({pruned} pruned) in {search_s:.1f} s, "
        f"{steps:,} env steps; best evaluation {best.value:.1f} with {best.params}",
        flush=True,
    )
    train_s, train_steps, best_return = _train(args, best.params)
    figures = ZooFigures(
        seed=args.seed,
        returncode=0,
        search_s=search_s,
        search_env_steps=steps,
        trials=len(study.trials),
        pruned=pruned,
        best_value=float(best.value),
        best_params=dict(best.params),
        train_s=train_s,
        train_env_steps=train_steps,
        best_return=best_return,
        wall_s=time.perf_counter() - begin,
    )
    shown = "never" if train_s is None else f"{train_s:.1f} s"
    print(f"train: {args.threshold:g} after {shown}, {train_steps:,} env steps", flush=True)
    print(json.dumps({**asdict(figures), "to_target_s": figures.to_target_s}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
