"""Populations named automatically: `workbench run FILE` twice gives two populations
(``<name>_<YYYYMMDD-HHMMSS>``, ``-2`` within one second), --name sets one, and resume
finds a population by folder, by name, or by its experiment's name (the newest)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import workbench.run.launch
from tests.support.experiments import tiny_ppo, write_experiment
from workbench.cli.main import main
from workbench.errors import ExperimentError
from workbench.names import RESOLVED_FILE
from workbench.run.folder_lock import lock_path
from workbench.run.results_folder import (
    find_results_dir,
    newest_population,
    population_name,
    unreserve,
)

NOW = dt.datetime(2026, 1, 30, 14, 15, 2)


def test_names_taken_in_one_second_differ_and_are_reserved(tmp_path: Path) -> None:
    storage = tmp_path / "results"
    names = [population_name(storage, "cartpole_pbt", now=NOW) for _ in range(3)]
    assert names == [
        "cartpole_pbt_20260130-141502",
        "cartpole_pbt_20260130-141502-2",
        "cartpole_pbt_20260130-141502-3",
    ]
    # Reserved by their lock files; no results folder yet.
    assert all(lock_path(storage / n).is_file() for n in names)
    assert not any((storage / n).exists() for n in names)
    # A look without reserving takes the next free one and reserves nothing.
    assert population_name(storage, "cartpole_pbt", now=NOW, reserve=False).endswith("-4")
    assert not lock_path(storage / "cartpole_pbt_20260130-141502-4").exists()
    # An existing folder (a population run before) is skipped too.
    (storage / "x_20260130-141502").mkdir()
    assert population_name(storage, "x", now=NOW) == "x_20260130-141502-2"


def test_a_long_name_is_cut_to_stay_a_valid_name(tmp_path: Path) -> None:
    name = population_name(tmp_path, "n" * 100, now=NOW)
    assert len(name) == 100 and name.endswith("_20260130-141502")


def test_a_refused_run_gives_its_name_back(tmp_path: Path) -> None:
    storage = tmp_path / "results"
    name = population_name(storage, "pop", now=NOW)
    unreserve(storage / name, storage_was_new=True)
    assert not storage.exists()  # the reservation made it, and it is empty again
    kept = population_name(storage, "pop", now=NOW)
    (storage / kept).mkdir()  # a run that wrote its folder keeps its name
    unreserve(storage / kept, storage_was_new=True)
    assert lock_path(storage / kept).exists()


def _population(storage: Path, name: str) -> Path:
    folder = storage / name
    folder.mkdir(parents=True)
    (folder / RESOLVED_FILE).write_text(f"name: {name}\n")
    (folder / "tuner.pkl").write_bytes(b"state")
    return folder


def test_resume_by_an_experiments_name_takes_its_newest_population(tmp_path: Path) -> None:
    storage = tmp_path / "results"
    _population(storage, "pop_20260130-141502")
    _population(storage, "pop_20260130-141502-2")
    newest = _population(storage, "pop_20260131-090000")
    _population(storage, "pop_other_20260201-000000")  # another experiment's (pop_other)
    _population(storage, "pop")  # a population named exactly so wins by its name
    assert newest_population(storage, "pop") == newest
    assert find_results_dir("pop", str(storage)) == (storage / "pop").resolve()
    (storage / "pop" / RESOLVED_FILE).unlink()
    assert find_results_dir("pop", str(storage)) == newest.resolve()
    assert find_results_dir(str(newest)) == newest.resolve()
    assert find_results_dir("pop_20260130-141502-2", str(storage)).name.endswith("-2")
    # A path ending in the experiment's name, absolute or under the storage, means the same.
    assert find_results_dir(str(storage / "pop")) == newest.resolve()
    assert find_results_dir("results/pop", str(tmp_path)) == newest.resolve()
    with pytest.raises(ExperimentError, match="no population to resume"):
        find_results_dir("nothing", str(storage))
    with pytest.raises(ExperimentError, match="no population to resume"):
        find_results_dir(str(tmp_path / "nowhere"), str(storage))


class _Summary:
    exit_code = 0

    def lines(self) -> list[str]:
        return ["done"]


def test_run_twice_gives_two_populations_and_name_sets_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's side of `run` (Tune's is launch.run's: replaced here by one that records
    what it was given and writes the folder, as a run does)."""
    started: list[Any] = []

    def fake_run(resolved: Any, **options: Any) -> _Summary:
        started.append(SimpleNamespace(resolved=resolved, lock=lock_path(resolved.results_dir)))
        _population(resolved.results_dir.parent, resolved.results_dir.name)
        return _Summary()

    monkeypatch.setattr(workbench.run.launch, "run", fake_run)
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, name="probe"))
    assert main(["run", str(path)]) == 0
    assert main(["run", str(path)]) == 0
    assert main(["run", str(path), "--name", "mine"]) == 0
    first, second, mine = (s.resolved for s in started)
    stamped = re.compile(r"probe_\d{8}-\d{6}(-2)?")
    assert stamped.fullmatch(first.results_dir.name), first.results_dir
    assert stamped.fullmatch(second.results_dir.name), second.results_dir
    assert first.results_dir != second.results_dir
    assert mine.results_dir == tmp_path / "results" / "mine"
    for resolved in (first, second, mine):
        assert resolved.experiment.name == resolved.results_dir.name  # folder and MLflow run
        assert resolved.experiment.tracking.experiment == "probe"  # one MLflow experiment
    assert all(s.lock.is_file() for s in started[:2])  # taken before the run began

    # --name of a population that exists is refused, and so is a name that is no name.
    assert main(["run", str(path), "--name", "mine"]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert main(["run", str(path), "--name", "no/name"]) == 2
    assert "--name: 'no/name': String should match pattern" in capsys.readouterr().err
    assert len(started) == 3


def test_a_run_refused_at_start_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refusing_run(resolved: Any, **options: Any) -> None:
        raise ExperimentError.single("f", "resources", "does not fit")

    monkeypatch.setattr(workbench.run.launch, "run", refusing_run)
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, name="probe"))
    assert main(["run", str(path)]) == 2
    assert not (tmp_path / "results").exists()
