"""The stop rules as a Tune Stopper (exact, no Ray)."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

from workbench.names import EVAL_RETURN_METRIC, RETURN_METRIC
from workbench.run import stopping
from workbench.run.stopping import RulesStopper


def _result(iteration: int, ret: float | None = None) -> dict:
    result: dict = {"training_iteration": iteration, "env_runners": {}}
    if ret is not None:
        result["env_runners"]["episode_return_mean"] = ret
    return result


def test_a_trial_stops_at_the_first_rule_met_and_missing_metrics_never_stop_it() -> None:
    stopper = RulesStopper({"training_iteration": 5, RETURN_METRIC: 475.0}, all_at_return=False)
    assert not stopper("a", _result(1))  # no episode ended yet: no return reported
    assert not stopper("a", _result(2, math.nan))
    assert not stopper("a", _result(4, 474.9))
    assert stopper("a", _result(5, 100.0))
    assert stopper("b", _result(2, 475.0))
    assert not stopper.stop_all()


def test_the_whole_population_stops_once_one_member_reaches_the_return() -> None:
    stopper = RulesStopper({RETURN_METRIC: 475.0, "time_total_s": 300}, all_at_return=True)
    assert not stopper("a", _result(3, 300.0)) and not stopper.stop_all()
    assert stopper("b", _result(7, 480.0))
    assert stopper.stop_all() and stopper.reached_by == "b"


def test_all_at_return_needs_a_return_rule() -> None:
    stopper = RulesStopper({"training_iteration": 2}, all_at_return=True)
    assert stopper("a", _result(2)) and not stopper.stop_all()


def test_numpy_float32_returns_count() -> None:
    # RLlib 2.60 reports episode_return_mean as numpy.float32 in many iterations.
    import numpy as np

    stopper = RulesStopper({RETURN_METRIC: -13.0}, all_at_return=True)
    assert stopper("a", _result(20, np.float32(-13.0)))
    assert stopper.stop_all()


def test_a_stopper_unpickled_where_its_population_runs_is_the_live_one(tmp_path: Path) -> None:
    # Tune puts the stopper of its snapshot in place of the run config's on resume.
    key = str(tmp_path / "pop")
    saved = RulesStopper({RETURN_METRIC: 100.0}, all_at_return=True, key=key)
    saved(trial_id="t0", result={"env_runners": {"episode_return_mean": 120.0}})
    snapshot = pickle.dumps(saved)
    fresh = RulesStopper({RETURN_METRIC: 100.0}, all_at_return=True, key=key)  # the resume's
    restored = pickle.loads(snapshot)
    assert restored is fresh
    assert fresh.stop_all() and fresh.reached_by == "t0"  # reached before: still reached
    # In a process where the population does not run, it is a copy, as before.
    stopping._LIVE.pop(key)
    copy = pickle.loads(snapshot)
    assert copy is not fresh and copy.reached_by == "t0" and copy.stop_all()


def test_a_return_target_is_met_by_the_confirming_evaluation_not_by_the_score() -> None:
    stopper = RulesStopper({EVAL_RETURN_METRIC: 475.0}, all_at_return=True)
    assert stopper.all_at_return
    high_score = {"training_iteration": 9, "score": {"return_mean": 490.0, "episodes": 20.0}}
    assert not stopper("a", high_score)  # no evaluation in this result: not reached
    refused = {**high_score, "eval": {"return_mean": 423.1, "return_std": 61.0, "episodes": 100.0}}
    assert not stopper("a", refused) and not stopper.stop_all()
    passed = {**high_score, "eval": {"return_mean": 500.0, "return_std": 0.0, "episodes": 100.0}}
    assert stopper("a", passed) and stopper.stop_all()
    assert stopper.reached[EVAL_RETURN_METRIC] == 500.0


def test_a_snapshot_from_before_the_score_still_unpickles(tmp_path: Path) -> None:
    # Snapshots pickled four arguments and ruled on the per-iteration mean.
    old = stopping._unpickle(str(tmp_path / "old"), {RETURN_METRIC: 100.0}, True, "t0")
    assert old.stop_all() and old.reached_by == "t0" and old.reached == {}
    stopping._LIVE.pop(str(tmp_path / "old"))


def _sampled(iteration: int, steps: float, lifetime: float) -> dict:
    return {
        "training_iteration": iteration,
        "num_env_steps_sampled_lifetime": lifetime,
        "env_runners": {"num_env_steps_sampled": steps, "num_env_steps_sampled_lifetime": lifetime},
    }


def test_an_env_step_budget_ends_the_population_on_what_its_trials_sampled(
    tmp_path: Path,
) -> None:
    key = str(tmp_path / "pop")
    stopper = RulesStopper({}, all_at_return=False, key=key, env_step_budget=1000)
    assert not stopper("a", _sampled(1, 300, 300)) and not stopper.stop_all()
    # b was exploited onto a's checkpoint: its lifetime count jumps, its sampling does not.
    assert not stopper("b", _sampled(1, 300, 600)) and not stopper.budget_spent()
    assert stopper.env_steps_spent == 600
    assert not stopper("b", _sampled(2, float("nan"), 600))  # no count: nothing spent
    # A resumed driver counts on from the snapshot's spend.
    snapshot = pickle.dumps(stopper)
    stopping._LIVE.pop(key)
    resumed = RulesStopper({}, all_at_return=False, key=key, env_step_budget=1000)
    assert pickle.loads(snapshot) is resumed and resumed.env_steps_spent == 600
    assert not resumed("a", _sampled(2, 399, 699)) and not resumed.stop_all()
    resumed("b", _sampled(2, 1, 601))
    assert resumed.budget_spent() and resumed.stop_all()
    assert not resumed.return_reached() and resumed.reached_by is None


def test_no_budget_no_count_stops_anything() -> None:
    stopper = RulesStopper({"training_iteration": 3}, all_at_return=False)
    for i in range(1, 50):
        stopper("a", _sampled(1, 10_000, 10_000 * i))
    assert not stopper.budget_spent() and not stopper.stop_all()


class _Trial:
    def __init__(self, trial_id: str, status: str) -> None:
        self.trial_id = trial_id
        self.status = status


def test_a_wall_time_budget_counts_every_session_and_names_the_trials_it_ended(
    tmp_path: Path, monkeypatch
) -> None:
    clock = [100.0]
    monkeypatch.setattr(stopping.time, "monotonic", lambda: clock[0])
    key = str(tmp_path / "pop")
    first = RulesStopper({}, all_at_return=False, key=key, wall_budget_s=60)
    assert not first.stop_all()  # the count starts at Tune's first check
    clock[0] += 32
    assert not first.stop_all() and first.wall_time_spent() == 32
    snapshot = pickle.dumps(first)  # the driver is interrupted here

    stopping._LIVE.pop(key)
    clock[0] += 500  # between the sessions: not counted
    resumed = RulesStopper({}, all_at_return=False, key=key, wall_budget_s=60)
    trials = [_Trial("a", "RUNNING"), _Trial("b", "PAUSED"), _Trial("c", "TERMINATED")]
    resumed.watch(trials)
    assert pickle.loads(snapshot) is resumed and resumed.wall_spent_before_s == 32
    assert not resumed.stop_all()
    clock[0] += 27
    assert not resumed.stop_all() and not resumed.wall_budget_ended()
    clock[0] += 1
    assert resumed.stop_all() and resumed.wall_budget_ended()
    assert resumed.ran_out == "wall_time" and resumed.budget_stopped == ["a", "b"]
    for trial in trials:  # Tune ends them; the record stays as it was
        trial.status = "TERMINATED"
    assert resumed.stop_all() and resumed.budget_stopped == ["a", "b"]

    # `resume --set stop.wall_time_s=90`: the new budget, the time spent so far.
    snapshot = pickle.dumps(resumed)
    stopping._LIVE.pop(key)
    larger = RulesStopper({}, all_at_return=False, key=key, wall_budget_s=90)
    assert pickle.loads(snapshot) is larger
    assert larger.wall_budget_s == 90 and larger.wall_spent_before_s == 60
    assert larger.budget_stopped == ["a", "b"]  # until this session's budget runs out
    assert not larger.stop_all() and larger.ran_out is None


def test_time_after_the_loop_does_not_make_an_interrupted_run_one_its_budget_ended(
    monkeypatch,
) -> None:
    clock = [0.0]
    monkeypatch.setattr(stopping.time, "monotonic", lambda: clock[0])
    stopper = RulesStopper({}, all_at_return=False, wall_budget_s=10)
    assert not stopper.stop_all()
    clock[0] += 60  # Tune's loop ended on a signal; the driver saves and evaluates
    assert stopper.wall_budget_spent() and not stopper.wall_budget_ended()
