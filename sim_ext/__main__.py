"""`python -m sim_ext`: step a sim_ext environment with random actions and report its speed."""

from __future__ import annotations

import argparse
import time

import numpy as np

from sim_ext.envs import core_classes, vector_env_class


def main(argv: list[str] | None = None) -> int:
    names = sorted(core_classes())
    parser = argparse.ArgumentParser(prog="python -m sim_ext", description=__doc__)
    parser.add_argument("--env", default="CartPole-v1", choices=names)
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    env = vector_env_class(args.env)(num_envs=args.num_envs, copy=False)
    env.reset(seed=args.seed)
    env.action_space.seed(args.seed)
    # Pre-drawn actions: the timing below measures the environment, not the sampler.
    actions = [np.ascontiguousarray(env.action_space.sample()) for _ in range(64)]
    steps = episodes = 0
    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        for a in actions:
            _, _, terminated, truncated, _ = env.step(a)
            episodes += int(np.count_nonzero(terminated | truncated))
        steps += len(actions) * args.num_envs
    elapsed = time.perf_counter() - start
    env.close()
    print(
        f"sim_ext/{args.env}: {args.num_envs} envs, {steps / elapsed / 1e6:.1f}M env steps/s "
        f"on one core, {episodes} episodes ended in {elapsed:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
