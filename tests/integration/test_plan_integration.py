"""Placement groups on a real local Ray with fake GPUs: what a trial's group holds, where
its learner and runners land, and that as many trials run at once as `plan` said.

Ray schedules fake GPUs (``ray.init(num_gpus=1)`` on a machine without one) like real
ones. RLlib's fake-GPU setting (``config.resources(_fake_gpus=True)``) only reaches the
old API stack in 2.60, so the learner here is told what it would be told on a GPU node
(Ray hands it GPU 0) and then trains on the CPU: a learner class that pins the torch
device, and an algorithm class whose learner group uses gloo instead of NCCL.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from tests.support.experiments import tiny_ppo, write_experiment
from workbench.errors import ExperimentError
from workbench.experiment.resolve import load_and_resolve
from workbench.plan.capacity import make_plan
from workbench.plan.population import MEASURED
from workbench.plan.resources import live_cluster
from workbench.plan.start_probe import crowd_size
from workbench.run.launch import run
from workbench.trial.config import build_config


@pytest.fixture(scope="module", autouse=True)
def fake_gpu_ray() -> Iterator[None]:
    ray.init(num_cpus=4, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def fake_gpu_trials(record: Path) -> Callable[[Any], Any]:
    """``configure`` for launch.run: fake-GPU learners, and a record (one JSON line per
    trial) of where the trial's actors really run, written from inside the trial.

    The classes are made here, so Ray ships them by value to the trial processes."""
    from ray.rllib.algorithms.ppo import PPO
    from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner

    from workbench.trial.callbacks import WorkbenchCallbacks

    class FakeGpuPPO(PPO):  # type: ignore[misc]
        def setup(self, config: Any) -> None:
            from ray.rllib.core.learner import learner_group

            nccl_backend = learner_group._get_backend_config

            def gloo_backend(learner_class: Any) -> Any:
                backend = nccl_backend(learner_class)
                backend.backend = "gloo"  # a CPU torch has no NCCL
                return backend

            learner_group._get_backend_config = gloo_backend
            super().setup(config)

    class CpuOnFakeGpuLearner(PPOTorchLearner):  # type: ignore[misc]
        def build(self) -> None:
            import ray.rllib.core.learner.torch.torch_learner as torch_learner
            import torch

            torch_learner.get_device = lambda *args, **kwargs: torch.device("cpu")
            super().build()

    class WhereTheyRun(WorkbenchCallbacks):
        path = str(record)

        def on_algorithm_init(self, *, algorithm: Any, **kwargs: Any) -> None:
            super().on_algorithm_init(algorithm=algorithm, **kwargs)

            def runner_node(runner: Any) -> str:
                return str(ray.get_runtime_context().get_node_id())

            def learner_info(learner: Any) -> dict[str, Any]:
                group = ray.util.get_current_placement_group()
                return {
                    "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                    "assigned": ray.get_runtime_context().get_assigned_resources(),
                    "placement_group": group.id.hex() if group else None,
                    "device": str(learner._device),
                }

            learners = algorithm.learner_group.foreach_learner(learner_info)
            line = {
                "placement_group": ray.util.get_current_placement_group().id.hex(),
                "main_node": ray.get_runtime_context().get_node_id(),
                "runner_nodes": algorithm.env_runner_group.foreach_env_runner(
                    runner_node, local_env_runner=False
                ),
                "learners": [getattr(r, "get", lambda r=r: r)() for r in learners],
            }
            with open(self.path, "a") as out:
                out.write(json.dumps(line) + "\n")

    def configure(config: Any) -> Any:
        config = config.learners(learner_class=CpuOnFakeGpuLearner).callbacks(WhereTheyRun)
        config.algo_class = FakeGpuPPO
        return config

    return configure


def experiment(tmp_path: Path, resources: dict[str, Any], **top: Any) -> Any:
    population = {
        "name": "fake_gpus",
        "training": {"train_batch_size_per_learner": 256, "minibatch_size": 128, "num_epochs": 1},
        "population": 2,
        "stop": {"iterations": 1},
        "checkpoint": {"frequency": 1, "keep": 3, "at_end": False},
        "tracking": {"enabled": False},
        "resources": resources,
    }
    return load_and_resolve(write_experiment(tmp_path, tiny_ppo(tmp_path, **{**population, **top})))


class PlacementGroupWatch:
    """Polls Ray's placement group table while a run goes on: which groups exist at once."""

    def __init__(self) -> None:
        self.bundles: dict[str, dict[int, dict[str, float]]] = {}
        self.most_at_once = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> PlacementGroupWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.is_set():
            table = ray.util.placement_group_table()
            created = {k: v for k, v in table.items() if v["state"] == "CREATED"}
            for key, group in created.items():
                self.bundles[key] = group["bundles"]
            self.most_at_once = max(self.most_at_once, len(created))
            time.sleep(0.1)


