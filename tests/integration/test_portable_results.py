"""A results folder works where it lies: a storage folder copied (or moved, or mounted
elsewhere) is evaluated, exported and resumed in place, with its own checkpoints, store
and artifacts, and the folder it came from is never read for them nor written. And its
result rows are whole: every row Tune's driver received is in result.json, each on its
own line, after PBT exploits, reused actors and a resume, and Ray's own
ExperimentAnalysis reads them all.

All on copies of tests/conftest.py's population: no new population is trained; the
resume trains one trial for one more iteration."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import stat
from pathlib import Path
from types import SimpleNamespace

import ray
import yaml

import tests.support.probes as probes
from tests.support.results import result_rows, rows_as_ray_reads_them
from workbench.analysis.schedule import write_schedule
from workbench.experiment.resolve import load_saved
from workbench.names import ARTIFACTS_DIR, RESOLVED_FILE, RESULTS_DIR_TAG, STORE_FILE
from workbench.policy.export import export_reference
from workbench.policy.locate import evaluate_reference
from workbench.run.launch import resume
from workbench.tracking.store import client_for, resolve_store


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under root: its size and modification time."""
    out = {}
    for path in [root, *root.rglob("*")]:
        info = path.lstat()
        out[str(path.relative_to(root))] = (info.st_size, info.st_mtime_ns)
    return out


def _set_writable(root: Path, writable: bool) -> None:
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        bits = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
        os.chmod(path, (mode | stat.S_IWUSR) if writable else (mode & ~bits))


def _copies(pbt_population: SimpleNamespace, tmp_path: Path) -> tuple[Path, Path]:
    """An original storage folder and a copy of it elsewhere. The original is itself a
    copy of the shared population's (so that the test may lock it and take it away),
    its store's artifact URIs pointed into it as if it had been trained there."""
    trained = pbt_population.root / "results"
    original = tmp_path / "original" / "results"
    shutil.copytree(trained, original)
    old, new = (trained / ARTIFACTS_DIR).as_uri(), (original / ARTIFACTS_DIR).as_uri()
    with contextlib.closing(sqlite3.connect(original / STORE_FILE)) as conn, conn:
        conn.execute(
            "UPDATE experiments SET artifact_location = replace(artifact_location, ?, ?)",
            (old, new),
        )
        conn.execute("UPDATE runs SET artifact_uri = replace(artifact_uri, ?, ?)", (old, new))
    copy = tmp_path / "mounted" / "elsewhere" / "results"
    shutil.copytree(original, copy)
    return original, copy


def _store_paths(copy: Path) -> list[str]:
    """The artifact locations the copy's store records."""
    client = client_for(resolve_store(str(copy)))
    experiment = client.get_experiment_by_name("pbt")
    runs = client.search_runs([experiment.experiment_id])
    return [experiment.artifact_location, *(r.info.artifact_uri for r in runs)]


def test_a_copied_folder_is_evaluated_and_exported_where_it_lies(
    pbt_population: SimpleNamespace, tmp_path: Path
) -> None:
    original, copy = _copies(pbt_population, tmp_path)
    before = _listing(original)
    _set_writable(original, False)
    try:
        # A trial folder of the copy: its checkpoint, and its run in the copy's store.
        evaluated = evaluate_reference(str(copy / "pbt" / "PPO_00000"), episodes=2)
        assert evaluated.checkpoint.path.is_relative_to(copy)
        assert evaluated.source.uri == f"sqlite:///{copy / STORE_FILE}"
        assert evaluated.source.run_id is not None, evaluated.logged
        # A trial by name, in the copy's store: the checkpoint is the copy's.
        by_name = evaluate_reference(
            "PPO_00001", store=str(copy), population="pbt", episodes=2, log=False
        )
        assert by_name.checkpoint.path.is_relative_to(copy)
        exported = export_reference(
            "PPO_00001", tmp_path / "policy", store=str(copy), population="pbt"
        )
        assert Path(exported.spec["checkpoint"]).is_relative_to(copy)
        uri = resolve_store(str(copy))
        # The schedule of a trial that was exploited (the best may have been a donor
        # throughout): its lineage has a segment per exploit.
        lineage = (copy / "pbt" / "lineage.jsonl").read_text().splitlines()
        exploited = json.loads(lineage[-1])["target_name"]
        written = write_schedule(client_for(uri), uri, tmp_path / "replay.yaml", "pbt", exploited)
        replay = yaml.safe_load(written.path.read_text())
        assert replay["storage"] == str(copy)
        assert written.results_dir.parent == copy
    finally:
        _set_writable(original, True)
    assert _listing(original) == before

    # The original gone: nothing the copy needs was read from it.
    original.rename(original.with_name("gone"))
    again = write_schedule(client_for(uri), uri, tmp_path / "replay2.yaml", "pbt", exploited)
    assert again.exported.steps == written.exported.steps
    assert len(again.exported.segments) > 1  # the lineage, from the copy's artifacts
    assert evaluate_reference(
        "PPO_00002", store=str(copy), population="pbt", episodes=1, log=False
    ).checkpoint.path.is_relative_to(copy)


