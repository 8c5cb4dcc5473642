"""Stable-Baselines3 PPO with RL Zoo's tuned CartPole-v1 hyperparameters: wall time and env
steps until a block of env steps has a mean episode return of at least the target.

The SB3 arm of `benchmarks/end_to_end.py`, run in RL Zoo's own virtualenv (``make
zoo-venv``; SB3 pins its own Gymnasium)::

    .venv-zoo/bin/python benchmarks/sb3_cartpole.py --seed 0 [--block 4000]

RL Zoo's ``hyperparams/ppo.yml`` for CartPole-v1 (read from the installed rl_zoo3, so the
figures follow its pins): 8 envs x 32 steps, minibatch 256, 20 epochs, gae_lambda 0.8,
gamma 0.98, lr 1e-3 and clip range 0.2 decaying linearly to 0 over 1e5 steps, the
default 64x64 tanh policy and value networks. One torch thread, on CPU.

``--set KEY=VALUE`` changes one of those arguments (SB3's names; ``n_envs`` too; a value
``lin_X`` is a linear schedule from X, as in RL Zoo's file): the settings a sweep tries.
RL Zoo's linear schedules reach 0 at its ``n_timesteps`` (1e5 here), as RL Zoo runs them,
whatever ``--max-steps`` the run is given.

The block mean is `zoo_reference.Crossing`'s (RLlib's per-iteration ``episode_return_mean``
over the episodes that ended within the block), fed once per rollout (256 env steps, the
workbench arm's iteration), and the time is taken after that rollout's update: the point
where a workbench ``train()`` returns. The clock starts when ``learn()`` does (the model
built). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: python benchmarks/sb3_cartpole.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.sb3_member import linear_schedule, zoo_entry
from benchmarks.zoo_reference import Crossing

ENV_ID = "CartPole-v1"


def zoo_hyperparameters(sets: list[str] | None = None) -> dict[str, Any]:
    """RL Zoo's CartPole-v1 entry as SB3 arguments (its ``lin_`` schedules as functions of
    SB3's remaining progress over RL Zoo's ``n_timesteps``), with ``sets`` applied."""
    import yaml

    params = zoo_entry(ENV_ID)
    for item in sets or []:
        key, sep, text = item.partition("=")
        if not sep or key.strip() not in {*params, "n_envs"}:
            raise SystemExit(f"--set {item}: KEY=VALUE with KEY one of {sorted(params)}")
        value = yaml.safe_load(text)
        if isinstance(value, str) and value.startswith("lin_"):
            value = linear_schedule(value)
        params[key.strip()] = value
    return params


def over_horizon(schedule: Any, horizon: float, total: float) -> Any:
    """An SB3 schedule of the progress remaining over ``horizon`` env steps, for a run
    of ``total``: it reaches its end value at ``horizon`` and stays there."""
    if not callable(schedule):
        return schedule
    return lambda remaining: schedule(max(0.0, 1.0 - (1.0 - remaining) * total / horizon))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--block", type=int, default=4000)
    parser.add_argument("--max-steps", type=int, default=300_000)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE (SB3's name)")
    args = parser.parse_args(argv)

    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    params = zoo_hyperparameters(args.set)
    n_envs = int(params.pop("n_envs"))
    horizon = float(params.pop("n_timesteps"))
    for key in ("learning_rate", "clip_range"):
        if key in params:
            params[key] = over_horizon(params[key], horizon, args.max_steps)
    policy = params.pop("policy")
    crossing = Crossing(args.target, block=args.block)
    finished: list[float] = []
    state: dict[str, Any] = {"crossed": False, "seconds": None, "steps": None}

    class StopAtTarget(BaseCallback):  # type: ignore[misc]
        def _on_step(self) -> bool:
            if state["crossed"]:  # the first step after the crossing rollout's update
                state["seconds"] = time.perf_counter() - start
                return False
            finished.extend(i["episode"]["r"] for i in self.locals["infos"] if "episode" in i)
            return time.perf_counter() - start < args.max_seconds

        def _on_rollout_end(self) -> None:
            if crossing.add(finished, self.num_timesteps):
                state["crossed"], state["steps"] = True, int(self.num_timesteps)
            finished.clear()

    env = make_vec_env(ENV_ID, n_envs=n_envs, seed=args.seed)
    model = PPO(policy, env, seed=args.seed, device="cpu", verbose=0, **params)
    start = time.perf_counter()
    model.learn(total_timesteps=args.max_steps, callback=StopAtTarget())
    if state["crossed"] and state["seconds"] is None:  # learn() ended with that update
        state["seconds"] = time.perf_counter() - start
    print(
        json.dumps(
            {
                "seed": args.seed,
                "env_steps": state["steps"],
                "seconds": state["seconds"] if state["crossed"] else None,
                "elapsed": time.perf_counter() - start,
                "best": crossing.best,
                "total_steps": int(model.num_timesteps),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
