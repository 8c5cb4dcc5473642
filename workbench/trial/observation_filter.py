"""Observation normalisation (``env.normalize_observations``): RLlib's ``MeanStdFilter``
env-to-module connector while a trial trains, and the same transform, with the statistics
it had learnt, wherever the policy acts outside RLlib's env runner.

While training, RLlib's connector keeps a running mean and standard deviation of every
observation it passes on and hands the module ``clip((obs - mean) / (std + 1e-6), -10, 10)``.
Its statistics are part of the env runner's state: the algorithm's checkpoint holds them,
a PBT exploit restores the donor's with its weights, and remote runners' are merged and
sent back by RLlib every iteration. A policy from a checkpoint that is played without them
sees observations on another scale than it was trained on, so the workbench writes them
into each checkpoint's manifest as plain numbers (`ObservationStats`), and `Policy`
(workbench.trial.rollout) applies them before the module: `workbench eval`, videos, the
exported TorchScript/ONNX policy and the MLflow model, and a trial's own evaluation before
a confirmed stop (with the statistics of that moment, not updated by the evaluation).

The statistics go with the policy: a deterministic function of the observation, which is
what RLlib's runner computes at that moment with ``update_stats`` off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.connectors.env_to_module.mean_std_filter import MeanStdFilter
from ray.rllib.utils.filter import RunningStat
from ray.rllib.utils.numpy import SMALL_NUMBER

CLIP = 10.0  # RLlib's default clip_by_value


def mean_std_filter(env: Any = None, spaces: Any = None, device: Any = None) -> MeanStdFilter:
    """The env-to-module connector of a trial with ``env.normalize_observations``
    (AlgorithmConfig.env_runners(env_to_module_connector=...) calls it per runner).

    Raises ValueError for an observation space that is not a Box: RLlib's filter would
    fail on a Discrete one with "Use () not None as shape arguments"."""
    space = getattr(env, "single_observation_space", None) or getattr(
        env, "observation_space", None
    )
    if space is not None and not isinstance(space, gym.spaces.Box):
        raise ValueError(
            f"env.normalize_observations: true needs a Box observation space; this env's is "
            f"{space}. Set it to false for this env"
        )
    return MeanStdFilter(multi_agent=False, clip_by_value=CLIP)


@dataclass(frozen=True)
class ObservationStats:
    """A MeanStdFilter's statistics, as the policy applies them: ``mean`` and ``std`` per
    observation element (flat, in the observation's order), ``clip`` (None: no clip)."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    clip: float | None
    count: int  # observations seen

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "mean_std",
            "mean": list(self.mean),
            "std": list(self.std),
            "clip": self.clip,
            "count": self.count,
        }

    @classmethod
    def from_json(cls, data: Any) -> ObservationStats:
        """From a manifest. Raises ValueError (TypeError, KeyError) when it is not one."""
        if not isinstance(data, dict) or data.get("type") != "mean_std":
            raise ValueError(f"an observation filter of an unknown kind: {data!r}")
        mean = tuple(float(v) for v in data["mean"])
        std = tuple(float(v) for v in data["std"])
        if not mean or len(mean) != len(std):
            raise ValueError("the observation filter's mean and std differ in length")
        if not all(np.isfinite(mean)) or not all(np.isfinite(std)) or min(std) < 0:
            raise ValueError("the observation filter's statistics are not finite")
        clip = data.get("clip")
        return cls(mean, std, None if clip is None else float(clip), int(data.get("count", 0)))


