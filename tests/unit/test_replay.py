"""Schedule replay without Ray: the schedule as an experiment file, its values typed again,
the replay experiment built from its source, and the scheduler that applies it (exported
from a real population and run: tests/integration/test_replay_integration.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from ray.tune.schedulers import TrialScheduler

from tests.support.experiments import tiny_ppo, write_experiment
from tests.support.schedulers import built_scheduler
from workbench.analysis.lineage import Segment
from workbench.analysis.schedule import (
    replay_experiment,
    replay_steps,
    segment_schedule,
    typed_value,
)
from workbench.errors import ExperimentError
from workbench.experiment.resolve import load_and_resolve
from workbench.experiment.search_space import parse_search_space
from workbench.lineage_record import LineageRecord
from workbench.tune_ext.replay import ReplayScheduler

SCHEDULE = [
    {"iteration": 1, "values": {"lr": 1e-3, "lambda_": 0.95, "num_epochs": 3}},
    {"iteration": 4, "values": {"lr": 5e-4}},
    {"iteration": 6, "values": {"lambda_": 0.9, "num_epochs": 5}},
]


def _experiment(tmp_path: Path, **fields: Any) -> Path:
    replay = {
        "name": "replayed",
        "scheduler": {"type": "replay", "schedule": SCHEDULE},
        "population": 1,
        "stop": {"iterations": 8},
    }
    return write_experiment(tmp_path / "replay.yaml", tiny_ppo(tmp_path, **{**replay, **fields}))


def test_a_schedule_is_an_experiment_whose_names_map_to_tune_keys(tmp_path: Path) -> None:
    resolved = load_and_resolve(_experiment(tmp_path))
    assert resolved.tune_keys == {"lr": "lr", "lambda_": "lambda", "num_epochs": "num_epochs"}
    replay = built_scheduler(resolved)
    assert isinstance(replay, ReplayScheduler)
    assert replay.values_at(1) == {"lr": 1e-3, "lambda": 0.95, "num_epochs": 3}
    assert replay.values_at(5) == {"lr": 5e-4, "lambda": 0.95, "num_epochs": 3}
    assert replay.values_at(99) == {"lr": 5e-4, "lambda": 0.9, "num_epochs": 5}
    section = resolved.experiment.scheduler
    assert section.type == "replay" and section.values_at(4)["lr"] == 5e-4


@pytest.mark.parametrize(
    ("scheduler_section", "field", "parts"),
    [
        (
            {"type": "replay", "schedule": [{"iteration": 2, "values": {"lr": 1e-3}}]},
            "scheduler.schedule",
            ("first step is at iteration 2", "iteration 1"),
        ),
        (
            {"type": "replay", "schedule": [*SCHEDULE[:2], {"iteration": 4, "values": {}}]},
            "scheduler.schedule.2.values",
            ("at least 1 item",),
        ),
        (
            {"type": "replay", "schedule": [SCHEDULE[0], SCHEDULE[2], SCHEDULE[1]]},
            "scheduler.schedule",
            ("iteration 4 follows iteration 6", "strictly increasing"),
        ),
        (
            {
                "type": "replay",
                "schedule": [SCHEDULE[0], {"iteration": 3, "values": {"gamma": 0.9}}],
            },
            "scheduler.schedule",
            ("iteration 3 sets gamma", "first step must name every hyperparameter"),
        ),
        (
            {"type": "replay", "schedule": [{"iteration": 1, "valeus": {"lr": 1e-3}}]},
            "scheduler.schedule.0.valeus",
            ("unknown key 'valeus'", "did you mean 'values'?"),
        ),
        (
            {"type": "replay", "schedule": []},
            "scheduler.schedule",
            ("at least 1 item",),
        ),
        (
            {"type": "replay", "schedule": [{"iteration": 1, "values": {"lrr": 1e-3}}]},
            "scheduler.schedule.0.values.lrr",
            ("PPO has no hyperparameter 'lrr' to replay", "did you mean 'lr'?"),
        ),
    ],
)
def test_a_bad_schedule_names_the_field(
    tmp_path: Path, scheduler_section: dict[str, Any], field: str, parts: tuple[str, ...]
) -> None:
    path = _experiment(tmp_path, scheduler=scheduler_section)
    with pytest.raises(ExperimentError) as info:
        load_and_resolve(path)
    problems = {p.field: p.message for p in info.value.problems}
    assert field in problems, problems
    for part in parts:
        assert part in problems[field]


def test_a_replayed_value_cannot_also_be_fixed_or_searched(tmp_path: Path) -> None:
    path = _experiment(
        tmp_path,
        training={"lr": 1e-4},
        search_space={"params": {"lambda_": {"uniform": [0.9, 1.0]}}},
    )
    with pytest.raises(ExperimentError) as info:
        load_and_resolve(path)
    messages = {p.field: p.message for p in info.value.problems}
    assert "fixed in training and replayed" in messages["scheduler.schedule.0.values.lr"]
    assert "searched (search_space) and replayed" in messages["scheduler.schedule.0.values.lambda_"]


SPECS = parse_search_space(
    {
        "lr": {"loguniform": [1e-5, 1e-2]},
        "num_epochs": {"randint": [3, 20]},
        "minibatch_size": {"choice": [64, 128, 256]},
        "activation": {"choice": ["relu", "tanh"]},
        "hiddens": {"choice": [[64, 64], [256, 256]]},
    }
)


def test_values_read_back_from_mlflow_get_their_types_again() -> None:
    assert typed_value(SPECS["num_epochs"], 7.0) == 7 and isinstance(
        typed_value(SPECS["num_epochs"], 7.0), int
    )
    assert typed_value(SPECS["minibatch_size"], 128.0) == 128
    assert isinstance(typed_value(SPECS["minibatch_size"], 128.0), int)
    assert typed_value(SPECS["activation"], "tanh") == "tanh"
    assert typed_value(SPECS["hiddens"], "[256, 256]") == [256, 256]
    assert typed_value(SPECS["lr"], 0.001) == 0.001
    assert typed_value(None, "anything") == "anything"


def test_steps_hold_every_value_at_every_change_point() -> None:
    stitched = {
        "lr": [(1, 0.001), (5, 0.0012), (9, 0.0006)],
        "num_epochs": [(1, 4.0), (9, 7.0)],
        "minibatch_size": [(1, 256.0), (5, 128.0)],
    }
    steps = replay_steps(stitched, SPECS)
    assert steps == [
        {"iteration": 1, "values": {"lr": 0.001, "minibatch_size": 256, "num_epochs": 4}},
        {"iteration": 5, "values": {"lr": 0.0012, "minibatch_size": 128, "num_epochs": 4}},
        {"iteration": 9, "values": {"lr": 0.0006, "minibatch_size": 128, "num_epochs": 7}},
    ]
    assert replay_steps({}, SPECS) == []


def _record(seq: int, source: str, target: str, restored: int, new: dict[str, Any]) -> Any:
    return LineageRecord.from_dict(
        {
            "seq": seq,
            "time": float(seq),
            "target": target,
            "source": source,
            "target_iteration": restored + 2,
            "source_iteration": restored,
            "restored_iteration": restored,
            "new": new,
        }
    )


def test_categories_follow_the_exploits_of_the_ancestry() -> None:
    # MLflow keeps a category only as the trial's first tag: the lineage has the rest.
    via = _record(0, "a", "b", 4, {"activation": "tanh", "lr": 0.002})
    segments = [Segment("a", "A", 1, 4), Segment("b", "B", 5, 8, via=via)]
    schedule = segment_schedule(segments, {"activation": "relu"}, ["activation"])
    assert schedule == {"activation": [(1, "relu"), (5, "tanh")]}


def test_the_replay_experiment_is_the_source_with_one_scheduled_trial(tmp_path: Path) -> None:
    source = yaml.safe_load(_experiment(tmp_path).read_text())
    source.update(
        {
            "scheduler": {"type": "pbt", "perturbation_interval": 2},
            "search_space": {"params": {"lr": {"loguniform": [1e-4, 1e-2]}}},
            "population": 4,
            "stop": {"return_mean": 400, "wall_time_s": 300},
            "tracking": {"experiment": "shared"},
        }
    )
    steps = [{"iteration": 1, "values": {"lr": 0.001}}, {"iteration": 5, "values": {"lr": 0.002}}]
    data = replay_experiment(source, steps, name="x-replay-PPO_00001", iterations=12)
    assert data["population"] == 1 and "search_space" not in data
    assert data["stop"] == {"iterations": 12, "wall_time_s": 300}
    assert data["tracking"] == {}
    path = tmp_path / "out.yaml"
    path.write_text(yaml.safe_dump(data))
    resolved = load_and_resolve(path)
    assert resolved.experiment.scheduler.type == "replay"
    assert resolved.results_dir.name == "x-replay-PPO_00001"


class _Trial(SimpleNamespace):
    def set_config(self, config: dict[str, Any]) -> None:
        self.config = config


def test_the_scheduler_pauses_a_trial_to_change_its_config() -> None:
    replay = ReplayScheduler([(1, {"lr": 0.1, "clip": 0.2}), (4, {"lr": 0.05})])
    controller = SimpleNamespace(_checkpoint_manager=None)
    trial = _Trial(
        trial_id="t_00000",
        config={"lr": 5e-5, "clip": 0.3, "seed": 7},
        latest_checkpoint_result=None,
    )
    replay.on_trial_add(controller, trial)
    assert trial.config == {"lr": 0.1, "clip": 0.2, "seed": 7}
    decisions = [
        replay.on_trial_result(controller, trial, {"training_iteration": i}) for i in (1, 2)
    ]
    assert decisions == [TrialScheduler.CONTINUE] * 2
    # After iteration 3 the values of iteration 4: Tune saves, pauses, restarts with them.
    assert replay.on_trial_result(controller, trial, {"training_iteration": 3}) == (
        TrialScheduler.PAUSE
    )
    assert trial.config == {"lr": 0.05, "clip": 0.2, "seed": 7}
    assert replay.on_trial_result(controller, trial, {"training_iteration": 4}) == (
        TrialScheduler.CONTINUE
    )
    # A trial Tune restores from its checkpoint of iteration 5 goes on with iteration 6's.
    restored = _Trial(
        trial_id="t_00001",
        config={"lr": 0.1, "clip": 0.2},
        latest_checkpoint_result=SimpleNamespace(metrics={"training_iteration": 5}),
    )
    replay.on_trial_add(controller, restored)
    assert restored.config == {"lr": 0.05, "clip": 0.2}
