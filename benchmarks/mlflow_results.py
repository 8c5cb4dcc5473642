"""The results ``benchmarks/mlflow_overhead.py`` logs: real ones from ``algo.train()``,
synthetic ones of the same shape, and the fake Tune trials that stream them."""

from __future__ import annotations

import contextlib
import logging
import numbers
import os
import pickle
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import EXPERIMENT


# --- results -------------------------------------------------------------------------------
def collect_real_results(count: int) -> list[dict[str, Any]]:
    """`count` results of the workbench's PPO on sim_ext CartPole, from `algo.train()`."""
    import ray

    from workbench.experiment.resolve import load_and_resolve
    from workbench.trial.config import algorithm_config

    with tempfile.TemporaryDirectory(prefix="mlflow-overhead-") as tmp:
        resolved = load_and_resolve(str(EXPERIMENT), [f"storage={tmp}"], check_results=False)
        ray.init(num_cpus=1, include_dashboard=False, logging_level=logging.WARNING)
        try:
            algo = algorithm_config(resolved.experiment, resolved.defaults).build_algo()
            try:
                results = []
                for i in range(count):
                    start = time.perf_counter()
                    results.append(algo.train())
                    took = time.perf_counter() - start
                    print(f"  algo.train() {i + 1}/{count}: {took:.1f} s", file=sys.stderr)
                config = algo.config.to_dict()
            finally:
                algo.stop()
        finally:
            ray.shutdown()
    for result in results:
        if not isinstance(result.get("config"), dict):
            result["config"] = dict(config)
    return results


def load_real_results(count: int, cache: Path) -> tuple[list[dict[str, Any]], str]:
    if cache.exists() and cache.stat().st_uid == os.getuid():
        try:
            with cache.open("rb") as f:
                results = pickle.load(f)
            if isinstance(results, list) and len(results) >= count:
                return results[:count], f"{count} real RLlib PPO results from the cache {cache}"
        except Exception as err:  # a stale or foreign file: collect again
            print(f"ignoring the results cache {cache}: {type(err).__name__}", file=sys.stderr)
    print(f"collecting {count} real RLlib PPO results (Ray, 1 CPU) ...", file=sys.stderr)
    results = collect_real_results(count)
    cache.parent.mkdir(parents=True, exist_ok=True)
    with cache.open("wb") as f:
        pickle.dump(results, f)
    return results, f"{count} real RLlib PPO results, collected now (cached in {cache})"


def synthetic_result(seed: int = 0) -> dict[str, Any]:
    """A result dict shaped like RLlib 2.60's PPO result (new API stack) on CartPole.

    The same top-level groups, nesting and curated metric names, 108 flattened keys of
    which 103 numbers outside ``config``, and a ``config`` of 307 flattened keys with the
    real mix of bools, ints, floats, strings and Nones (186 of them convert to float).
    """
    rng = random.Random(seed)

    def num() -> float:
        return rng.uniform(0.0, 500.0)

    def group(names: list[str], extra: str, count: int) -> dict[str, Any]:
        out: dict[str, Any] = {n: num() for n in names}
        out.update({f"{extra}_{i}": num() for i in range(count)})
        return out

    policy = [
        "policy_loss", "vf_loss", "total_loss", "entropy", "mean_kl_loss", "curr_kl_coeff",
        "curr_entropy_coeff", "vf_explained_var", "default_optimizer_learning_rate",
        "diff_num_grad_updates_vs_sampler_policy",
    ]  # fmt: skip
    runners = [
        "episode_return_mean", "episode_return_max", "episode_return_min", "episode_len_mean",
        "num_episodes", "sample", "env_step_timer", "rlmodule_inference_timer",
    ]  # fmt: skip
    timers = [
        "training_iteration", "restore_env_runners", "training_step",
        "env_runner_sampling_timer", "learner_update_timer", "synch_weights",
        "synch_env_connectors",
    ]  # fmt: skip
    result: dict[str, Any] = {
        "timers": group(timers, "timer", 0),
        "env_runners": {
            **group(runners, "runner_stat", 13),
            "num_env_steps_sampled_lifetime_throughput": group(
                ["throughput_since_last_reduce", "throughput_since_last_restore"], "t", 0
            ),
            "module_to_env_connector": {
                "connector_pipeline_timer": num(),
                "timers": {"connectors": group([], "connector", 6)},
            },
            "env_to_module_connector": {
                "connector_pipeline_timer": num(),
                "timers": {"connectors": group([], "connector", 5)},
            },
            "per_module": group([], "module_stat", 4),
        },
        "learners": {
            "__all_modules__": {
                **group(
                    ["num_env_steps_trained_lifetime", "num_env_steps_trained_throughput"],
                    "all_modules_stat",
                    14,
                ),
                "learner_connector": {
                    "connector_pipeline_timer": num(),
                    "timers": {"connectors": group([], "connector", 7)},
                },
            },
            "default_policy": group(policy, "policy_stat", 7),
        },
        "num_training_step_calls_per_iteration": 1,
        "num_env_steps_sampled_lifetime": 6030.0,
        "fault_tolerance": {
            "num_healthy_workers": 0,
            "num_remote_worker_restarts": 0,
            "num_env_runners_dropped_lifetime": 0,
        },
        "env_runner_group": {"actor_manager_num_outstanding_async_reqs": 0},
        "done": False,
        "training_iteration": 1,
        "trial_id": "default",
        "date": "2026-11-29_14-45-08",
        "timestamp": 1795963508,
        "time_this_iter_s": num(),
        "time_total_s": num(),
        "pid": 20805,
        "hostname": "vm",
        "node_ip": "192.0.2.2",
        "config": synthetic_config(rng),
        "time_since_restore": num(),
        "iterations_since_restore": 1,
        "perf": {"cpu_util_percent": num(), "ram_util_percent": num()},
    }
    return result


