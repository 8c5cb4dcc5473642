"""A budget that ended a population, and a resume that extends it (exact, no Ray)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from workbench.errors import ExperimentError
from workbench.names import BUDGET_FILE, RESOLVED_FILE
from workbench.run.budget import (
    BudgetRanOut,
    clear_ran_out,
    finished_note,
    overridden_stop_keys,
    read_ran_out,
    save_stop_rules,
    trials_to_reopen,
    write_ran_out,
)
from workbench.run.results_folder import population_statuses
from workbench.tune_ext.ray_private import forget_in_flight_decisions, reopen_trials

RAN_OUT = BudgetRanOut(budget="wall_time", limit=60, spent=61.4, trials=["t_0", "t_1"])
ENDED = {"t_0": "TERMINATED", "t_1": "TERMINATED", "t_2": "TERMINATED"}


def _stop(**rules: float | None) -> SimpleNamespace:
    return SimpleNamespace(**{"wall_time_s": 60.0, "population_env_steps": None, **rules})


def test_a_larger_budget_reopens_the_trials_the_budget_ended(tmp_path: Path) -> None:
    write_ran_out(tmp_path, RAN_OUT)
    assert read_ran_out(tmp_path) == RAN_OUT
    changed = {"stop.wall_time_s"}
    larger = trials_to_reopen(tmp_path, _stop(wall_time_s=120), changed, ENDED, "f.yaml")
    assert larger == ["t_0", "t_1"]  # t_2 ended on its own rules
    unbounded = trials_to_reopen(tmp_path, _stop(wall_time_s=None), changed, ENDED, "f.yaml")
    assert unbounded == ["t_0", "t_1"]
    # Only trials still ended: one a resume has reopened already is not listed again.
    assert trials_to_reopen(tmp_path, _stop(wall_time_s=120), changed, {"t_1": "PAUSED"}, "f") == []


def test_a_budget_that_does_not_extend_is_refused_naming_the_field(tmp_path: Path) -> None:
    write_ran_out(tmp_path, RAN_OUT)
    with pytest.raises(ExperimentError) as err:
        trials_to_reopen(tmp_path, _stop(wall_time_s=61), {"stop.wall_time_s"}, ENDED, "f.yaml")
    message = str(err.value)
    assert "f.yaml" in message and "stop.wall_time_s" in message
    assert "61 does not extend" in message and "more than 61" in message
    # Another stop rule changed: the budget stays spent, nothing reopens, nothing refused.
    other = trials_to_reopen(tmp_path, _stop(), {"stop.iterations"}, ENDED, "f.yaml")
    assert other == []


def test_without_a_record_nothing_reopens_and_a_damaged_one_counts_as_none(
    tmp_path: Path,
) -> None:
    assert trials_to_reopen(tmp_path, _stop(wall_time_s=None), set(), ENDED, "f") == []
    (tmp_path / BUDGET_FILE).write_text("{not json")
    assert read_ran_out(tmp_path) is None and finished_note(tmp_path) == ""
    write_ran_out(tmp_path, RAN_OUT)
    assert "--set stop.wall_time_s=N` with N above 61" in finished_note(tmp_path)
    clear_ran_out(tmp_path)
    assert not (tmp_path / BUDGET_FILE).exists()


def test_a_resume_changes_only_stop_rules() -> None:
    keys = ["stop.wall_time_s=600", "stop.iterations = 40"]
    assert overridden_stop_keys(keys, "f.yaml") == {"stop.wall_time_s", "stop.iterations"}
    with pytest.raises(ExperimentError) as err:
        overridden_stop_keys(["population=8", "stop=1", "stop.wall_time_s=9"], "f.yaml")
    assert [p.field for p in err.value.problems] == ["population", "stop"]
    assert "changes only the stop rules" in str(err.value)


def test_the_saved_experiment_takes_the_new_stop_rules_and_keeps_its_header(
    tmp_path: Path,
) -> None:
    saved = tmp_path / RESOLVED_FILE
    saved.write_text("# header\n# two\nname: pop\nstop:\n  wall_time_s: 60.0\npopulation: 4\n")
    save_stop_rules(tmp_path, {"wall_time_s": 120.0, "iterations": None})
    text = saved.read_text()
    assert text.startswith("# header\n# two\n")
    assert "wall_time_s: 120.0" in text and "population: 4" in text


def test_reopened_trials_are_paused_in_tunes_snapshot(tmp_path: Path) -> None:
    trial_data = [
        [json.dumps({"trial_id": t, "status": s, "config": {"lr": 0.1}}), "{}"]
        for t, s in ENDED.items()
    ]
    (tmp_path / "experiment_state-2026-12-02_10-00-00.json").write_text(
        json.dumps({"trial_data": trial_data, "runner_data": {}})
    )
    reopen_trials(tmp_path, {"t_0", "t_2"})
    assert population_statuses(tmp_path) == {
        "t_0": "PAUSED",
        "t_1": "TERMINATED",
        "t_2": "PAUSED",
    }


def test_a_resume_forgets_the_decisions_tune_held_for_saves_in_flight(tmp_path: Path) -> None:
    # Seen in CI (tests/integration/test_interrupts.py): the wall-time budget ran out while
    # both trials were saving, Tune cached a STOP for each, and its snapshot kept them; a
    # resume with a larger budget reopened the trials and each ended after one iteration,
    # when its first save resolved. Ray's own state, as Tune 2.60 snapshots it:
    from ray.tune.execution.tune_controller import TuneController

    controller = TuneController.__new__(TuneController)
    controller.__dict__.update(
        {
            "_cached_trial_decisions": {"t_0": "STOP", "t_1": "STOP"},
            "_queued_trial_decisions": {"t_2": "PAUSE"},
        }
    )
    while True:  # the attributes __getstate__ deletes, as no more than placeholders
        try:
            runner_data = controller.__getstate__()
            break
        except KeyError as missing:
            controller.__dict__[missing.args[0]] = None
    assert runner_data["_cached_trial_decisions"] == {"t_0": "STOP", "t_1": "STOP"}

    trial_data = [
        [json.dumps({"trial_id": t, "status": s, "config": {"lr": 0.1}}), "{}"]
        for t, s in ENDED.items()
    ]
    state = tmp_path / "experiment_state-2026-12-02_10-00-00.json"
    state.write_text(json.dumps({"trial_data": trial_data, "runner_data": runner_data}))
    assert forget_in_flight_decisions(tmp_path) == ["t_0", "t_1", "t_2"]
    saved = json.loads(state.read_text())
    assert saved["runner_data"]["_cached_trial_decisions"] == {}
    assert saved["runner_data"]["_queued_trial_decisions"] == {}
    assert saved["trial_data"] == trial_data  # the rest as it was
    assert forget_in_flight_decisions(tmp_path) == []  # nothing held: the file untouched
