"""`workbench resume` of a population that has finished writes what its driver spooled
while the MLflow store did not answer (mlflow_pending.jsonl): no resume will, and the
tracker's message at the end of the run sends the user to `workbench resume`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.support.experiments import tiny_ppo, write_experiment
from workbench.cli.main import main
from workbench.experiment.resolve import load_saved
from workbench.names import (
    PARENT,
    RESOLVED_FILE,
    RESULTS_DIR_TAG,
    RETURN_METRIC,
    ROLE_TAG,
    SPOOL_FILE,
    STEP_METRIC,
    TRIAL_ID_TAG,
)
from workbench.run.launch import tracking_target
from workbench.tracking.writer import EndRun, OpenRun, Result, StoreWriter, op_to_json

TRIAL = "abc_00000"


def _finished_population(tmp_path: Path) -> tuple[Path, str]:
    """A results folder whose one trial has TERMINATED, its first two results in the store
    and the last two, with both runs' end, in the spool; its tracking URI."""
    results_dir = tmp_path / "results" / "probe"
    results_dir.mkdir(parents=True)
    write_experiment(results_dir / RESOLVED_FILE, tiny_ppo(tmp_path))
    (results_dir / "tuner.pkl").write_bytes(b"tune's state")
    trial = json.dumps({"trial_id": TRIAL, "status": "TERMINATED"})
    state = {"trial_data": [[trial, "{}"]]}
    (results_dir / "experiment_state-2026-11-30_12-00-00.json").write_text(json.dumps(state))

    target = tracking_target(load_saved(results_dir / RESOLVED_FILE))
    writer = StoreWriter(target.uri, target.experiment, artifact_root=target.artifact_root)
    tags = {ROLE_TAG: "population", RESULTS_DIR_TAG: str(results_dir)}
    writer.put(OpenRun(PARENT, "probe", target.key, None, tags, {}))
    trial_tags = {ROLE_TAG: "trial", TRIAL_ID_TAG: TRIAL}
    writer.put(OpenRun(TRIAL, "PPO_00000", f"{target.key}::{TRIAL}", PARENT, trial_tags, {}))
    now = int(time.time() * 1000)
    results = [Result(TRIAL, {STEP_METRIC: i, RETURN_METRIC: 10.0 * i}, now) for i in (1, 2, 3, 4)]
    for result in results[:2]:
        writer.put(result)
    assert not writer.close(30)
    spooled = [*results[2:], EndRun(TRIAL, "FINISHED", now), EndRun(PARENT, "FINISHED", now)]
    (results_dir / SPOOL_FILE).write_text("".join(op_to_json(op) + "\n" for op in spooled))
    return results_dir, target.uri


def _runs(uri: str) -> dict[str, object]:
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("probe")
    assert experiment is not None
    return {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}


def test_resume_of_a_finished_population_writes_its_spool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results_dir, uri = _finished_population(tmp_path)
    before = _runs(uri)
    assert before["PPO_00000"].info.status == "RUNNING"  # type: ignore[attr-defined]

    assert main(["resume", str(results_dir)]) == 0
    out = capsys.readouterr().out
    assert "has finished" in out and "nothing to resume" in out
    assert f"Wrote the 4 MLflow operations spooled in {results_dir / SPOOL_FILE}" in out
    assert not (results_dir / SPOOL_FILE).exists()

    after = _runs(uri)
    assert {name: r.info.status for name, r in after.items()} == {  # type: ignore[attr-defined]
        "probe": "FINISHED",
        "PPO_00000": "FINISHED",
    }
    client = MlflowClient(tracking_uri=uri)
    run_id = after["PPO_00000"].info.run_id  # type: ignore[attr-defined]
    history = client.get_metric_history(run_id, STEP_METRIC)
    assert sorted((m.step, m.value) for m in history) == [(i, float(i)) for i in (1, 2, 3, 4)]

    assert main(["resume", str(results_dir)]) == 0  # nothing left: said once
    assert "Wrote" not in capsys.readouterr().out


def test_a_spool_for_runs_the_store_lacks_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results_dir, uri = _finished_population(tmp_path)
    spool = results_dir / SPOOL_FILE
    stranger = Result("abc_00007", {STEP_METRIC: 1}, int(time.time() * 1000))  # never opened
    spooled = spool.read_text() + op_to_json(stranger) + "\n"
    spool.write_text(spooled)
    capsys.readouterr()  # MLflow's log of creating the store

    assert main(["resume", str(results_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert str(spool) in err[0] and "does not hold (abc_00007 of population probe)" in err[0]
    assert spool.read_text() == spooled  # kept, and nothing of it written
    assert _runs(uri)["PPO_00000"].info.status == "RUNNING"  # type: ignore[attr-defined]
