"""MLflow tracking on real populations: PBT, an interrupted and resumed run, a store outage."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import ray
from mlflow.tracking import MlflowClient

from tests.support.experiments import small_pbt, write_experiment
from tests.support.results import count_results, result_rows
from workbench.analysis.populations import find_population
from workbench.analysis.ui import free_port, start_ui
from workbench.experiment.resolve import load_and_resolve
from workbench.names import LINEAGE_FILE
from workbench.run.launch import run
from workbench.tracking.store import client_for

WORKBENCH = str(Path(sys.executable).parent / "workbench")


@pytest.fixture
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _experiment(tmp_path: Path, **fields: Any) -> Path:
    space = {"params": {"lr": {"loguniform": [1e-5, 1e-2]}, "clip_param": {"uniform": [0.1, 0.4]}}}
    population = {"search_space": space, "population": 4, "stop": {"iterations": 8}}
    data = small_pbt(tmp_path, **{**population, **fields})
    return write_experiment(tmp_path, data, sort_keys=True)


def _steps(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_pbt_population_in_mlflow(tmp_path: Path, pbt_population: SimpleNamespace) -> None:
    # tests/conftest.py's population: synchronous PBT deciding at iterations 2 and 4,
    # quantile 0.5 of 4 trials, so the bottom two clone each time.
    resolved, summary = pbt_population.resolved, pbt_population.summary
    assert summary.errors == 0
    assert summary.tracking_uri == f"sqlite:///{pbt_population.root / 'results' / 'mlflow.db'}"

    client = client_for(summary.tracking_uri)
    population = find_population(client, "pbt", summary.tracking_uri)
    assert population.status == "FINISHED"
    parents = client.search_runs(
        [population.experiment_id], filter_string="tags.`workbench.role` = 'population'"
    )
    assert len(parents) == 1
    trials = {t.trial_id: t for t in population.trials}
    assert len(trials) == 4 and all(t.status == "FINISHED" for t in trials.values())

    # Tune's own log of the exploits, and ours.
    tune_log = [
        json.loads(x) for x in (resolved.results_dir / "pbt_global.txt").read_text().splitlines()
    ]
    # Lines land as exploits take effect (the target's next result); `seq` is
    # the order they were decided in, which is Tune's log's order.
    ours = sorted(
        (json.loads(x) for x in (resolved.results_dir / LINEAGE_FILE).read_text().splitlines()),
        key=lambda r: r["seq"],
    )
    assert tune_log, "PBT never exploited: the test checks nothing"
    assert len(ours) == len(tune_log)
    assert [r["seq"] for r in ours] == list(range(len(ours)))
    for record, (target_tag, source_tag, target_it, source_it, _donor, new) in zip(
        ours, tune_log, strict=True
    ):
        # Tune's tags start with the trial's index, our ids end with it.
        assert int(target_tag.split("_")[0]) == int(record["target"].rsplit("_", 1)[1])
        assert int(source_tag.split("_")[0]) == int(record["source"].rsplit("_", 1)[1])
        assert (record["target_iteration"], record["source_iteration"]) == (target_it, source_it)
        assert record["new"]["lr"] == pytest.approx(new["lr"])
    # The lineage artifact on the parent is the same file.
    artifact = client.download_artifacts(population.run_id, LINEAGE_FILE, str(tmp_path))
    assert Path(artifact).read_text() == (resolved.results_dir / LINEAGE_FILE).read_text()

    rows = result_rows(resolved.results_dir)
    for trial in trials.values():
        lr = _steps(client, trial.run_id, "hp/lr")
        iterations = _steps(client, trial.run_id, "training_iteration")
        # Every result reached the store, one step each, steps only grow: the
        # trial ran 1..exploit, then on from the donor's checkpoint, up to the stop.
        expected: list[int] = []
        reached = 0
        for record in (r for r in ours if r["target"] == trial.trial_id):
            expected += range(reached + 1, record["exploit_iteration"] + 1)
            reached = record["restored_iteration"]
        expected += range(reached + 1, 7)
        assert [s for s, _ in iterations] == list(range(1, len(expected) + 1)), trial.name
        assert [int(v) for _, v in iterations] == expected, trial.name
        # Tune's result.json holds the same results, in the same order (the workbench
        # writes it in place of Ray's logger, which lost rows at every restart from a
        # checkpoint: workbench.tune_ext.result_files).
        kept = [r["training_iteration"] for r in rows[trial.name]]
        assert kept == [int(v) for _, v in iterations], trial.name
        # hp/lr changes exactly after this trial's exploits that changed it.
        changes = [s for (s, v), (_, prev) in zip(lr[1:], lr, strict=False) if v != prev]
        exploited = [
            r["step"] + 1
            for r in ours
            if r["target"] == trial.trial_id and r["new"]["lr"] != r["old"]["lr"]
        ]
        assert changes == exploited, trial.name
        # ... and the value after each is the exploit's new value.
        for record in (r for r in ours if r["target"] == trial.trial_id):
            after = dict(lr).get(record["step"] + 1)
            if after is not None:
                assert after == pytest.approx(record["new"]["lr"])
        # The result's own iterations after an exploit continue from the donor's.
        for record in (r for r in ours if r["target"] == trial.trial_id):
            its = dict(iterations)
            if record["step"] + 1 in its:
                assert its[record["step"] + 1] == record["restored_iteration"] + 1
    artifacts = {a.path for a in client.list_artifacts(population.run_id)}
    assert {
        "workbench_experiment.yaml",
        "learning_curves.png",
        "lineage.png",
        "best_schedule.png",
        LINEAGE_FILE,
    } <= artifacts

    # The inspection commands read it back.
    store = ["--store", str(pbt_population.root / "results")]
    board = subprocess.run(
        [WORKBENCH, "runs", "pbt", *store, "--json"], capture_output=True, text=True, check=True
    )
    data = json.loads(board.stdout)
    assert len(data["trials"]) == 4
    best = data["trials"][0]
    assert best["best_return"] == max(t["best_return"] for t in data["trials"])
    lineage = subprocess.run(
        [WORKBENCH, "lineage", "pbt", *store], capture_output=True, text=True, check=True
    )
    assert f"({len(ours)} exploits)" in lineage.stdout
    shown = subprocess.run(
        [WORKBENCH, "show", best["name"], *store, "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    detail = json.loads(shown.stdout)
    assert detail["ancestry"][-1]["name"] == best["name"]
    assert detail["ancestry"][-1]["last_iteration"] == best["iteration"]


def test_a_tracking_server_outage_loses_nothing(
    tmp_path: Path, local_ray: None, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "server.db"
    # A tracking server's store: created here (the UI launcher only opens stores that exist).
    MlflowClient(f"sqlite:///{store}").search_experiments()
    port = free_port()
    server = start_ui(f"sqlite:///{store}", port=port)
    outage = threading.Event()

    def take_it_down() -> None:
        nonlocal server
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            counts = count_results(store)
            if counts and max(counts.values()) >= 2:
                break
            time.sleep(0.5)
        server.stop()
        outage.set()
        time.sleep(12)
        server = start_ui(f"sqlite:///{store}", port=port)

    controller = threading.Thread(target=take_it_down, daemon=True)
    controller.start()
    try:
        resolved = load_and_resolve(
            _experiment(
                tmp_path,
                population=2,
                stop={"iterations": 14},
                scheduler={"type": "fifo"},
                tracking={"uri": server.url},
            )
        )
        summary = run(resolved, progress_interval_s=1e9)
        events = capsys.readouterr().out
        controller.join(timeout=60)
        assert outage.is_set(), "the server never went down: the test checks nothing"
        assert summary.errors == 0
        assert "not answering" in events
        assert "answers again" in events
        rows = result_rows(resolved.results_dir)
        counts = count_results(store)
        assert counts == {name: len(r) for name, r in rows.items()}
    finally:
        server.stop()
