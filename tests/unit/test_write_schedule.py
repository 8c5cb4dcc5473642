"""`workbench export-schedule` without the CLI: `write_schedule` writes the replay
experiment of a PBT trial and checks it the way `workbench run` will read it; a file
that would not run is not left behind. The population is a small real sqlite store."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.experiments import small_pbt
from tests.support.stores import Store, new_store
from workbench.analysis.schedule import write_schedule
from workbench.errors import ExperimentError
from workbench.names import RESOLVED_FILE


def _population(tmp_path: Path, **fields: object) -> Store:
    """Population "pop" of one PBT trial whose lr went 0.001 -> 0.002 at iteration 3."""
    results = tmp_path / "results"
    folder = results / "pop"
    folder.mkdir(parents=True)
    source = small_pbt(
        tmp_path, search_space={"params": {"lr": {"loguniform": [1e-4, 1e-2]}}}, **fields
    )
    (folder / RESOLVED_FILE).write_text(yaml.safe_dump(source, sort_keys=False))
    store = new_store(results)
    pop = store.population("pop", results_dir=folder)
    store.trial(
        pop,
        "PPO_00000",
        returns=[1.0, 2.0, 3.0, 4.0],
        metrics={"hp/lr": [0.001, 0.001, 0.002, 0.002]},
        params={"lr": "0.001"},
    )
    return store


def test_the_schedule_is_written_and_reads_back_as_an_experiment(tmp_path: Path) -> None:
    store = _population(tmp_path)
    output = tmp_path / "out" / "replay.yaml"
    written = write_schedule(store.client, store.uri, output, "pop")
    exported = written.exported
    assert written.path == output and output.read_text() == exported.text()
    assert (exported.population, exported.trial) == ("pop", "PPO_00000")
    assert exported.iterations == 4
    assert [(s["iteration"], s["values"]) for s in exported.steps] == [
        (1, {"lr": 0.001}),
        (3, {"lr": 0.002}),
    ]
    data = yaml.safe_load(output.read_text())
    assert data["scheduler"]["type"] == "replay" and data["name"] == "pop-replay-PPO_00000"
    assert written.results_dir == (tmp_path / "results" / "pop-replay-PPO_00000").resolve()


def test_a_file_that_would_not_run_is_removed(tmp_path: Path) -> None:
    # The saved experiment reads back, but its env is unknown here: resolving it fails.
    store = _population(tmp_path, env={"id": "sim_ext/NoSuchEnv-v0"})
    output = tmp_path / "replay.yaml"
    with pytest.raises(ExperimentError, match="unknown environment 'sim_ext/NoSuchEnv-v0'"):
        write_schedule(store.client, store.uri, output, "pop", "PPO_00000")
    assert not output.exists()


def test_a_population_that_is_not_pbt_has_no_schedule(tmp_path: Path) -> None:
    store = _population(tmp_path, scheduler={"type": "fifo"})
    output = tmp_path / "replay.yaml"
    with pytest.raises(ExperimentError, match="was not population-based training"):
        write_schedule(store.client, store.uri, output, "pop")
    assert not output.exists()
