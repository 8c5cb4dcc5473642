"""RLlib learners built in the test process on CartPole's spaces, and the figures the
lean learners' equivalence tests compare (tests/unit/test_lean_learner.py, test_lean_dqn.py)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

MODULE = "default_policy"


def learner(config: Any, like: Any = None) -> Any:
    """``config``'s learner on CartPole's spaces; with ``like``, in that learner's state."""
    space = gym.make("CartPole-v1")
    spaces = {
        "__env__": (space.observation_space, space.action_space),
        MODULE: (space.observation_space, space.action_space),
    }
    built = config.build_learner(env=None, spaces=spaces)
    if like is not None:
        built.set_state(like.get_state())
    return built


def flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A learner's nested results as ``a/b/c`` -> value (Stats objects peeked)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value.peek() if hasattr(value, "peek") else value
    return out


def comparable(metrics: dict[str, Any]) -> dict[str, Any]:
    """Figures that are functions of the data and weights (not timers or throughputs)."""
    return {
        k: v
        for k, v in metrics.items()
        if "timer" not in k and "throughput" not in k and "connector" not in k
    }


def weights(target: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in target.module[MODULE].state_dict().items()}


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)
