"""The plan's measuring process (``python -m workbench.plan.probe_child``), started fresh by
``workbench.plan.start_probe``: what a trial process costs on this machine.

It reads the experiment, its defaults, the crowd to measure among and the train() calls to
time (pickled, on stdin) and writes one JSON object to stdout:

- ``start_cpu_s``: its own CPU seconds once the algorithm is built (importing the
  workbench, torch and RLlib and building this experiment's algorithm: what each trial
  process does before its first ``train()``);
- with a crowd: ``train_cpu_s``, one ``train()``'s CPU alone (no sampling runner
  processes: sampling and learning in this process, as the plan's probe times them; the
  mean of a measurement before the crowd and one after it);
  ``crowd_train_cpu_s``, the same ``train()`` while ``crowd`` such processes train at once
  (the median over them: Ray actors of this process's own local Ray, each building the
  algorithm as a trial does), so that the forecast prices a crowded ``train()`` from this
  machine rather than from a constant fitted on another; and ``eval_step_s``, one step of
  the short evaluation's vector env with this algorithm's policy (the trials' own
  rollout, ``workbench.trial.score``), and ``step_limit``, the env's episode step limit
  (null: none registered; ``eval_longest``, the longest episode the probe saw).

Its imports are what a trial process imports: the start it reports is a trial's."""

from __future__ import annotations

import json
import pickle
import resource
import statistics
import sys
import time
from typing import Any

# Seconds of train() calls alone the crowd measurement times before the crowd and again
# after it (at least two calls each: a shared core's speed moves for seconds at a time), and
# of short evaluations timed for a step's cost.
_TRAIN_S = 3.0
_EVAL_S = 0.5
_MAX_CALLS = 10


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def build(experiment: Any, defaults: Any) -> Any:
    """The experiment's algorithm as the probe measures it: one process (env runners and
    learners are processes of their own, each its own start)."""
    from workbench.trial import eager_torch
    from workbench.trial.config import build_config

    config = (
        build_config(experiment, defaults)
        .env_runners(num_env_runners=0)
        .learners(num_learners=0, num_gpus_per_learner=0)
    )
    eager_torch.install()  # as a trial process does before it builds its algorithm
    return config.build_algo()


def train_cpu_s(algo: Any, calls: int) -> float:
    """CPU seconds of this process a train() over ``calls`` calls."""
    before = _cpu_s()
    for _ in range(calls):
        algo.train()
    return (_cpu_s() - before) / calls


class _Member:
    """One more trial process of the crowd."""

    def __init__(self, experiment: Any, defaults: Any) -> None:
        self.algo = build(experiment, defaults)
        self.algo.train()  # as the measuring process's first, uncounted

    def train_cpu_s(self, calls: int) -> float:
        return train_cpu_s(self.algo, calls)


def crowd_cpu_s(experiment: Any, defaults: Any, algo: Any, crowd: int, calls: int) -> float:
    """The median train() CPU of ``crowd`` processes (this one and ``crowd - 1`` actors)
    training together, each ``calls`` calls."""
    import ray

    member: Any = ray.remote(num_cpus=0)(_Member)
    others: list[Any] = [member.remote(experiment, defaults) for _ in range(crowd - 1)]
    ray.get([m.__ray_ready__.remote() for m in others])
    pending = [m.train_cpu_s.remote(calls) for m in others]
    times = [train_cpu_s(algo, calls), *ray.get(pending)]
    for m in others:
        ray.kill(m)
    return float(statistics.median(times))


def evaluation_step(experiment: Any, algo: Any) -> tuple[float, int]:
    """Seconds of one step of the short evaluation's vector env (its episodes at once, the
    trial's policy), and the longest episode seen."""
    from workbench.trial.rollout import Policy, rollout, torch_actor
    from workbench.trial.score import MAX_ENVS

    config = algo.config
    module = algo.get_module()
    policy = Policy(
        module,
        module.action_space,
        normalize_actions=bool(config.normalize_actions),
        clip_actions=bool(config.clip_actions),
        deterministic=experiment.evaluation.deterministic,
    )
    episodes = experiment.evaluation.short_episodes
    act = torch_actor(policy)
    env_id = config.env if isinstance(config.env, str) else str(config.env)
    spent, steps, longest, seed = 0.0, 0, 0, 0
    while spent < _EVAL_S and seed < 50 * episodes:
        start = time.perf_counter()
        _, lengths = rollout(
            act,
            env_id,
            dict(config.env_config),
            episodes=episodes,
            seed=seed,
            max_envs=min(episodes, MAX_ENVS),
        )
        spent += time.perf_counter() - start
        # The episodes run at once in batches of MAX_ENVS: each batch steps its vector env
        # until its longest episode ends.
        for at in range(0, len(lengths), MAX_ENVS):
            steps += max(lengths[at : at + MAX_ENVS])
        longest = max(longest, *lengths)
        seed += episodes
    return spent / max(steps, 1), longest


def step_limit(algo: Any) -> int | None:
    """The env's registered episode step limit (None: none, or not a registered id)."""
    import gymnasium as gym

    env = algo.config.env
    try:
        limit = gym.spec(env).max_episode_steps if isinstance(env, str) else None
    except gym.error.Error:
        return None
    return int(limit) if limit else None


def measure(experiment: Any, defaults: Any, crowd: int) -> dict[str, Any]:
    algo = build(experiment, defaults)
    out: dict[str, Any] = {"start_cpu_s": _cpu_s()}
    try:
        if crowd > 0:
            start = _cpu_s()
            algo.train()  # the first call allocates what the others reuse
            first = _cpu_s() - start
            calls = min(max(2, round(_TRAIN_S / max(first, 1e-3))), _MAX_CALLS)
            out["eval_step_s"], out["eval_longest"] = evaluation_step(experiment, algo)
            out["step_limit"] = step_limit(algo)
            out["calls"] = calls
            alone = [train_cpu_s(algo, calls)]
            if crowd > 1:
                out["crowd"] = crowd
                out["crowd_train_cpu_s"] = crowd_cpu_s(experiment, defaults, algo, crowd, calls)
                alone.append(train_cpu_s(algo, calls))
            out["train_cpu_s"] = statistics.fmean(alone)
    finally:
        algo.stop()
    return out


def main() -> None:
    experiment, defaults, crowd = pickle.load(sys.stdin.buffer)
    print(json.dumps(measure(experiment, defaults, crowd)), flush=True)


if __name__ == "__main__":
    main()
