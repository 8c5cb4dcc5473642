"""Fault injection for tests and drills: real failures where a simulator would fail.

Population runs must survive simulators that raise and worker processes that die.
These ``env_config`` options, accepted by every sim_ext environment, make that
happen on purpose (they are removed before the C++ environment sees the config):

- ``fault_after_steps: N``: ``step()`` raises :class:`InjectedFault` once the
  environment has taken N env steps (a vector env takes ``num_envs`` per call);
- ``fault_probability: p``: each ``step()`` call raises with probability p (drawn
  from ``fault_seed``, default 0, so a drill is reproducible);
- ``crash_after_steps: N``: the process is killed with SIGKILL after N env steps,
  as the kernel's OOM killer or a segfaulting simulator would end it;
- ``fault_once_file: PATH``: each of the above fires only if PATH does not exist,
  and creates it when it fires, so that a retried trial runs clean ("fail once").
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FAULT_KEYS = (
    "fault_after_steps",
    "fault_probability",
    "fault_seed",
    "crash_after_steps",
    "fault_once_file",
)


class InjectedFault(RuntimeError):
    """The failure asked for by ``fault_after_steps`` / ``fault_probability``."""


@dataclass
class FaultPlan:
    env_name: str
    after_steps: int | None = None
    probability: float = 0.0
    crash_after_steps: int | None = None
    once_file: Path | None = None
    seed: int = 0
    steps: int = 0

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)

    @property
    def armed(self) -> bool:
        return (
            self.after_steps is not None
            or self.probability > 0
            or self.crash_after_steps is not None
        )

    def _fire(self) -> bool:
        if self.once_file is None:
            return True
        try:
            # O_EXCL: of several processes sharing the file, one fires.
            fd = os.open(self.once_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        os.close(fd)
        return True

    def on_step(self, env_steps: int) -> None:
        """Called before each step() with the env steps it is about to take."""
        self.steps += env_steps
        if self.crash_after_steps is not None and self.steps >= self.crash_after_steps:
            if self._fire():
                os.kill(os.getpid(), signal.SIGKILL)
            self.crash_after_steps = None
        if self.after_steps is not None and self.steps >= self.after_steps:
            self.after_steps = None
            if self._fire():
                raise InjectedFault(
                    f"{self.env_name}: injected fault after {self.steps} env steps "
                    "(env_config fault_after_steps)"
                )
        if self.probability > 0 and self._rng.random() < self.probability and self._fire():
            raise InjectedFault(
                f"{self.env_name}: injected fault at env step {self.steps} "
                f"(env_config fault_probability={self.probability})"
            )


def split_faults(env_name: str, env_config: dict[str, Any]) -> tuple[dict[str, Any], FaultPlan]:
    """The env_config without the fault keys, and the plan they describe (checked)."""
    rest = {k: v for k, v in env_config.items() if k not in FAULT_KEYS}
    plan = FaultPlan(env_name)

    def count(key: str) -> int | None:
        value = env_config.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{env_name}: {key} must be an int >= 1, got {value!r}")
        return int(value)

    plan.after_steps = count("fault_after_steps")
    plan.crash_after_steps = count("crash_after_steps")
    probability = env_config.get("fault_probability", 0.0)
    if (
        isinstance(probability, bool)
        or not isinstance(probability, (int, float))
        or not 0.0 <= float(probability) <= 1.0
    ):
        raise ValueError(
            f"{env_name}: fault_probability must be a number in [0, 1], got {probability!r}"
        )
    plan.probability = float(probability)
    seed = env_config.get("fault_seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"{env_name}: fault_seed must be an int >= 0, got {seed!r}")
    plan.seed = int(seed)
    once = env_config.get("fault_once_file")
    if once is not None:
        if not isinstance(once, (str, os.PathLike)) or not str(once):
            raise ValueError(f"{env_name}: fault_once_file must be a path, got {once!r}")
        plan.once_file = Path(once)
    plan.__post_init__()
    return rest, plan