def synthetic_config(rng: random.Random) -> dict[str, Any]:
    """307 flattened keys: the searched PPO keys, then filler of the real mix of types."""
    config: dict[str, Any] = {
        "lr": 5e-05,
        "gamma": 0.99,
        "lambda": 1.0,
        "clip_param": 0.3,
        "entropy_coeff": 0.0,
        "vf_loss_coeff": 1.0,
        "num_epochs": 30,
        "minibatch_size": 128,
        "seed": 0,
        "env": "sim_ext/CartPole-v1",
        "model": {},
        "tf_session_args": {},
        "stats_cls_lookup": {f"stat_{i}": f"<class 'Stat{i}'>" for i in range(9)},
    }
    # What is left of the real mix (bool 88, int 72, float 26, str 24, None 78, other 19),
    # the searched keys, seed and env above taken out; 61 of them under "model".
    kinds = ["bool"] * 88 + ["int"] * 69 + ["float"] * 20 + ["str"] * 14 + ["none"] * 78
    kinds += ["list"] * 19
    rng.shuffle(kinds)  # 288 of them
    make: dict[str, Callable[[int], Any]] = {
        "bool": lambda i: bool(i % 2),
        "int": lambda i: i,
        "float": lambda i: i / 7.0,
        "str": lambda i: f"option-{i}",
        "none": lambda i: None,
        "list": lambda i: [i, i + 1],
    }
    for i, kind in enumerate(kinds):
        value = make[kind](i)
        if i < 61:
            config["model"][f"model_option_{i}"] = value
        elif i < 67:
            config["tf_session_args"][f"session_option_{i}"] = value
        else:
            config[f"option_{i}"] = value
    return config


def result_shape(result: dict[str, Any], keep: Callable[[str], bool]) -> dict[str, int]:
    """Flattened keys, numbers, what each callback logs as metrics from one result."""
    from ray.tune.utils import flatten_dict

    from workbench.tracking.metrics import numeric_metrics

    flat = flatten_dict(result, delimiter="/")
    numbers_ = [
        k for k, v in flat.items() if isinstance(v, numbers.Real) and not isinstance(v, bool)
    ]
    floatable = 0
    for value in flat.values():
        with contextlib.suppress(TypeError, ValueError):
            float(value)
            floatable += 1
    return {
        "flat_keys": len(flat),
        "config_keys": sum(k.startswith("config/") for k in flat),
        "numbers_outside_config": sum(not k.startswith("config/") for k in numbers_),
        "ray_metrics": floatable,
        "workbench_metrics": len(numeric_metrics(result, keep)),
    }


# --- fake Tune trials ----------------------------------------------------------------------
class FakeTrial:
    """What the two callbacks read from a ray.tune.experiment.Trial."""

    def __init__(self, index: int, config: dict[str, Any], folder: Path) -> None:
        self.trial_id = f"bench_{index:05d}"
        self.trainable_name = "PPO"
        self.config = config
        self.status = "RUNNING"
        folder.mkdir(parents=True, exist_ok=True)
        self.local_path = str(folder)
        self.path = str(folder)
        self.logdir = str(folder)
        self.error_file = None
        self.error_msg = None

    @property
    def trial_name(self) -> str:
        return f"{self.trainable_name}_{self.trial_id}"

    def __str__(self) -> str:
        return self.trial_name

    __repr__ = __str__


def trial_configs(
    base: dict[str, Any], hyperparameters: dict[str, str], trials: int
) -> list[dict[str, Any]]:
    """The base config with each trial's own value of every numeric searched key."""
    out = []
    for t in range(trials):
        config = dict(base)
        for key in hyperparameters:
            value = config.get(key)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                continue
            if isinstance(value, int):
                config[key] = value + t
            else:
                config[key] = float(value) * (1.0 + 0.1 * t) + 1e-6 * t
        out.append(config)
    return out


def result_stream(
    results: list[dict[str, Any]], trials: list[FakeTrial], count: int
) -> list[tuple[FakeTrial, dict[str, Any]]]:
    """`count` results round-robin over the trials, cycling through the real results."""
    stream = []
    seen: dict[str, int] = {}
    now = time.time()
    for i in range(count):
        trial = trials[i % len(trials)]
        n = seen[trial.trial_id] = seen.get(trial.trial_id, 0) + 1
        result = dict(results[i % len(results)])
        result.update(
            training_iteration=n,
            iterations_since_restore=n,
            trial_id=trial.trial_id,
            timestamp=int(now) + i,
            config=trial.config,
        )
        stream.append((trial, result))
    return stream