def _reopen(results_dir: Path, name: str, iterations: int) -> None:
    """Makes a finished population resumable: trial `name` paused in Tune's newest
    snapshot, and the saved experiment's stop rule `iterations`."""
    snapshot = sorted(results_dir.glob("experiment_state-*.json"))[-1]
    state = json.loads(snapshot.read_text())
    for pair in state["trial_data"]:
        trial = json.loads(pair[0])
        if f"PPO_{trial['trial_id'].rsplit('_', 1)[1]}" == name:
            trial["status"] = "PAUSED"
            pair[0] = json.dumps(trial)
    snapshot.write_text(json.dumps(state))
    saved = results_dir / RESOLVED_FILE
    data = yaml.safe_load(saved.read_text())
    data["stop"]["iterations"] = iterations
    saved.write_text(yaml.safe_dump(data, sort_keys=False))


def test_a_copied_population_resumes_where_it_lies(
    pbt_population: SimpleNamespace, tmp_path: Path
) -> None:
    original, copy = _copies(pbt_population, tmp_path)
    # Moved away: a path into the original now leads nowhere, and one written through
    # the copy would show up again.
    gone = original.with_name("gone")
    original.rename(gone)
    before = _listing(gone)
    _set_writable(gone, False)
    results_dir = copy / "pbt"
    _reopen(results_dir, "PPO_00000", iterations=7)
    client = client_for(resolve_store(str(copy)))
    runs_before = {
        r.info.run_name: r
        for r in client.search_runs([client.get_experiment_by_name("pbt").experiment_id])
    }
    rows_before = result_rows(results_dir)
    try:
        resolved = load_saved(results_dir / RESOLVED_FILE)
        assert resolved.results_dir == results_dir
        ray.cloudpickle.register_pickle_by_value(probes)
        summary = resume(
            resolved,
            configure=lambda c: c.learners(learner_class=probes.ProbeLearner),
            progress_interval_s=1e9,
        )
    finally:
        ray.shutdown()
        _set_writable(gone, True)
    assert summary.errors == 0 and summary.results_dir == results_dir
    assert not original.exists()
    assert _listing(gone) == before

    rows = result_rows(results_dir)
    assert [r["training_iteration"] for r in rows["PPO_00000"]] == [
        *(r["training_iteration"] for r in rows_before["PPO_00000"]),
        7,
    ]
    by_ray, warnings = rows_as_ray_reads_them(results_dir)
    assert warnings == []
    assert by_ray == {name: len(r) for name, r in rows.items()}
    # The same MLflow runs, in the copy's store, one step more; artifacts beside it.
    runs = {
        r.info.run_name: r
        for r in client.search_runs([client.get_experiment_by_name("pbt").experiment_id])
    }
    assert {n: r.info.run_id for n, r in runs.items()} == {
        n: r.info.run_id for n, r in runs_before.items()
    }
    assert runs["pbt"].data.tags[RESULTS_DIR_TAG] == "pbt"
    # Finished: the trials that ended before the resume are no sign of an interruption.
    assert {r.info.status for r in runs.values()} == {"FINISHED"}
    history = client.get_metric_history(runs["PPO_00000"].info.run_id, "training_iteration")
    assert max(history, key=lambda m: m.step).value == 7
    here = (copy / ARTIFACTS_DIR).as_uri()
    assert all(p.startswith(here) for p in _store_paths(copy)), _store_paths(copy)
    assert "lineage.jsonl" in {a.path for a in client.list_artifacts(runs["pbt"].info.run_id)}


def test_result_rows_are_whole_after_exploits_and_reused_actors(
    pbt_population: SimpleNamespace,
) -> None:
    """Every result the driver received, once and in order, as MLflow has them."""
    results_dir = pbt_population.resolved.results_dir
    rows = result_rows(results_dir)  # every line parses: none spliced
    client = client_for(pbt_population.summary.tracking_uri)
    experiment = client.get_experiment_by_name("pbt")
    trials = client.search_runs(
        [experiment.experiment_id], filter_string="tags.`workbench.role` = 'trial'"
    )
    assert len(trials) == len(rows) == 4
    for run in trials:
        history = client.get_metric_history(run.info.run_id, "training_iteration")
        stored = [int(m.value) for m in sorted(history, key=lambda m: m.step)]
        kept = [r["training_iteration"] for r in rows[run.info.run_name]]
        assert kept == stored, run.info.run_name
    by_ray, warnings = rows_as_ray_reads_them(results_dir)
    assert warnings == []
    assert by_ray == {name: len(r) for name, r in rows.items()}