def _run_and_watch(
    tmp_path: Path, resources: dict[str, Any]
) -> tuple[Any, Any, PlacementGroupWatch, list[dict[str, Any]]]:
    resolved = experiment(tmp_path, resources)
    record = tmp_path / "where.jsonl"
    fake_gpus = fake_gpu_trials(record)
    plan = make_plan(
        resolved,
        live_cluster(),
        config=build_config(resolved.experiment, resolved.defaults, fake_gpus),
    )
    configured: list[Any] = []

    def configure(config: Any) -> Any:
        configured.append(config)
        return fake_gpus(config)

    with PlacementGroupWatch() as watch:
        summary = run(resolved, configure=configure, progress_interval_s=60)
    assert summary.errors == 0 and {t.status for t in summary.trials} == {"TERMINATED"}
    # One RLlib config per run: the plan, the pre-flight and Tune share it.
    assert len(configured) == 1
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    return plan, summary, watch, lines


def test_a_gpu_learner_trial_holds_its_gpu_bundle_and_runs_alone_as_planned(
    tmp_path: Path,
) -> None:
    plan, summary, watch, trials = _run_and_watch(
        tmp_path,
        {
            "cpus_main": 1,
            "num_learners": 1,
            "gpus_per_learner": 1,
            "env_runners": {"count": 2, "cpus_each": 1, "envs_per_runner": 4},
        },
    )
    expected = [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}, {"GPU": 1.0}]
    assert [b.resources for b in plan.request.bundles] == expected
    # 4 CPUs + 1 GPU, a trial takes CPU 3 + GPU 1: one at a time.
    assert (plan.concurrent, plan.waves) == (1, 2)
    assert len(trials) == len(summary.trials) == 2
    # One group per trial, or one for both when Tune hands the first trial's actor (and
    # its group) to the second (reuse_actors).
    assert 1 <= len(watch.bundles) <= 2
    for bundles in watch.bundles.values():
        assert [bundles[i] for i in sorted(bundles)] == expected
    assert watch.most_at_once == plan.concurrent
    for trial in trials:
        assert trial["placement_group"] in watch.bundles
        (learner,) = trial["learners"]
        # The learner actor runs in the trial's group, on the GPU bundle, given GPU 0.
        assert learner["placement_group"] == trial["placement_group"]
        assert learner["assigned"].get("GPU") == 1.0 and learner["gpu_ids"] == ["0"]
        assert learner["device"] == "cpu"  # the fake: it trains on the CPU
        assert len(trial["runner_nodes"]) == 2


def test_fractional_gpu_learners_share_the_gpu_two_trials_at_once_as_planned(
    tmp_path: Path,
) -> None:
    plan, _, watch, trials = _run_and_watch(
        tmp_path,
        {
            "cpus_main": 1,
            "num_learners": 1,
            "gpus_per_learner": 0.5,
            "env_runners": {"count": 1, "cpus_each": 1, "envs_per_runner": 4},
        },
    )
    assert [b.resources for b in plan.request.bundles] == [
        {"CPU": 1.0},
        {"CPU": 1.0},
        {"GPU": 0.5},
    ]
    assert (plan.concurrent, plan.waves) == (2, 1)
    assert watch.most_at_once == plan.concurrent
    assert len({t["placement_group"] for t in trials}) == 2
    for trial in trials:
        (learner,) = trial["learners"]
        assert learner["assigned"].get("GPU") == 0.5 and learner["gpu_ids"] == ["0"]


@pytest.mark.parametrize(
    ("resources", "fragments"),
    [
        (
            {"num_learners": 1, "gpus_per_learner": 2, "env_runners": 1},
            (
                "resources.gpus_per_learner: one trial can never be placed on the local Ray "
                "instance [1 node, CPU 4, GPU 1 in total]",
                "needs GPU 2 and the cluster has 1 in total",
                "It would fit with resources.gpus_per_learner: 1",
            ),
        ),
        (
            {
                "num_learners": 1,
                "gpus_per_learner": 1,
                "env_runners": {"count": 4},
                "placement_strategy": "STRICT_PACK",
            },
            ("needs CPU 5 and the cluster has 4 in total", "env_runners.count: 3"),
        ),
    ],
    ids=["more gpus than the cluster", "more cpus than the node"],
)
def test_run_refuses_a_trial_that_can_never_fit_before_anything_starts(
    tmp_path: Path, resources: dict[str, Any], fragments: tuple[str, ...]
) -> None:
    resolved = experiment(tmp_path, resources)
    before = ray.util.placement_group_table()
    with pytest.raises(ExperimentError) as info:
        run(resolved)
    assert info.value.exit_code == 2
    for fragment in fragments:
        assert fragment in str(info.value)
    assert not resolved.results_dir.exists()
    assert ray.util.placement_group_table() == before  # no trial was even asked for


