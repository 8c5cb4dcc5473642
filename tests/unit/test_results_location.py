"""A results folder refers to itself relatively: the saved experiment names no storage,
the store records a population beside it by name, and a folder copied or moved with its
store is found, resumed and read where it lies (no Ray here; the integration tier copies
a real population: tests/integration/test_portable_results.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml
from mlflow.tracking import MlflowClient
from ray.train import Checkpoint
from ray.tune.schedulers.pbt import _PBTTrialState

from tests.support.experiments import small_pbt, tiny_ppo, write_experiment
from tests.support.schedulers import built_scheduler
from workbench.experiment.resolve import load_and_resolve, load_saved
from workbench.names import ARTIFACTS_DIR, RESOLVED_FILE, STORE_FILE
from workbench.run.launch import missing_store_note, prepare_results_dir, tracking_target
from workbench.tracking.location import moved_artifact_uri, results_dir_of, results_dir_tag
from workbench.tracking.writer import OpenRun, StoreWriter


def _saved(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    resolved = load_and_resolve(write_experiment(tmp_path, tiny_ppo(tmp_path)))
    prepare_results_dir(resolved)
    return resolved.results_dir


def test_a_copied_folder_resumes_where_it_lies_not_where_it_ran(tmp_path: Path) -> None:
    folder = _saved(tmp_path / "ran")
    assert "storage" not in yaml.safe_load((folder / RESOLVED_FILE).read_text())
    copy = tmp_path / "elsewhere" / "results" / "renamed"
    shutil.copytree(folder, copy)
    resolved = load_saved(copy / RESOLVED_FILE)
    assert resolved.results_dir == copy.resolve()
    assert resolved.experiment.name == "probe"  # its MLflow runs keep their names
    # A file saved before named the storage it ran in: not read.
    data = yaml.safe_load((copy / RESOLVED_FILE).read_text())
    (copy / RESOLVED_FILE).write_text(yaml.safe_dump({**data, "storage": str(folder.parent)}))
    assert load_saved(copy / RESOLVED_FILE).results_dir == copy.resolve()


def test_a_store_beside_its_populations_records_them_by_name(tmp_path: Path) -> None:
    folder = _saved(tmp_path)
    target = tracking_target(load_saved(folder / RESOLVED_FILE))
    assert target.uri == f"sqlite:///{folder.parent / STORE_FILE}"
    assert (target.key, target.results_dir_tag) == ("probe", "probe")
    assert target.legacy_keys == (str(folder),)  # populations tracked before: absolute
    # A store elsewhere cannot know where its readers stand: the absolute path.
    data = tiny_ppo(tmp_path / "other", tracking={"uri": f"sqlite:///{tmp_path / 'x.db'}"})
    elsewhere = load_and_resolve(write_experiment(tmp_path, data))
    assert tracking_target(elsewhere).results_dir_tag == str(elsewhere.results_dir)


def test_a_moved_store_is_read_beside_where_it_lies(tmp_path: Path) -> None:
    store = tmp_path / "moved" / "results"
    (store / "pop").mkdir(parents=True)
    (store / "pop" / RESOLVED_FILE).write_text("name: pop\n")
    uri = f"sqlite:///{store / STORE_FILE}"
    assert results_dir_tag(store / "pop", uri) == "pop"
    assert results_dir_of("pop", uri) == str(store / "pop")
    read_only = f"sqlite:///file:{quote(str(store / STORE_FILE), safe='')}?mode=ro&uri=true"
    assert results_dir_of("pop", read_only) == str(store / "pop")  # an inspection's client
    # Tagged with the absolute path it had before it was moved (stores written before).
    assert results_dir_of("/ran/results/pop", uri) == str(store / "pop")
    assert results_dir_of("/ran/results/other", uri) == "/ran/results/other"
    assert results_dir_of("/ran/results/pop", "http://host:5000") == "/ran/results/pop"
    (store / ARTIFACTS_DIR / "abc" / "artifacts").mkdir(parents=True)
    recorded = "file:///ran/results/mlartifacts/abc/artifacts"
    assert moved_artifact_uri(recorded, uri) == (store / ARTIFACTS_DIR / "abc/artifacts").as_uri()
    missing = "file:///ran/results/mlartifacts/def/artifacts"
    assert moved_artifact_uri(missing, uri) == missing  # not beside it: as recorded


def test_a_resume_into_a_moved_store_writes_artifacts_beside_it(tmp_path: Path) -> None:
    ran = tmp_path / "ran" / "results"
    ran.mkdir(parents=True)
    first = StoreWriter(f"sqlite:///{ran / STORE_FILE}", "pop", artifact_root=ran / ARTIFACTS_DIR)
    first.put(OpenRun("__population__", "pop", "pop", None, {}, {}))
    assert first.close(30) == []
    moved = tmp_path / "moved" / "results"
    shutil.copytree(ran, moved)
    shutil.rmtree(ran)  # anything written to where it ran would show up again
    uri = f"sqlite:///{moved / STORE_FILE}"
    # Tune's snapshot knows the run; a trial run opened now is new.
    writer = StoreWriter(uri, "pop", artifact_root=moved / ARTIFACTS_DIR, runs=first.run_ids())
    writer.put(OpenRun("__population__", "pop", "pop", None, {}, {}))
    writer.put(OpenRun("t1", "PPO_00001", "pop::t1", "__population__", {}, {}))
    assert writer.close(30) == []
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("pop")
    here = (moved / ARTIFACTS_DIR).as_uri()
    uris = [r.info.artifact_uri for r in client.search_runs([experiment.experiment_id])]
    assert experiment.artifact_location == here
    assert len(uris) == 2 and all(u.startswith(here + "/") for u in uris)
    assert not ran.exists()


def test_runs_tune_remembers_that_the_store_has_not_are_opened_anew(tmp_path: Path) -> None:
    """A population folder copied without its store: the run ids of Tune's snapshot are
    not in the store beside it; its results go to new runs, not nowhere."""
    uri = f"sqlite:///{tmp_path / STORE_FILE}"
    writer = StoreWriter(uri, "pop", runs={"__population__": "0" * 32})
    writer.put(OpenRun("__population__", "pop", "pop", None, {}, {}))
    assert writer.close(30) == []
    run_id = writer.run_ids()["__population__"]
    assert run_id != "0" * 32
    assert MlflowClient(uri).get_run(run_id).info.run_name == "pop"


class _Trial:
    def __init__(self, path: Path) -> None:
        self.trial_id = "abc_00000"
        self.path = str(path)
        self.config: dict[str, Any] = {}
        self.experiment_tag = "0"


def test_pbts_checkpoints_are_taken_where_the_folder_lies(tmp_path: Path) -> None:
    """Tune rewrites the checkpoints it tracks to a restored folder's place; PBT's held
    checkpoints (carried in the workbench's snapshot) are the workbench's to rewrite."""
    data = small_pbt(tmp_path, search_space={"params": {"lr": {"loguniform": [1e-4, 1e-2]}}})
    pbt: Any = built_scheduler(load_and_resolve(write_experiment(tmp_path, data)))
    trial = _Trial(tmp_path / "copy" / "pop" / "PPO_00000")
    pbt._trial_state[trial] = _PBTTrialState(trial)
    ran = "/ran/results/pop/PPO_00000/checkpoint_000003"
    pbt.restore_workbench_state(
        {"trials": {trial.trial_id: {"last_checkpoint": Checkpoint(ran), "last_score": 1.0}}}
    )
    held = pbt._trial_state[trial].last_checkpoint
    assert held.path == str(tmp_path / "copy" / "pop" / "PPO_00000" / "checkpoint_000003")
    assert pbt._trial_state[trial].last_score == 1.0


def test_a_population_folder_copied_without_its_store_says_so_on_resume(
    tmp_path: Path,
) -> None:
    folder = _saved(tmp_path / "ran")
    copy = tmp_path / "alone" / "probe"
    shutil.copytree(folder, copy)
    resolved = load_saved(copy / RESOLVED_FILE)
    tracking = resolved.experiment.tracking
    # Nothing tracked yet: nothing to say.
    assert missing_store_note(tracking, resolved.results_dir) is None
    (copy / "PPO_00000").mkdir()
    (copy / "PPO_00000" / "result.json").write_text('{"training_iteration": 1}\n')
    note = missing_store_note(tracking, resolved.results_dir)
    assert note is not None
    assert f"{copy.parent.resolve() / STORE_FILE} is missing" in note
    assert "copy that folder's mlflow.db and mlartifacts/ beside it" in note
