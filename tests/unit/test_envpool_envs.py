"""`env.id: envpool/<task>`: EnvPool's pools as Gymnasium vector envs the fast env runner
samples from, and a clear refusal where EnvPool is not installed.

EnvPool itself is an optional dependency (its wheel and assets are over 700 MB), so these
tests drive the adapter with `FakeEnvPool`, a pure-Python pool with EnvPool's contract as
its documentation states it and `benchmarks/population_throughput.py` checks on the real
one: envs seeded ``seed + i`` at construction, ``reset()`` resetting all of them, and the
NEXT_STEP autoreset (the step after an episode's end returns that env's first observation,
reward 0 and no flags, ignoring its action)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

from tests.support.bad_files import problem_about, rejected
from tests.support.env_runners import runner_config
from tests.support.experiments import tiny_ppo, write_experiment
from workbench.experiment import envpool_envs
from workbench.trial.fast_runner import FastEnvRunner
from workbench.trial.rollout import make_vector_env

TASK = "Drift-v1"
LIMIT = 7  # every episode ends after 7 steps (truncated), or when x passes 3 (terminated)


class FakeEnvPool:
    """A 1-D walk per env: x += action; reward -|x|; EnvPool's API and autoreset."""

    def __init__(self, num_envs: int, seed: int) -> None:
        self.num_envs = num_envs
        self.observation_space = gym.spaces.Box(np.finfo(np.float32).tiny, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.seeds = np.arange(seed, seed + num_envs)
        self.episode = np.zeros(num_envs, dtype=np.int64)
        self.closed = False
        self.x = np.zeros(num_envs)
        self.t = np.zeros(num_envs, dtype=np.int64)
        self.done = np.zeros(num_envs, dtype=bool)

    def _start(self, i: int) -> None:
        rng = np.random.default_rng([int(self.seeds[i]), int(self.episode[i])])
        self.x[i], self.t[i], self.done[i] = rng.uniform(-1, 1), 0, False
        self.episode[i] += 1

    def _obs(self) -> np.ndarray:
        return np.stack([self.x, self.t], axis=1).astype(np.float32)

    def reset(self) -> tuple[np.ndarray, dict[str, Any]]:
        for i in range(self.num_envs):
            self._start(i)
        return self._obs(), {"env_id": np.arange(self.num_envs)}

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        assert actions.shape == (self.num_envs, 1)
        reward = np.zeros(self.num_envs, dtype=np.float32)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        for i in range(self.num_envs):
            if self.done[i]:
                self._start(i)  # the action is ignored, reward 0, no flags
                continue
            self.x[i] += float(actions[i, 0])
            self.t[i] += 1
            reward[i] = -abs(self.x[i])
            terminated[i] = abs(self.x[i]) > 3
            truncated[i] = not terminated[i] and self.t[i] >= LIMIT
            self.done[i] = terminated[i] or truncated[i]
        info = {"env_id": np.arange(self.num_envs), "players": {"env_id": np.arange(2)}}
        return self._obs(), reward, terminated, truncated, info

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_envpool(monkeypatch: pytest.MonkeyPatch) -> list[FakeEnvPool]:
    made: list[FakeEnvPool] = []

    def make(task: str, env_type: str, num_envs: int, seed: int) -> FakeEnvPool:
        assert (task, env_type) == (TASK, "gymnasium")
        made.append(FakeEnvPool(num_envs, seed))
        return made[-1]

    module = types.ModuleType("envpool")
    module.make = make  # type: ignore[attr-defined]
    module.list_all_envs = lambda: [TASK, "phys2d/Nested-v0"]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "envpool", module)
    monkeypatch.setattr(envpool_envs, "installed", lambda: True)
    return made


def test_every_task_is_registered_as_a_gymnasium_vector_env(fake_envpool: list[Any]) -> None:
    assert envpool_envs.register() == [f"envpool/{TASK}"]  # nested ids are left out
    env = make_vector_env(f"envpool/{TASK}", 3, {})
    assert isinstance(env, gym.vector.VectorEnv)
    assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    assert env.num_envs == 3 and env.action_space.shape == (3, 1)
    # EnvPool's tiny lower bound of an unbounded Box is Gymnasium's -inf.
    assert env.single_observation_space.low.tolist() == [-np.inf, -np.inf]
    obs, infos = env.reset(seed=[5, 6, 7])
    assert fake_envpool[-1].seeds.tolist() == [5, 6, 7] and fake_envpool[0].closed
    assert obs.shape == (3, 2) and infos == {}
    _, reward, _, _, infos = env.step(np.zeros((3, 1), np.float32))
    assert reward.dtype == np.float64 and infos == {}
    with pytest.raises(ValueError, match="seed, seed\\+1"):
        env.reset(seed=[1, 5, 9])
    single = gym.make(f"envpool/{TASK}")
    first, _ = single.reset(seed=11)
    assert first.shape == (2,)
    assert fake_envpool[-1].num_envs == 1 and fake_envpool[-1].seeds.tolist() == [11]


def test_the_fast_runner_samples_an_envpool_env_as_rllibs_runner_does(
    fake_envpool: list[Any],
) -> None:
    envpool_envs.register()
    config = runner_config(f"envpool/{TASK}", 4)
    rllib = SingleAgentEnvRunner(config=config)
    fast = FastEnvRunner(config=config)
    assert fast.fast, fast.fallback_reason
    fast.module.set_state(rllib.module.get_state())
    done = 0
    for call in range(3):
        torch.manual_seed(call)
        expected = rllib.sample(num_timesteps=60, explore=True)
        torch.manual_seed(call)
        got = fast.sample(num_timesteps=60, explore=True)
        assert len(got) == len(expected)
        for a, b in zip(expected, got, strict=True):
            assert (a.t_started, a.t, a.is_terminated, a.is_truncated) == (
                b.t_started,
                b.t,
                b.is_terminated,
                b.is_truncated,
            )
            np.testing.assert_array_equal(a.observations.data, b.observations.data)
            np.testing.assert_array_equal(a.rewards.data, b.rewards.data)
            done += b.is_done
    assert done >= 4  # episodes ended and restarted within the calls


def test_an_envpool_id_without_envpool_is_refused_with_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(envpool_envs, "installed", lambda: False)
    path = write_experiment(
        tmp_path, tiny_ppo(tmp_path, env={"id": "envpool/LunarLanderContinuous-v3"})
    )
    problem_about(rejected(path), path, "env.id", "EnvPool is not installed here: pip install")
