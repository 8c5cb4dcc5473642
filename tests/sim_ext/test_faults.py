"""Fault injection on sim_ext environments: real exceptions and real process deaths."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import sim_ext
from sim_ext.faults import InjectedFault


def _vec(**config: object) -> gym.vector.VectorEnv:  # type: ignore[type-arg]
    env = gym.make_vec(
        "sim_ext/CartPole-v1", num_envs=4, vectorization_mode="vector_entry_point", **config
    )
    env.reset(seed=0)
    return env


def test_fault_after_steps_raises_at_that_step_and_only_once() -> None:
    env = _vec(fault_after_steps=10)
    actions = np.zeros(4, dtype=np.int64)
    env.step(actions)  # 4 env steps
    env.step(actions)  # 8
    with pytest.raises(InjectedFault, match="after 12 env steps"):
        env.step(actions)
    env.step(actions)  # a fault is an event, not a broken env


def test_fault_probability_is_reproducible_from_its_seed() -> None:
    def failures(seed: int) -> list[int]:
        env = gym.make("sim_ext/CartPole-v1", fault_probability=0.2, fault_seed=seed)
        env.reset(seed=0)
        out = []
        for i in range(200):
            try:
                _, _, term, trunc, _ = env.step(0)
            except InjectedFault:
                out.append(i)
                term = True
            if term or trunc:
                env.reset()
        return out

    first = failures(3)
    assert first == failures(3)
    assert first != failures(4)
    assert 20 <= len(first) <= 60  # about 0.2 of 200


def test_fault_once_file_fires_once_across_instances(tmp_path: Path) -> None:
    marker = tmp_path / "fired"
    actions = np.zeros(4, dtype=np.int64)
    env = _vec(fault_after_steps=1, fault_once_file=str(marker))
    with pytest.raises(InjectedFault):
        env.step(actions)
    assert marker.exists()
    again = _vec(fault_after_steps=1, fault_once_file=str(marker))
    again.step(actions)  # the retried trial runs clean


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("fault_after_steps", 0, "fault_after_steps must be an int >= 1, got 0"),
        ("crash_after_steps", 1.5, "crash_after_steps must be an int >= 1, got 1.5"),
        ("fault_probability", 2, "fault_probability must be a number in \\[0, 1\\], got 2"),
        ("fault_seed", -1, "fault_seed must be an int >= 0, got -1"),
    ],
)
def test_bad_fault_options_name_the_key_and_the_value(
    key: str, value: object, expected: str
) -> None:
    with pytest.raises(ValueError, match=expected):
        gym.make("sim_ext/CartPole-v1", **{key: value})


def test_other_env_config_keys_still_reach_the_simulator() -> None:
    env = sim_ext.CartPoleEnv(fault_after_steps=1000, max_episode_steps=7)
    assert env.max_episode_steps == 7
    with pytest.raises(ValueError, match="unknown"):
        gym.make("sim_ext/CartPole-v1", fault_after_step=3)


def test_crash_after_steps_kills_the_process() -> None:
    code = (
        "import numpy as np, gymnasium as gym, sim_ext\n"
        "env = gym.make_vec('sim_ext/CartPole-v1', num_envs=2, "
        "vectorization_mode='vector_entry_point', crash_after_steps=6)\n"
        "env.reset(seed=0)\n"
        "for i in range(10):\n"
        "    env.step(np.zeros(2, dtype=np.int64)); print(i, flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == -9, done.stderr
    assert done.stdout.split() == ["0", "1"]  # killed before its third step (6 env steps)