class Normalize(torch.nn.Module):
    """The filter at inference, with fixed statistics: what RLlib's connector hands the
    module for a batch of observations, in its arithmetic (float64 mean, float32 std +
    1e-6, clipped, float32 out). `Policy` (workbench.trial.rollout) runs it first."""

    mean: torch.Tensor
    scale: torch.Tensor

    def __init__(self, stats: ObservationStats) -> None:
        super().__init__()
        self.clip = float(stats.clip or 0.0)
        self.register_buffer("mean", torch.tensor(stats.mean, dtype=torch.float64))
        scale = np.asarray(stats.std, dtype=np.float32) + np.float32(SMALL_NUMBER)
        self.register_buffer("scale", torch.as_tensor(scale.astype(np.float64)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = (obs.to(torch.float64) - self.mean) / self.scale
        if self.clip:
            x = torch.clamp(x, -self.clip, self.clip)
        return x.to(torch.float32)


def find_filter(holder: Any) -> MeanStdFilter | None:
    """The MeanStdFilter of an env runner's env-to-module pipeline, or of an algorithm's
    (its local env runner's, or without one the pipeline RLlib keeps on the algorithm and
    syncs the remote runners' merged statistics into), or None."""
    runner = getattr(holder, "env_runner", None)
    if runner is not None and runner is not holder:
        found = find_filter(runner)
        if found is not None:
            return found
    for name in ("_env_to_module", "env_to_module_connector"):
        pipeline = getattr(holder, name, None)
        for connector in getattr(pipeline, "connectors", None) or []:
            if isinstance(connector, MeanStdFilter):
                return connector
    return None


def runner_stats(holder: Any) -> ObservationStats | None:
    """The statistics the MeanStdFilter of an env runner or algorithm (`find_filter`)
    holds now; None without one, or for an observation that is not a Box (which
    `mean_std_filter` refuses to normalise)."""
    connector = find_filter(holder)
    if connector is None:
        return None
    try:
        connector.get_state()  # builds the filters on first use, as sampling would
    except (AttributeError, TypeError):
        return None  # not a Box observation (`mean_std_filter` refuses those)
    agent_filter = next(iter((connector._filters or {}).values()), None)
    running = getattr(agent_filter, "running_stats", None)
    if not isinstance(running, RunningStat):
        return None
    mean = np.asarray(running.mean, dtype=np.float64).reshape(-1)
    std = np.asarray(running.std, dtype=np.float64).reshape(-1)
    clip = agent_filter.clip  # type: ignore[union-attr]
    return ObservationStats(
        mean=tuple(float(v) for v in mean),
        std=tuple(float(v) for v in std),
        clip=None if not clip else float(clip),
        count=int(running.num_pushes),
    )


def _push_rows(stat: RunningStat, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pushes ``rows`` (k, *shape) into ``stat`` as k of RLlib's ``RunningStat.push``
    calls would, in one pass: Welford's recurrences unrolled with cumulative sums (the
    same values up to rounding). Returns the mean and the sum of squared differences
    after each row, (k, *shape) each, for the normalisation of that row."""
    n0 = stat.num_pushes
    k = rows.shape[0]
    counts = (n0 + np.arange(1, k + 1, dtype=np.float64)).reshape((k,) + (1,) * (rows.ndim - 1))
    start = np.asarray(stat.mean_array, dtype=np.float64)
    means = (n0 * start + np.cumsum(rows, axis=0)) / counts
    before = np.concatenate([start[None], means[:-1]])
    # S_i = S_{i-1} + (x_i - M_{i-1})(x_i - M_i); the first push ever adds nothing.
    terms = (rows - before) * (rows - means)
    if n0 == 0:
        terms[0] = 0.0
    sums = stat.sum_sq_diff_array + np.cumsum(terms, axis=0)
    if n0 == 0:  # RLlib's first push sets the mean (and its delta) to the value
        stat.mean_delta_array[...] = means[-1]
    else:
        stat.mean_delta_array[...] += means[-1] - start
    stat.sum_sq_diff_delta_array[...] += sums[-1] - stat.sum_sq_diff_array
    stat.mean_array[...] = means[-1]
    stat.sum_sq_diff_array[...] = sums[-1]
    stat.num_pushes += k
    stat.num_pushes_delta += k
    return means, sums


class BatchFilter:
    """A trial's MeanStdFilter connector applied to a whole vector step at once, for the
    fast env runner: each row is pushed into the connector's statistics (and its sync
    buffer) and normalised with the statistics after its own push, in env order, as
    RLlib's runner calls the connector once per env per step. The statistics stay the
    connector's, so checkpoints, exploits and RLlib's merging of runners see no
    difference."""

    def __init__(self, connector: MeanStdFilter) -> None:
        connector.get_state()  # builds the per-agent filter on first use
        self.connector = connector
        filters = connector._filters or {}
        self._filter = next(iter(filters.values()))  # single-agent: one

    @property
    def observation_space(self) -> Any:
        """The normalised observations' space (RLlib's episodes carry it)."""
        return self.connector.observation_space

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        f = self._filter
        rows = np.asarray(obs, dtype=np.float64)
        means, sums = _push_rows(f.running_stats, rows)
        _push_rows(f.buffer, rows)  # type: ignore[arg-type]  # built with the filter
        x = rows
        if f.demean:
            x = x - means
        if f.destd:
            n = f.running_stats.num_pushes - rows.shape[0] + np.arange(1, rows.shape[0] + 1)
            n = n.reshape((-1,) + (1,) * (rows.ndim - 1))
            var = np.where(n > 1, sums / np.maximum(n - 1, 1), 0.0).astype(np.float32)
            x = x / (np.sqrt(np.maximum(0, var)) + SMALL_NUMBER)
        if f.clip:
            x = np.clip(x, -f.clip, f.clip)
        return x.astype(obs.dtype)
