"""Which result keys become MLflow metrics, under which names."""

from __future__ import annotations

import fnmatch
import json
import numbers
import posixpath
import re
from collections.abc import Callable
from typing import Any

from ray.tune.utils import flatten_dict

from workbench.names import STEP_METRIC

# What a person looks at: return, episode length, env steps, throughput, timers, losses.
CURATED_METRICS: tuple[str, ...] = (
    "training_iteration",
    "time_this_iter_s",
    "time_total_s",
    "num_env_steps_sampled_lifetime",
    "score/*",  # the score: the mean return of the last K episodes (workbench.trial.score)
    "eval/*",  # the evaluation that confirmed a stop
    "candidate/*",  # the short evaluations that nominate the population's result
    "env_runners/episode_return_mean",
    "env_runners/episode_return_max",
    "env_runners/episode_return_min",
    "env_runners/episode_len_mean",
    "env_runners/num_episodes",
    "env_runners/num_env_steps_sampled_lifetime_throughput/throughput_since_last_reduce",
    "env_runners/sample",
    "env_runners/env_step_timer",
    "env_runners/rlmodule_inference_timer",
    "evaluation/env_runners/episode_return_mean",
    "evaluation/env_runners/episode_len_mean",
    "learners/__all_modules__/num_env_steps_trained_lifetime",
    "learners/__all_modules__/num_env_steps_trained_throughput",
    "learners/__all_modules__/learner_thread_update_timer",
    "learners/*/policy_loss",
    "learners/*/vf_loss",
    "learners/*/total_loss",
    "learners/*/entropy",
    "learners/*/mean_kl_loss",
    "learners/*/curr_kl_coeff",
    "learners/*/curr_entropy_coeff",
    "learners/*/vf_explained_var",
    "learners/*/default_optimizer_learning_rate",
    "learners/*/diff_num_grad_updates_vs_sampler_policy",
    "learners/*/gradients_default_optimizer_global_norm",
    "learners/*/qf_loss",
    "learners/*/actor_loss",
    "learners/*/alpha_loss",
    "learners/*/alpha_value",
    "learners/*/td_error_mean",
    "learners/*/mean_IS",
    "timers/*",
    "fault_tolerance/*",
    "perf/*",
    "workbench/*",
)


# Keys that are numbers but not metrics.
_NOT_METRICS = ("pid", "timestamp", "done", "config/*", "trial_id", "node_ip", "hostname")


class MetricFilter:
    """The result keys a run logs: 'curated', 'all' or glob patterns (picklable: Tune
    pickles its callbacks)."""

    def __init__(self, spec: str | list[str]) -> None:
        patterns: tuple[str, ...]
        if spec == "all":
            patterns = ("*",)
        elif spec == "curated":
            patterns = CURATED_METRICS
        else:
            patterns = (*spec, STEP_METRIC)
        self.exact = frozenset(p for p in patterns if not any(c in p for c in "*?["))
        self.globs = tuple(p for p in patterns if p not in self.exact)
        # Results carry the same keys every iteration: decide each key once.
        self._decided: dict[str, bool] = {}

    def __call__(self, key: str) -> bool:
        decided = self._decided.get(key)
        if decided is None:
            decided = not any(fnmatch.fnmatchcase(key, p) for p in _NOT_METRICS) and (
                key in self.exact or any(fnmatch.fnmatchcase(key, p) for p in self.globs)
            )
            self._decided[key] = decided
        return decided


def metric_filter(spec: str | list[str]) -> MetricFilter:
    return MetricFilter(spec)


_BAD_NAME = re.compile(r"[^/\w.\- :]")


def metric_name(key: str) -> str:
    """A result key as an MLflow name: characters MLflow refuses become '_' (a custom
    metric with one would otherwise make the store refuse the whole result)."""
    name = _BAD_NAME.sub("_", key)
    return posixpath.normpath(name).lstrip("/") if ".." in name or "//" in name else name


def numeric_metrics(result: dict[str, Any], keep: Callable[[str], bool]) -> dict[str, float]:
    flat = flatten_dict(result, delimiter="/")
    out: dict[str, float] = {}
    for key, value in flat.items():
        # numbers.Real: RLlib reports many means as numpy.float32.
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            continue
        if keep(key):
            out[metric_name(key)] = float(value)
    return out


def hp_metric(value: Any) -> float | None:
    """A hyperparameter's value as a metric (numbers only; categories go to tags)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return None


def _param(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:6000]
