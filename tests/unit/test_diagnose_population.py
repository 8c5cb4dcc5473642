"""`workbench diagnose` without the CLI: the per-trial verdicts, the population's verdict
and the shares the PNG draws (`diagnose_population`), read from a small real sqlite
store whose trials logged their time split as ``workbench/*`` metrics; and the Ray
address `--timeline` would join (`population_address`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.support.stores import Store, new_store
from workbench.analysis.diagnosis import diagnose_population, diagnose_target
from workbench.analysis.populations import find_population
from workbench.analysis.timeline import NothingRunning, population_address
from workbench.names import RESOLVED_FILE, SESSION_FILE
from workbench.trial.time_split import PREFIX, TimeSplit


def _iteration(sampling: float, learner: float, sync: float = 0.05) -> dict[str, float]:
    """One synchronous iteration's ``workbench/*`` metrics: the main process samples
    1000 env steps in `sampling` s, learns from them in `learner` s, syncs in `sync` s."""
    split = TimeSplit(
        iterations=1,
        exact_iterations=1,
        iteration_s=sampling + learner + sync,
        sampling_s=sampling,
        learner_s=learner,
        sync_s=sync,
        runner_s=sampling,
        learner_busy_s=learner,
        env_steps_sampled=1000.0,
        env_steps_trained=1000.0,
    )
    return {f"{PREFIX}/{k}": v for k, v in split.metrics().items()}


def _history(rows: list[dict[str, float]]) -> dict[str, list[float]]:
    return {key: [row[key] for row in rows] for key in rows[0]}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """Population "pop": PPO_00000 sampling-bound, PPO_00001 learner-bound, 4 iterations
    each (the first slower: the warm-up the verdicts leave out), and PPO_00002 without a
    time split (a trial of an older workbench)."""
    store = new_store(tmp_path / "results")
    pop = store.population("pop", results_dir=tmp_path / "results" / "pop")
    for name, (sampling, learner) in {"PPO_00000": (0.75, 0.2), "PPO_00001": (0.1, 0.8)}.items():
        rows = [_iteration(3 * sampling, 3 * learner)] + [_iteration(sampling, learner)] * 3
        store.trial(pop, name, returns=[1.0, 2.0, 3.0, 4.0], metrics=_history(rows))
    store.trial(pop, "PPO_00002", returns=[1.0])
    return store


def test_each_trial_gets_its_verdict_and_the_population_counts_them(store: Store) -> None:
    pop = find_population(store.client, "pop", store.uri)
    trials = pop.trials[:2]
    result = diagnose_population(store.client, store.uri, pop, trials)
    assert [r.label for r in result.reports] == ["Trial PPO_00000", "Trial PPO_00001"]
    assert result.verdicts == {"PPO_00000": "sampling-bound", "PPO_00001": "learner-bound"}
    first = result.reports[0]
    assert (first.split.iterations, first.left_out) == (3, 1)  # the warm-up left out
    assert first.split.sampling_s == pytest.approx(3 * 0.75)
    together = result.population_report
    assert together is not None
    assert together.label == "Population pop (2 trials together)"
    assert together.evidence[0] == "trials: 1 learner-bound, 1 sampling-bound"
    assert together.split.iterations == 6  # both trials' steady iterations, summed
    assert result.has_figures


def test_the_shares_are_what_the_png_draws_per_iteration(store: Store) -> None:
    pop = find_population(store.client, "pop", store.uri)
    result = diagnose_population(store.client, store.uri, pop, pop.trials[:2])
    shares = result.shares["PPO_00001"]
    assert [step for step, *_ in shares] == [1.0, 2.0, 3.0, 4.0]  # the warm-up too
    _, sampling, learner, sync, rest = shares[-1]
    assert (sampling, learner, sync) == pytest.approx((0.1 / 0.95, 0.8 / 0.95, 0.05 / 0.95))
    assert rest == pytest.approx(0.0, abs=1e-9)
    assert math.fsum(shares[-1][1:]) == pytest.approx(1.0)


def test_as_json_the_store_the_population_and_both_verdicts(store: Store) -> None:
    pop = find_population(store.client, "pop", store.uri)
    data = diagnose_population(store.client, store.uri, pop, pop.trials).to_json()
    assert list(data) == ["store", "population", "run_id", "trials", "population_diagnosis"]
    assert (data["store"], data["population"], data["run_id"]) == (store.uri, "pop", pop.run_id)
    assert [t["verdict"] for t in data["trials"]] == ["sampling-bound", "learner-bound", "unknown"]
    assert data["population_diagnosis"]["label"] == "Population pop (3 trials together)"
    assert data["trials"][1]["figures"]["learner_fraction"] == pytest.approx(0.8 / 0.95)
    json.dumps(data, allow_nan=False)


def test_one_trial_has_no_population_verdict(store: Store) -> None:
    result = diagnose_target("PPO_00001", store=store.uri, population_ref="pop")
    assert [t.name for t in result.trials] == ["PPO_00001"]
    assert result.population_report is None and result.to_json()["population_diagnosis"] is None
    assert result.verdicts == {"PPO_00001": "learner-bound"}


def test_a_trial_without_a_time_split_is_unknown_not_a_guess(store: Store) -> None:
    result = diagnose_target("PPO_00002", store=store.uri)
    (report,) = result.reports
    assert report.verdict == "unknown" and report.split.iterations == 0
    assert result.shares == {"PPO_00002": []}
    assert not result.has_figures


def test_diagnose_target_reads_every_trial_of_a_population(store: Store) -> None:
    result = diagnose_target("pop", store=store.uri)
    assert result.store == store.uri and result.population.name == "pop"
    assert list(result.verdicts) == ["PPO_00000", "PPO_00001", "PPO_00002"]


# --- where --timeline looks for the population's Ray -----------------------------------------


def test_an_address_given_is_the_address(tmp_path: Path) -> None:
    assert population_address("anything", address="10.0.0.1:6379") == "10.0.0.1:6379"


def test_a_results_folder_without_its_session_record_runs_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "pop"
    folder.mkdir()
    (folder / RESOLVED_FILE).write_text("name: pop\n")
    with pytest.raises(NothingRunning, match=f"no {SESSION_FILE} here"):
        population_address(str(folder))


def test_a_population_name_means_the_results_folder_mlflow_records(
    store: Store, tmp_path: Path
) -> None:
    folder = tmp_path / "results" / "pop"
    folder.mkdir(parents=True, exist_ok=True)
    dead = 2**22 + 12345  # above the default pid_max: never a live process
    (folder / SESSION_FILE).write_text(json.dumps({"driver_pid": dead, "session_dir": "x"}))
    with pytest.raises(NothingRunning, match=rf"driver \(pid {dead}\) has exited"):
        population_address("pop", store=store.uri)


def test_a_population_that_records_no_results_folder_says_so(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.trial(store.population("bare"), "PPO_00000")
    with pytest.raises(NothingRunning, match="population bare records no results folder"):
        population_address("bare", store=store.uri)