def test_the_probe_measures_sampling_and_learning_here(tmp_path: Path) -> None:
    resolved = experiment(
        tmp_path,
        {"num_learners": 1, "gpus_per_learner": 1, "env_runners": {"count": 2}},
        training={"train_batch_size_per_learner": 512, "minibatch_size": 128, "num_epochs": 2},
    )
    plan = make_plan(resolved, live_cluster(), probe=True)
    rate = plan.throughput
    assert rate is not None and rate.measured
    assert rate.per_runner > 0 and rate.sampling == 2 * rate.per_runner
    assert rate.learner_low is not None and rate.learner_low == rate.learner_high
    assert rate.learner_low > 0
    text = "\n".join(plan.lines())
    assert "measured by --probe on this machine" in text
    assert "this machine has no CUDA, so the CPU was measured" in text
    # Measured with the torch threads a trial's learner gets (one here), and both costs of
    # an epoch reported.
    assert "on CPU, 1 torch thread:" in text
    assert rate.learner_costs is not None and rate.learner_costs[0] > 0
    figures = plan.to_json()["throughput"]
    assert figures["learner_s_per_sample"] == rate.learner_costs[0]
    assert figures["learner_s_per_minibatch"] == rate.learner_costs[1]
    assert "ms per minibatch +" in text
    # The learner connectors' cost, once a train() before its epochs, measured apart.
    assert figures["learner_s_per_sample_a_train"] == rate.learner_call_s_per_sample >= 0
    # A trial process's start, from a fresh process that built this algorithm, prices the
    # forecast's.
    assert rate.start_cpu_s is not None and 1.0 < rate.start_cpu_s < 60.0, plan.notes
    assert figures["start_cpu_s"] == rate.start_cpu_s
    assert plan.forecast is not None
    # Priced among the population's processes starting together.
    start = plan.to_json()["forecast"]["process_start_cpu_s"]
    assert start == plan.forecast.start_s > plan.forecast.costs.start_s
    assert f"from a fresh process's {rate.start_cpu_s:.3g} alone (measured by --probe)" in text
    assert "a train() before its epochs" in text
    # The same process timed a train() alone and among two processes a core of this
    # machine (Ray actors of its own), and a step of the short evaluation: the forecast
    # prices a crowded train() and the evaluations from them.
    assert rate.crowd is not None, plan.notes
    per_core, ratio = rate.crowd
    assert per_core == pytest.approx(crowd_size(os.cpu_count() or 1, None) / (os.cpu_count() or 1))
    assert 0.5 < ratio < 5.0
    assert figures["crowd"] == [per_core, ratio]
    # Every second train(), 10 episodes of CartPole's 500 steps at once: well under 1 s.
    assert 0.0 < rate.evaluation_s < 1.0
    assert figures["evaluation_cpu_s_a_train"] == rate.evaluation_s
    assert plan.forecast.costs.crowd_measured
    assert plan.forecast.costs.evaluation_s == rate.evaluation_s
    assert "a core, and no dearer among more); its short evaluations ~" in " ".join(text.split())


def test_rllibs_learner_extends_the_episodes_it_updates_on_and_the_probe_copies_them(
    tmp_path: Path,
) -> None:
    from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

    from workbench.plan.throughput import _UpdateTimer

    resolved = experiment(tmp_path, {})
    config = build_config(resolved.experiment, resolved.defaults)
    algo = config.copy(copy_frozen=False).env_runners(num_env_runners=0).build_algo()
    try:
        episodes = algo.env_runner.sample(num_timesteps=256)
        lengths = [len(e) for e in episodes]
        steps = sum(lengths)
        update = algo.learner_group.update
        # The fall: PPO's learner connectors add each episode a step, in place, so that a
        # second update on the same list trains on a larger batch.
        given = copy.deepcopy(episodes)
        timesteps = {NUM_ENV_STEPS_SAMPLED_LIFETIME: steps}
        update(episodes=given, minibatch_size=128, num_epochs=1, timesteps=timesteps)
        assert [len(e) for e in given] == [n + 1 for n in lengths]
        # The fix: the probe times every update on its own copy.
        timer = _UpdateTimer(update, episodes, steps)
        assert timer.trained(128) == steps + len(episodes)
        assert timer(128, 2) > 0
        assert [len(e) for e in episodes] == lengths
    finally:
        algo.stop()


def test_a_start_probe_that_fails_says_why_and_the_plan_keeps_the_documented_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workbench.plan import capacity
    from workbench.plan.start_probe import StartProbeError, start_cpu_s

    resolved = experiment(tmp_path, {"env_runners": {"count": 0}})
    # A process that cannot build the algorithm: its own last error line comes back.
    with pytest.raises(StartProbeError, match=r"the start probe failed: .*Error"):
        start_cpu_s({"not": "an experiment"}, resolved.defaults)  # type: ignore[arg-type]

    def failing(*_: Any, **__: Any) -> float:
        raise StartProbeError("the start probe failed: ImportError: no module named sim")

    monkeypatch.setattr(capacity, "probe_process", failing)
    plan = make_plan(resolved, live_cluster(), probe=True)
    assert plan.throughput is not None and plan.throughput.start_cpu_s is None
    assert "a trial process's start not measured: the start probe failed: ImportError" in (
        "\n".join(plan.notes)
    )
    assert plan.forecast is not None and plan.forecast.costs.start_s == MEASURED.start_s
    assert not plan.forecast.costs.crowd_measured and plan.forecast.costs.evaluation_s == 0.0
