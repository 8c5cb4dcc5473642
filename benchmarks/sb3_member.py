"""One member of a population as a user would run it without the workbench: Stable-Baselines3
PPO with RL Zoo's hyperparameters for the task, in a process of its own, for a fixed number of
env steps. `population_throughput.py` starts N of them at once on the same cores.

It runs in RL Zoo's own virtualenv (``make zoo-venv``, plus the box2d extra for
LunarLander)::

    .venv-zoo/bin/python benchmarks/sb3_member.py --env LunarLanderContinuous-v3 --steps 65536

RL Zoo's ``hyperparams/ppo.yml`` entry for the env is read from the installed rl_zoo3, as
RL Zoo's own ``train.py`` applies it: ``lin_`` values as linear schedules, ``policy_kwargs``
evaluated, ``normalize: true`` as ``VecNormalize`` (RL Zoo's defaults: observations and
rewards), ``n_envs`` Gymnasium envs in SB3's ``DummyVecEnv``. One torch thread, on CPU. The
last line printed is one JSON object: the env steps, the seconds ``learn()`` took and the
seconds from the interpreter's start (imports included) to its end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()


def linear_schedule(value: str) -> Any:
    """RL Zoo's ``lin_X``: X times SB3's remaining progress."""
    start = float(value[4:])
    return lambda progress: progress * start


def zoo_entry(env_id: str) -> dict[str, Any]:
    """RL Zoo's PPO entry for `env_id` as SB3 arguments, plus its ``normalize`` and
    ``n_envs`` (popped by the caller)."""
    import rl_zoo3
    import torch
    import yaml

    path = Path(rl_zoo3.__file__).parent / "hyperparams" / "ppo.yml"
    entry = dict(yaml.safe_load(path.read_text())[env_id])
    params: dict[str, Any] = {}
    for key, value in entry.items():
        if isinstance(value, str) and value.startswith("lin_"):
            params[key] = linear_schedule(value)
        elif key == "policy_kwargs" and isinstance(value, str):
            # RL Zoo evaluates this string (e.g. "dict(log_std_init=-3.29, ortho_init=False)").
            params[key] = eval(value, {"__builtins__": {}}, {"dict": dict, "nn": torch.nn})
        else:
            params[key] = value
    return params


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, help="a Gymnasium id with an RL Zoo PPO entry")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    params = zoo_entry(args.env)
    n_envs = int(params.pop("n_envs", 1))
    params.pop("n_timesteps", None)
    normalize = params.pop("normalize", False)
    policy = params.pop("policy")
    env = make_vec_env(args.env, n_envs=n_envs, seed=args.seed)
    if normalize:
        env = VecNormalize(env, **(normalize if isinstance(normalize, dict) else {}))
    model = PPO(policy, env, seed=args.seed, device="cpu", verbose=0, **params)
    start = time.perf_counter()
    model.learn(total_timesteps=args.steps)
    end = time.perf_counter()
    figures = {
        "env": args.env,
        "seed": args.seed,
        "env_steps": int(model.num_timesteps),
        "learn_s": end - start,
        "process_s": end - STARTED,
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
