"""The MLflow tracker against a real sqlite store, driven the way Tune drives it (no Ray).

Each test shows one way Ray's MLflowLoggerCallback fails users and the tracker's fix:
params that PBT changes, duplicate runs after a restore, one call per metric, a store
that goes away mid-run.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.tracking import MlflowClient

from tests.support.stores import seed_store
from tests.support.trials import FakeTrial
from workbench.analysis.lineage import check_sequence
from workbench.analysis.population_plots import render_population_pngs
from workbench.lineage_record import ExploitDecision, LineageRecord
from workbench.names import LINEAGE_FILE, LINEAGE_ROLLED_BACK_FILE, SPOOL_FILE, STOPPED_BY_TAG
from workbench.tracking.callback import MlflowTracker, TrackingTarget
from workbench.tracking.metrics import metric_filter, numeric_metrics
from workbench.tracking.writer import Result, op_from_json, op_to_json


class Flaky:
    """An MlflowClient whose store can go down or refuse chosen calls; counts calls."""

    def __init__(self, real: MlflowClient) -> None:
        self.real = real
        self.down = False
        self.refuse: Callable[[str, tuple[Any, ...], dict[str, Any]], bool] | None = None
        self.fail_when: Callable[[str], bool] | None = None
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.real, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if self.down or (self.fail_when is not None and self.fail_when(name)):
                raise ConnectionError("connection refused (the test took the store down)")
            if self.refuse is not None and self.refuse(name, args, kwargs):
                raise MlflowException(
                    "invalid value (the test)", error_code=INVALID_PARAMETER_VALUE
                )
            return attr(*args, **kwargs)

        return call


def _target(tmp_path: Path, **kw: Any) -> TrackingTarget:
    seed_store(tmp_path / "mlflow.db")
    return TrackingTarget(
        uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
        experiment="exp",
        population="pop",
        key=str(tmp_path / "pop"),
        results_dir=tmp_path / "pop",
        artifact_root=tmp_path / "mlartifacts",
        hyperparameters={"lr": "lr", "_train_batch_size_per_learner": "batch", "act": "act"},
        # The launcher hands the tracker the renderer of the population's PNGs.
        render_plots=render_population_pngs,
        **kw,
    )


def _tracker(tmp_path: Path, events: list[str], **kw: Any) -> tuple[MlflowTracker, Flaky]:
    tracker = MlflowTracker(_target(tmp_path, **kw), on_event=events.append)
    flaky = Flaky(MlflowClient(tracker.target.uri))
    tracker.writer._client = flaky
    return tracker, flaky


def _result(iteration: int, config: dict[str, Any], ret: float = 10.0) -> dict[str, Any]:
    return {
        "training_iteration": iteration,
        "num_env_steps_sampled_lifetime": 100 * iteration,
        "env_runners": {"episode_return_mean": np.float32(ret), "episode_len_mean": ret},
        "learners": {"default_policy": {"vf_loss": 0.5, "not_curated": 1.0}},
        "timers": {"training_iteration": 0.1},
        "config": dict(config),
        "pid": 1234,
        "done": False,
    }


def _runs(uri: str) -> dict[str, Any]:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("exp")
    return {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}


def _history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, key))


def _end(tracker: MlflowTracker, trials: list[FakeTrial]) -> None:
    for trial in trials:
        trial.status = "TERMINATED"
        tracker.on_trial_complete(0, trials, trial)
    tracker.on_experiment_end(trials)


CONFIG = {"lr": 0.001, "_train_batch_size_per_learner": 256, "act": "relu", "gamma": 0.99}


def test_curated_metrics_keep_what_people_read() -> None:
    curated = metric_filter("curated")
    for key in (
        "env_runners/episode_return_mean",
        "learners/default_policy/vf_loss",
        "timers/learner_update_timer",
        "num_env_steps_sampled_lifetime",
    ):
        assert curated(key), key
    for key in ("pid", "timestamp", "config/lr", "learners/default_policy/not_curated"):
        assert not curated(key), key
    assert metric_filter("all")("learners/default_policy/not_curated")
    assert not metric_filter("all")("config/lr")
    mine = metric_filter(["learners/*/vf_loss"])
    assert mine("learners/p/vf_loss") and mine("training_iteration")
    assert not mine("env_runners/episode_return_mean")
    metrics = numeric_metrics(_result(3, CONFIG), curated)
    # numpy.float32 (as RLlib reports many means) is a number; bools and strings are not.
    assert metrics["env_runners/episode_return_mean"] == 10.0
    assert "done" not in metrics and "config/act" not in metrics
    assert numeric_metrics({"custom": {"x#y": 1.0}}, metric_filter("all")) == {"custom/x_y": 1.0}


def test_ops_round_trip_through_the_spool_format() -> None:
    op = Result("t_00001", {"a": 1.5}, 123)
    assert op_from_json(op_to_json(op)) == op


def test_one_parent_one_child_per_trial_hp_schedule_as_metrics_one_call_per_result(
    tmp_path: Path,
) -> None:
    events: list[str] = []
    tracker, flaky = _tracker(tmp_path, events)
    tracker.setup()
    trials = [FakeTrial(f"abc_{i:05d}", dict(CONFIG, lr=0.001 * (i + 1))) for i in range(2)]
    for trial in trials:
        tracker.on_trial_start(0, trials, trial)
    for it in range(1, 6):
        for trial in trials:
            config = dict(trial.config)
            if trial is trials[0] and it >= 3:
                config["lr"] = 0.005  # as if PBT had changed it
            tracker.on_trial_result(it, trials, trial, _result(it, config, ret=it))
    assert tracker.writer.flush(30)
    batches_for_results = flaky.calls["log_batch"]
    _end(tracker, trials)

    runs = _runs(tracker.target.uri)
    assert sorted(runs) == ["PPO_00000", "PPO_00001", "pop"]
    parent = runs["pop"]
    assert parent.info.status == "FINISHED"
    for name in ("PPO_00000", "PPO_00001"):
        child = runs[name]
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.info.status == "FINISHED"
        steps = [
            s for s, _ in _history(tracker.target.uri, child.info.run_id, "training_iteration")
        ]
        assert steps == [1, 2, 3, 4, 5]
    child0 = runs["PPO_00000"]
    # Initial values are params (immutable); the schedule is a metric; the values the
    # final policy trained with are final/* params once the trial is done.
    assert child0.data.params["lr"] == "0.001"
    assert child0.data.params["final/lr"] == "0.005"
    assert runs["PPO_00001"].data.params["final/lr"] == "0.002"
    assert child0.data.params["final/batch"] == "256"
    assert child0.data.params["batch"] == "256"
    assert child0.data.tags["hp/act"] == "relu"  # categorical: a tag, not a metric
    assert _history(tracker.target.uri, child0.info.run_id, "hp/lr") == [
        (1, 0.001),
        (2, 0.001),
        (3, 0.005),
        (4, 0.005),
        (5, 0.005),
    ]
    assert "learners/default_policy/not_curated" not in child0.data.metrics
    # 10 results (plus 2 param batches) in at most that many calls: never one per metric.
    assert batches_for_results <= 12
    assert not events
    # The population's artifacts: the plots exist even without exploits.
    client = MlflowClient(tracker.target.uri)
    names = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"learning_curves.png", "lineage.png"} <= names


def test_an_exploit_becomes_a_lineage_record_at_the_right_step(tmp_path: Path) -> None:
    tracker, _ = _tracker(tmp_path, [])
    tracker.setup()
    a, b = FakeTrial("abc_00000", dict(CONFIG)), FakeTrial("abc_00001", dict(CONFIG, lr=0.01))
    trials = [a, b]
    for trial in trials:
        tracker.on_trial_start(0, trials, trial)
    for it in (1, 2, 3, 4):
        tracker.on_trial_result(it, trials, b, _result(it, b.config))
    for it in (1, 2, 3):
        tracker.on_trial_result(it, trials, a, _result(it, a.config))
    # Asynchronous PBT: the scheduler decides on a's 4th result (before the callback
    # sees it) that a continues from b's checkpoint of iteration 4 with lr 0.012.
    tracker.on_exploit(_exploit(a.trial_id, b.trial_id, 4, 1.0))
    tracker.on_trial_result(4, trials, a, _result(4, a.config))
    a.config = dict(a.config, lr=0.012)
    tracker.on_trial_result(5, trials, a, _result(5, a.config))
    tracker.on_trial_result(6, trials, a, _result(6, a.config))
    _end(tracker, trials)

    records = [json.loads(x) for x in (tmp_path / "pop" / LINEAGE_FILE).read_text().splitlines()]
    assert len(records) == 1
    record = records[0]
    assert (record["seq"], record["target_name"], record["source_name"]) == (
        0,
        "PPO_00000",
        "PPO_00001",
    )
    # Step 4 was the last result trained with the old value; a went on from b's 4th.
    assert record["step"] == 4
    assert record["restored_iteration"] == 4
    assert record["old"] == {"lr": 0.001} and record["new"] == {"lr": 0.012}
    runs = _runs(tracker.target.uri)
    lr = _history(tracker.target.uri, runs["PPO_00000"].info.run_id, "hp/lr")
    changes = [s for (s, v), (_, prev) in zip(lr[1:], lr, strict=False) if v != prev]
    assert changes == [record["step"] + 1]
    assert runs["PPO_00000"].data.tags["workbench.cloned_from"] == "PPO_00001"
    client = MlflowClient(tracker.target.uri)
    names = {x.path for x in client.list_artifacts(runs["pop"].info.run_id)}
    assert {LINEAGE_FILE, "lineage.png", "best_schedule.png"} <= names


def _exploit(target: str, source: str, at: int, time: float) -> ExploitDecision:
    return ExploitDecision(
        time=time,
        target=target,
        source=source,
        target_iteration=at - 1,
        source_iteration=at,
        exploit_iteration=at,
        decided_on_own_result=True,
        old={"lr": 0.001},
        donor={"lr": 0.01},
        new={"lr": 0.012},
    )


def _two_trials_two_results(tracker: MlflowTracker) -> tuple[FakeTrial, FakeTrial, list[FakeTrial]]:
    """Trials a and b (b with the larger lr) started, with two results each."""
    a, b = FakeTrial("abc_00000", dict(CONFIG)), FakeTrial("abc_00001", dict(CONFIG, lr=0.01))
    trials = [a, b]
    for trial in trials:
        tracker.on_trial_start(0, trials, trial)
    for it in (1, 2):
        tracker.on_trial_result(it, trials, a, _result(it, a.config))
        tracker.on_trial_result(it, trials, b, _result(it, b.config))
    return a, b, trials


def test_an_exploit_pending_at_a_kill_is_written_after_the_resume_without_gaps(
    tmp_path: Path,
) -> None:
    # Seen in the killed-driver drill: exploit 0 (of a) waited for a's restart, exploit 1 (of b)
    # was written, the driver was killed; the resumed driver numbered on from the file's
    # line count and gave 1 again, and 0 never came: "seq 0 missing, seq 1 appears 2
    # times". Exploit 0 is now in the snapshot, and written once a restarts.
    tracker, _ = _tracker(tmp_path, [])
    tracker.setup()
    a, b, trials = _two_trials_two_results(tracker)
    tracker.on_exploit(_exploit(a.trial_id, b.trial_id, 3, 1.0))  # on a's 3rd result
    tracker.on_trial_result(3, trials, a, _result(3, a.config))
    tracker.on_exploit(_exploit(b.trial_id, a.trial_id, 3, 2.0))
    tracker.on_trial_result(3, trials, b, _result(3, b.config))
    snapshot = tracker.get_state()  # Tune's experiment snapshot: both pending
    tracker.on_trial_result(4, trials, b, _result(4, b.config))  # b restarted: 1 written
    assert tracker.writer.flush(timeout_s=10)
    lineage = tmp_path / "pop" / LINEAGE_FILE
    assert [json.loads(x)["seq"] for x in lineage.read_text().splitlines()] == [1]

    # The driver is killed; the resumed one gets the snapshot.
    again, _ = _tracker(tmp_path, [])
    again.set_state(snapshot)
    again.setup()
    for trial in trials:
        again.on_trial_start(0, trials, trial)
    again.on_trial_result(4, trials, a, _result(4, a.config))  # a restarted from b's
    again.on_exploit(_exploit(a.trial_id, b.trial_id, 6, 3.0))
    again.on_trial_result(6, trials, a, _result(6, a.config))
    again.on_trial_result(7, trials, a, _result(7, a.config))
    _end(again, trials)

    records = [json.loads(x) for x in lineage.read_text().splitlines()]
    assert [(r["target"], r["time"]) for r in records] == [
        (b.trial_id, 2.0),
        (a.trial_id, 1.0),
        (a.trial_id, 3.0),
    ]
    assert [r["seq"] for r in records] == [1, 0, 2]  # b's exploit is not written twice
    assert check_sequence(LineageRecord.from_dict(r) for r in records) == []
    assert records[1]["restored_iteration"] == 3


def test_an_exploit_queued_but_not_yet_in_the_file_at_a_kill_is_in_the_snapshot(
    tmp_path: Path,
) -> None:
    # Seen in the killed-driver drill: exploit 0 was handed to the writer (its target had
    # restarted), the snapshot no longer counted it pending, and the driver was killed
    # before the writer's thread appended it: the lineage began at seq 1.
    tracker, _ = _tracker(tmp_path, [])  # its writer never runs: nothing reaches the file
    a, b = FakeTrial("abc_00000", dict(CONFIG)), FakeTrial("abc_00001", dict(CONFIG, lr=0.01))
    trials = [a, b]
    for trial in trials:
        tracker.on_trial_start(0, trials, trial)
    tracker.on_trial_result(1, trials, a, _result(1, a.config))
    tracker.on_exploit(_exploit(a.trial_id, b.trial_id, 2, 1.0))
    tracker.on_trial_result(2, trials, a, _result(2, a.config))
    tracker.on_trial_result(3, trials, a, _result(3, a.config))  # restarted: queued
    snapshot = tracker.get_state()
    assert [r["seq"] for r in snapshot["pending"][a.trial_id]] == [0]

    again, _ = _tracker(tmp_path, [])
    again.set_state(snapshot)
    again.setup()
    for trial in trials:
        again.on_trial_start(0, trials, trial)
    again.on_trial_result(3, trials, a, _result(3, a.config))
    _end(again, trials)
    records = [json.loads(x) for x in (tmp_path / "pop" / LINEAGE_FILE).read_text().splitlines()]
    assert [(r["seq"], r["time"], r["restored_iteration"]) for r in records] == [(0, 1.0, 2)]


def test_a_donor_this_driver_never_started_is_named_by_the_scheduler_s_record(
    tmp_path: Path,
) -> None:
    # Seen in the killed-driver drill: after a resume the donor had finished before the kill, so
    # this driver never saw it start, and the record named it by its id (ec3d9_00001).
    # ExploitRecorder names both trials from the objects it holds; the tracker keeps
    # those names when it has none of its own.
    tracker, _ = _tracker(tmp_path, [])
    tracker.setup()
    a, b = FakeTrial("abc_00000", dict(CONFIG)), FakeTrial("abc_00001", dict(CONFIG, lr=0.01))
    tracker.on_trial_start(0, [a, b], a)  # b finished before the kill: never started here
    tracker.on_trial_result(1, [a, b], a, _result(1, a.config))
    record = _exploit(a.trial_id, b.trial_id, 2, 1.0)
    tracker.on_exploit(
        dataclasses.replace(record, target_name="PPO_00000", source_name="PPO_00001")
    )
    tracker.on_trial_result(2, [a, b], a, _result(2, a.config))
    tracker.on_trial_result(3, [a, b], a, _result(3, a.config))
    _end(tracker, [a])
    (line,) = (tmp_path / "pop" / LINEAGE_FILE).read_text().splitlines()
    written = json.loads(line)
    assert (written["target_name"], written["source_name"]) == ("PPO_00000", "PPO_00001")


def test_exploits_decided_after_the_last_snapshot_are_rolled_back_with_it(
    tmp_path: Path,
) -> None:
    # Seen in CI (the killed-driver test): exploit 1 (of a) waited for a's restart,
    # exploit 2 (of b) was written, and the driver was killed before Tune snapshotted
    # either. The resumed trials restart from the snapshot, from before both: the file
    # kept 2, lost 1, and check_sequence said "seq 1 missing".
    tracker, _ = _tracker(tmp_path, [])
    tracker.setup()
    a, b, trials = _two_trials_two_results(tracker)
    tracker.on_exploit(_exploit(a.trial_id, b.trial_id, 3, 1.0))  # exploit 0, on a's 3rd
    tracker.on_trial_result(3, trials, a, _result(3, a.config))
    tracker.on_trial_result(4, trials, a, _result(4, a.config))  # a restarted: 0 written
    assert tracker.writer.flush(timeout_s=10)
    snapshot = tracker.get_state()  # Tune's last snapshot: exploit 0 is history
    assert snapshot["next_seq"] == 1 and not snapshot["pending"]
    tracker.on_exploit(_exploit(a.trial_id, b.trial_id, 5, 2.0))  # 1, on a's 5th
    tracker.on_trial_result(5, trials, a, _result(5, a.config))  # a has not restarted yet
    tracker.on_exploit(_exploit(b.trial_id, a.trial_id, 3, 3.0))  # 2, on b's 3rd
    tracker.on_trial_result(3, trials, b, _result(3, b.config))
    tracker.on_trial_result(4, trials, b, _result(4, b.config))  # b restarted: 2 written
    assert tracker.writer.flush(timeout_s=10)
    lineage = tmp_path / "pop" / LINEAGE_FILE
    assert [json.loads(x)["seq"] for x in lineage.read_text().splitlines()] == [0, 2]

    # Killed; the resumed driver gets the snapshot, and its trials restart from it.
    events: list[str] = []
    again, _ = _tracker(tmp_path, [])
    again._on_event = events.append
    again.set_state(snapshot)
    again.setup()
    assert [json.loads(x)["seq"] for x in lineage.read_text().splitlines()] == [0]
    rolled_back = (tmp_path / "pop" / LINEAGE_ROLLED_BACK_FILE).read_text().splitlines()
    assert [(json.loads(x)["seq"], json.loads(x)["time"]) for x in rolled_back] == [(2, 3.0)]
    assert any("1 exploit(s) decided after the last snapshot" in e for e in events), events
    for trial in trials:
        again.on_trial_start(0, trials, trial)
    again.on_trial_result(5, trials, a, _result(5, a.config))  # from the snapshot's 4
    again.on_exploit(_exploit(b.trial_id, a.trial_id, 3, 4.0))  # decided anew, as 1
    again.on_trial_result(3, trials, b, _result(3, b.config))
    again.on_trial_result(4, trials, b, _result(4, b.config))
    _end(again, trials)

    records = [LineageRecord.from_dict(json.loads(x)) for x in lineage.read_text().splitlines()]
    assert [(r.seq, r.time) for r in records] == [(0, 1.0), (1, 4.0)]
    assert check_sequence(records) == []
    # The parent run's copy of the lineage is the rolled-back one, beside what left it.
    runs = _runs(again.target.uri)
    names = {x.path for x in MlflowClient(again.target.uri).list_artifacts(runs["pop"].info.run_id)}
    assert {LINEAGE_FILE, LINEAGE_ROLLED_BACK_FILE} <= names


@pytest.mark.parametrize("with_state", [True, False], ids=["callback-state", "state-lost"])
def test_a_restored_population_continues_the_same_runs(tmp_path: Path, with_state: bool) -> None:
    tracker, _ = _tracker(tmp_path, [])
    tracker.setup()
    trial = FakeTrial("abc_00000", dict(CONFIG))
    tracker.on_trial_start(0, [trial], trial)
    for it in (1, 2, 3):
        tracker.on_trial_result(it, [trial], trial, _result(it, trial.config))
    state = tracker.get_state()
    tracker.on_experiment_end([trial])  # interrupted: the trial is still RUNNING
    before = _runs(tracker.target.uri)
    assert before["PPO_00000"].info.status == "KILLED"
    assert before["pop"].info.status == "KILLED"

    # The resumed driver: a new tracker; Tune hands it the saved state (or not, when
    # the driver died before its last snapshot: the runs are found by their key tag).
    again, _ = _tracker(tmp_path, [])
    if with_state:
        again.set_state(state)
    again.setup()
    again.on_trial_start(0, [trial], trial)
    # Resumed from the checkpoint of iteration 2: iteration 3 comes again.
    for it in (3, 4):
        again.on_trial_result(it, [trial], trial, _result(it, trial.config))
    _end(again, [trial])

    after = _runs(tracker.target.uri)
    assert {k: r.info.run_id for k, r in after.items()} == {
        k: r.info.run_id for k, r in before.items()
    }
    assert all(r.info.status == "FINISHED" for r in after.values())
    history = _history(tracker.target.uri, after["PPO_00000"].info.run_id, "training_iteration")
    assert [s for s, _ in history] == [1, 2, 3, 4, 5]  # steps only grow
    assert [v for _, v in history] == [1, 2, 3, 3, 4]  # the iterations as Tune reported them


def test_a_budget_that_ends_a_resume_before_a_trial_restarts_finishes_its_run(
    tmp_path: Path,
) -> None:
    """Tune calls on_trial_start only once a trial's actor has started: a wall-time
    budget that runs out while the resumed trials' actors start stops them with no
    callback of their own. Their runs, KILLED by the interrupted session, end FINISHED
    by the rule; a run an earlier session finished keeps its status and tags."""
    tracker, _ = _tracker(tmp_path, [])
    tracker.setup()
    done = FakeTrial("abc_00000", dict(CONFIG))
    cut = FakeTrial("abc_00001", dict(CONFIG, lr=0.002))
    for trial in (done, cut):
        tracker.on_trial_start(0, [done, cut], trial)
        tracker.on_trial_result(1, [done, cut], trial, _result(1, trial.config))
    done.status = "TERMINATED"
    tracker.on_trial_complete(1, [done, cut], done)
    state = tracker.get_state()
    tracker.on_experiment_end([done, cut])  # Ctrl-C: `cut` is KILLED
    before = _runs(tracker.target.uri)
    assert before["PPO_00001"].info.status == "KILLED"
    finished_at = before["PPO_00000"].info.end_time

    class Budget:
        def wall_budget_ended(self) -> bool:
            return True

    again, _ = _tracker(tmp_path, [])
    again.set_state(state)
    again.stopper = Budget()
    again.setup()
    cut.status = "TERMINATED"  # Tune's stop, before its actor started
    again.on_experiment_end([done, cut])

    after = _runs(tracker.target.uri)
    assert {k: r.info.status for k, r in after.items()} == {
        "pop": "FINISHED",
        "PPO_00000": "FINISHED",
        "PPO_00001": "FINISHED",
    }
    assert after["PPO_00001"].data.tags[STOPPED_BY_TAG] == "the experiment's wall-clock budget"
    assert after["PPO_00001"].data.params["final/lr"] == "0.002"
    assert STOPPED_BY_TAG not in after["PPO_00000"].data.tags
    assert after["PPO_00000"].info.end_time == finished_at


def test_an_outage_buffers_results_and_writes_them_when_the_store_answers(
    tmp_path: Path,
) -> None:
    events: list[str] = []
    tracker, flaky = _tracker(tmp_path, events)
    tracker.writer.max_backoff_s = 0.2
    tracker.setup()
    trial = FakeTrial("abc_00000", dict(CONFIG))
    tracker.on_trial_start(0, [trial], trial)
    tracker.on_trial_result(1, [trial], trial, _result(1, trial.config))
    assert tracker.writer.flush(30)
    flaky.down = True
    for it in range(2, 8):
        tracker.on_trial_result(it, [trial], trial, _result(it, trial.config))
    assert not tracker.writer.flush(1.0)  # nothing can be written now
    assert tracker.writer.pending() > 0
    assert len(events) == 1 and "not answering" in events[0]
    flaky.down = False
    assert tracker.writer.flush(30)
    assert "answers again" in events[-1]
    _end(tracker, [trial])
    run = _runs(tracker.target.uri)["PPO_00000"]
    history = _history(tracker.target.uri, run.info.run_id, "training_iteration")
    assert history == [(s, float(s)) for s in range(1, 8)]  # all of them, once each


def test_a_refused_write_is_dropped_without_blocking_the_rest(tmp_path: Path) -> None:
    tracker, flaky = _tracker(tmp_path, [], metrics="all")
    tracker.setup()
    trial = FakeTrial("abc_00000", dict(CONFIG))
    tracker.on_trial_start(0, [trial], trial)
    assert tracker.writer.flush(30)

    def poisoned(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        return name == "log_batch" and any(m.key == "poison" for m in kwargs.get("metrics") or [])

    flaky.refuse = poisoned
    for it in (1, 2, 3):
        result = _result(it, trial.config)
        if it == 2:
            result["poison"] = 1.0
        tracker.on_trial_result(it, [trial], trial, result)
    assert tracker.writer.flush(30)
    _end(tracker, [trial])
    run = _runs(tracker.target.uri)["PPO_00000"]
    assert run.info.status == "FINISHED"
    values = [v for _, v in _history(tracker.target.uri, run.info.run_id, "training_iteration")]
    assert values == [1.0, 3.0]


def test_a_store_down_at_the_end_spools_and_the_next_run_writes_it(tmp_path: Path) -> None:
    events: list[str] = []
    tracker, flaky = _tracker(tmp_path, events, flush_timeout_s=1.0)
    flaky.down = True
    tracker.setup()
    trial = FakeTrial("abc_00000", dict(CONFIG))
    tracker.on_trial_start(0, [trial], trial)
    for it in (1, 2, 3):
        tracker.on_trial_result(it, [trial], trial, _result(it, trial.config))
    _end(tracker, [trial])
    spool = tmp_path / "pop" / SPOOL_FILE
    assert spool.exists()
    assert "saved to" in events[-1]

    again, _ = _tracker(tmp_path, events)
    again.setup()  # the resume: writes the spool first
    assert not spool.exists()
    again.finish("FINISHED")
    run = _runs(tracker.target.uri)["PPO_00000"]
    assert run.info.status == "FINISHED"
    steps = [s for s, _ in _history(tracker.target.uri, run.info.run_id, "training_iteration")]
    assert steps == [1, 2, 3]


def test_the_tracker_pickles_without_its_thread(tmp_path: Path) -> None:
    import pickle

    tracker, _ = _tracker(tmp_path, [])
    tracker.setup()
    copy = pickle.loads(pickle.dumps(tracker))
    assert copy._writer is None
    assert copy.target == tracker.target
    tracker.finish("FINISHED")


def test_a_failure_halfway_through_a_merged_write_duplicates_nothing(tmp_path: Path) -> None:
    tracker, flaky = _tracker(tmp_path, [])
    tracker.setup()
    a, b = FakeTrial("abc_00000", dict(CONFIG)), FakeTrial("abc_00001", dict(CONFIG))
    for trial in (a, b):
        tracker.on_trial_start(0, [a, b], trial)
    assert tracker.writer.flush(30)
    ops = [
        Result(a.trial_id, {"training_iteration": 1.0}, 1),
        Result(b.trial_id, {"training_iteration": 1.0}, 1),
        Result(a.trial_id, {"training_iteration": 2.0}, 2),
    ]
    batches = {"n": 0}

    def second_batch(name: str) -> bool:  # a's batch goes through, b's fails once
        if name != "log_batch":
            return False
        batches["n"] += 1
        return batches["n"] == 2

    flaky.fail_when = second_batch
    left, err = tracker.writer._apply(list(ops))
    assert isinstance(err, ConnectionError)
    assert left == [ops[1]]  # a's two results are in the store: not retried
    left, err = tracker.writer._apply(left)
    assert (left, err) == ([], None)
    tracker.finish("FINISHED")
    runs = _runs(tracker.target.uri)
    uri = tracker.target.uri
    assert _history(uri, runs["PPO_00000"].info.run_id, "training_iteration") == [
        (1, 1.0),
        (2, 2.0),
    ]
    assert _history(uri, runs["PPO_00001"].info.run_id, "training_iteration") == [(1, 1.0)]


def test_retried_and_final_failures_are_on_the_run(tmp_path: Path) -> None:
    tracker, _ = _tracker(tmp_path, [])
    tracker.setup()
    trials = [FakeTrial(f"abc_{i:05d}", dict(CONFIG)) for i in range(2)]
    for trial in trials:
        tracker.on_trial_start(0, trials, trial)
        tracker.on_trial_result(1, trials, trial, _result(1, trial.config))
    error = tmp_path / "error.txt"
    # Trial 0 fails twice and Tune retries it (failure.max_failures) ...
    for failures in (1, 2):
        error.write_text(f"RuntimeError: injected fault number {failures}")
        retried = trials[0]
        retried.num_failures, retried.error_file = failures, str(error)
        tracker.on_trial_recover(1, trials, retried)
        tracker.on_trial_start(1, trials, retried)
    tracker.on_trial_result(2, trials, trials[0], _result(2, trials[0].config))
    # ... trial 1 fails for good.
    trials[1].num_failures, trials[1].error_file = 1, str(error)
    trials[1].status = "ERROR"
    tracker.on_trial_error(1, trials, trials[1])
    trials[0].status = "TERMINATED"
    tracker.on_trial_complete(2, trials, trials[0])
    tracker.on_experiment_end(trials)

    runs = _runs(tracker.target.uri)
    retried_run, failed_run = runs["PPO_00000"], runs["PPO_00001"]
    assert retried_run.info.status == "FINISHED"
    assert retried_run.data.tags["workbench.failures"] == "2"
    assert "injected fault number 2" in retried_run.data.tags["workbench.last_failure"]
    steps = _history(tracker.target.uri, retried_run.info.run_id, "training_iteration")
    assert [s for s, _ in steps] == [1, 2]  # the retry continued the same run
    assert failed_run.info.status == "FAILED"
    assert failed_run.data.tags["workbench.failures"] == "1"
    assert "injected fault" in failed_run.data.tags["workbench.error"]
