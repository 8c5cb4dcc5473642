"""The inspection commands' reader of an sqlite store answers as MLflow's client does, on
one store both read, and the commands that use it never import MLflow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.stores import EXPLOIT, Store, new_store
from workbench.analysis.histories import population_lineage, trial_detail
from workbench.analysis.populations import find_population, populations
from workbench.names import (
    EVAL_RETURN_METRIC,
    PARENT_RUN_TAG,
    RESULTS_DIR_TAG,
    ROLE_TAG,
    RUN_NAME_TAG,
    SCORE_METRIC,
)
from workbench.tracking import sqlite_reader
from workbench.tracking.sqlite_reader import RunNotFound, SqliteReader, readable
from workbench.tracking.store import read_client


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """Two populations in two experiments, NaN and infinite values, a metric logged twice
    at one step, a deleted run and a deleted experiment, a run named by its tag only."""
    folder = tmp_path_factory.mktemp("reader")
    store = new_store(folder / "results")
    pop = store.population("pop", results_dir=folder / "results" / "pop")
    store.trial(
        pop,
        "PPO_00000",
        returns=[1.0, float("nan"), 3.0],
        metrics={SCORE_METRIC: [1.0, 5.0, float("inf")], "hp/lr": [0.1, 0.1, 0.2]},
        params={"lr": "0.1", "note": "it's"},
    )
    second = store.trial(
        pop,
        "PPO_00001",
        returns=[2.0, 8.0],
        metrics={EVAL_RETURN_METRIC: [7.5, float("-inf")]},
        tags={"hp/activation": "relu"},
    )
    store.client.log_metric(second, SCORE_METRIC, 4.0, step=1, timestamp=5)
    store.client.log_metric(second, SCORE_METRIC, 6.0, step=1, timestamp=5)
    store.lineage(pop, [EXPLOIT])
    other = store.population("other", experiment="exp2", results_dir="/elsewhere/other")
    store.trial(other, "PPO_00000", returns=[0.5], status="FAILED")
    gone = store.trial(other, "PPO_00009", returns=[1.0])
    store.client.delete_run(gone)
    dropped = store.experiment("dropped")
    store.client.create_run(dropped, tags={ROLE_TAG: "population"})
    store.client.delete_experiment(dropped)
    unnamed = store.client.create_run(store.experiment("exp2"), tags={RUN_NAME_TAG: "tagged"})
    store.client.set_terminated(unnamed.info.run_id)
    return store


def _run(run: Any) -> tuple[Any, ...]:
    info, data = run.info, run.data
    return (
        info.run_id,
        info.run_name,
        str(info.experiment_id),
        info.status,
        info.start_time,
        info.end_time,
        info.lifecycle_stage,
        info.artifact_uri,
        repr(sorted(data.metrics.items())),  # repr: NaN compares equal as text
        sorted(data.params.items()),
        sorted(data.tags.items()),
    )


def _both(store: Store) -> tuple[SqliteReader, Any]:
    reader = read_client(store.uri)
    assert isinstance(reader, SqliteReader)
    return reader, store.client


def test_runs_and_experiments_read_as_mlflow_reads_them(store: Store) -> None:
    reader, client = _both(store)
    assert [
        (e.experiment_id, e.name, e.artifact_location) for e in reader.search_experiments()
    ] == [(e.experiment_id, e.name, e.artifact_location) for e in client.search_experiments()]
    ids = [e.experiment_id for e in client.search_experiments()]
    pop = client.search_runs(ids, filter_string=f"tags.`{RUN_NAME_TAG}` = 'pop'")[0]
    filters = [
        "",
        f"tags.`{ROLE_TAG}` = 'population'",
        f"tags.`{ROLE_TAG}` = 'trial' and tags.`{PARENT_RUN_TAG}` = '{pop.info.run_id}'",
        f"tags.`{RESULTS_DIR_TAG}` LIKE '%/pop'",
        f"tags.`{RESULTS_DIR_TAG}` LIKE '%/POP'",  # case-sensitive, as MLflow sets it
        "tags.`nothing` = 'x'",
    ]
    for filter_string in filters:
        for order_by in (None, ["start_time DESC"]):
            for max_results in (1, 1000):
                ours = reader.search_runs(ids, filter_string, order_by, max_results)
                theirs = client.search_runs(
                    ids, filter_string=filter_string, order_by=order_by, max_results=max_results
                )
                assert [_run(r) for r in ours] == [_run(r) for r in theirs], filter_string
    every = client.search_runs(ids)
    for run in every:
        assert _run(reader.get_run(run.info.run_id)) == _run(run)
        for key in run.data.metrics:
            ours = [
                (m.key, repr(m.value), m.timestamp, m.step)
                for m in reader.get_metric_history(run.info.run_id, key)
            ]
            theirs = [
                (m.key, repr(m.value), m.timestamp, m.step)
                for m in client.get_metric_history(run.info.run_id, key)
            ]
            assert ours == theirs, key
    assert reader.get_experiment_by_name("exp2").name == "exp2"  # type: ignore[union-attr]
    assert reader.get_experiment_by_name("dropped") is None
    assert client.get_experiment_by_name("dropped").lifecycle_stage == "deleted"
    with pytest.raises(RunNotFound):
        reader.get_run("0" * 32)


def test_artifacts_list_and_download_as_mlflows_do(store: Store, tmp_path: Path) -> None:
    reader, client = _both(store)
    (pop,) = client.search_runs(
        [client.get_experiment_by_name("exp").experiment_id],
        filter_string=f"tags.`{ROLE_TAG}` = 'population'",
    )
    run_id = pop.info.run_id
    assert [(a.path, a.is_dir) for a in reader.list_artifacts(run_id)] == [
        (a.path, a.is_dir) for a in client.list_artifacts(run_id)
    ]
    ours = Path(reader.download_artifacts(run_id, "lineage.jsonl", str(tmp_path / "a")))
    theirs = Path(client.download_artifacts(run_id, "lineage.jsonl", str(tmp_path / "b")))
    assert ours.read_text() == theirs.read_text()
    assert json.loads(ours.read_text()) == EXPLOIT


def test_the_inspection_views_are_the_same_from_either_reader(store: Store) -> None:
    reader, client = _both(store)

    def views(source: Any) -> list[str]:
        every = populations(source, with_trials=True)
        pop = find_population(source, "pop", store.uri)
        detail = trial_detail(source, "PPO_00001", "pop", store.uri)
        lineage = population_lineage(source, "pop", store.uri)
        return [
            repr([p.to_json() for p in every]),
            repr(pop.to_json()),
            repr(detail),
            repr(lineage),
        ]

    assert views(reader) == views(client)


def test_the_installed_mlflows_schema_is_one_the_reader_knows() -> None:
    # Fails on an MLflow whose schema migrated: check the reader against it (this file),
    # then add its revision to KNOWN_REVISIONS. Until then MLflow's client reads.
    from mlflow.store.db.utils import _get_latest_schema_revision

    assert _get_latest_schema_revision() in sqlite_reader.KNOWN_REVISIONS


def test_a_schema_this_reader_does_not_know_is_read_by_mlflow(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_reader, "KNOWN_REVISIONS", frozenset({"an_older_revision"}))
    assert not readable(Path(store.uri.removeprefix("sqlite:///")))
    client = read_client(store.uri)
    assert not isinstance(client, SqliteReader)
    assert type(client).__module__.startswith("mlflow")
    assert [p.name for p in populations(client)] == ["other", "pop"]


def test_the_inspection_commands_do_not_import_mlflow(store: Store) -> None:
    code = (
        "import sys\n"
        "from workbench.cli.main import main\n"
        "shown = (['runs'], ['show', 'PPO_00001', '--population', 'pop'], ['lineage', 'pop'])\n"
        "for args in shown:\n"
        f"    assert main([*args, '--store', {store.uri!r}]) == 0, args\n"
        "assert not [m for m in sys.modules if m == 'mlflow' or m.startswith('mlflow.')]\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
