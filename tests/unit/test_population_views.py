"""What the inspection commands print, built in `workbench.analysis` (`populations`,
`leaderboards`, `histories`) from a small real sqlite store: a population and its
leaderboard as JSON, one trial in detail, a population's lineage, and the population a
`workbench diagnose` TARGET means."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.support.stores import EXPLOIT, Store, new_store
from workbench.analysis.histories import PopulationLineage, population_lineage, trial_detail
from workbench.analysis.leaderboards import Population, leaderboard
from workbench.analysis.populations import find_population, find_target, populations, result_of
from workbench.cli.format import mean_std
from workbench.errors import ExperimentError
from workbench.names import (
    CLONED_FROM_TAG,
    ERROR_TAG,
    EVAL_EPISODES_METRIC,
    EVAL_RETURN_METRIC,
    EVAL_STD_METRIC,
    RESOLVED_FILE,
    RESULT_ITERATION_TAG,
    RESULT_RETURN_METRIC,
    RESULT_TRIAL_ID_TAG,
    RETURN_METRIC,
    SCORE_METRIC,
)
from workbench.tracking.population_summary import log_population_result
from workbench.trial.candidates import PopulationResult


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """Population "pop" (experiment "exp") of three trials: PPO_00001 the best (a clone,
    evaluated, categorical hp in a tag), PPO_00000, and PPO_00002 that failed unscored."""
    store = new_store(tmp_path / "results")
    pop = store.population("pop", results_dir=tmp_path / "results" / "pop")
    store.trial(
        pop,
        "PPO_00000",
        returns=[1.0, 5.0, 3.0],
        metrics={"hp/lr": [0.1, 0.1, 0.2], "num_env_steps_sampled_lifetime": [10, 20, 30]},
        params={"lr": "0.1"},
    )
    store.trial(
        pop,
        "PPO_00001",
        returns=[2.0, 8.0],
        metrics={"hp/lr": [0.3, 0.2], EVAL_RETURN_METRIC: [7.5]},
        tags={CLONED_FROM_TAG: "PPO_00000", "hp/activation": "relu"},
        params={"lr": "0.3"},
    )
    store.trial(
        pop,
        "PPO_00002",
        tags={ERROR_TAG: "Traceback (most recent call last):\n  ...\nValueError: boom\n"},
        status="FAILED",
    )
    store.lineage(pop, [EXPLOIT])
    return store


def test_a_population_as_json_is_its_leaderboard(store: Store) -> None:
    pop = find_population(store.client, "pop", store.uri)
    data = pop.to_json()
    assert list(data) == [
        "run_id",
        "name",
        "experiment",
        "status",
        "start_ms",
        "end_ms",
        "results_dir",
        "result",
        "trials",
    ]
    assert data["result"] is None  # none chosen (the population's run records none)
    assert (data["name"], data["experiment"]) == ("pop", "exp")
    assert data["results_dir"].endswith("/results/pop")
    assert [t["name"] for t in data["trials"]] == ["PPO_00001", "PPO_00000", "PPO_00002"]
    best, second, failed = data["trials"]
    assert best == {
        "run_id": best["run_id"],
        "name": "PPO_00001",
        "trial_id": "abc_00001",
        "status": "FINISHED",
        "iteration": 2,
        "env_steps": 0,
        # Logged before the score: ranked by the per-iteration mean return.
        "ranked_by": RETURN_METRIC,
        "best_return": 8.0,
        "last_score": 8.0,
        "last_return": 8.0,
        "cloned_from": "PPO_00000",
        "eval_return": 7.5,
        "eval_return_std": None,
        "eval_episodes": None,
        "hyperparameters": {"activation": "relu", "lr": 0.2},
    }
    assert (second["best_return"], second["last_return"], second["env_steps"]) == (5.0, 3.0, 30)
    assert second["cloned_from"] is None and second["eval_return"] is None
    # No return at all: null in JSON, not NaN (which JSON cannot hold).
    assert failed["best_return"] is None and failed["last_return"] is None
    assert failed["status"] == "FAILED"
    json.dumps(data, allow_nan=False)


def test_trials_with_a_score_are_ranked_by_it_with_the_raw_return_beside(tmp_path: Path) -> None:
    store = new_store(tmp_path / "results")
    pop = store.population("scored", results_dir=tmp_path / "results" / "scored")
    # PPO_00000: one lucky iteration (raw 480) on a score that never passed 300.
    store.trial(
        pop,
        "PPO_00000",
        returns=[200.0, 480.0, 250.0],
        metrics={SCORE_METRIC: [150.0, 300.0, 280.0]},
    )
    store.trial(
        pop,
        "PPO_00001",
        returns=[300.0, 420.0, 410.0],
        metrics={
            SCORE_METRIC: [200.0, 390.0, 400.0],
            EVAL_RETURN_METRIC: [423.1],
            EVAL_STD_METRIC: [61.0],
            EVAL_EPISODES_METRIC: [100.0],
        },
    )
    found = find_population(store.client, "scored", store.uri)
    first, second = leaderboard(found)
    assert (first.name, first.best_return, first.last_score, first.last_return) == (
        "PPO_00001",
        400.0,
        400.0,
        410.0,
    )
    assert first.score_metric == SCORE_METRIC and first.evaluation == (423.1, 61.0, 100)
    assert (second.name, second.best_return, second.last_return) == ("PPO_00000", 300.0, 250.0)
    assert found.best() is first
    assert mean_std(first.evaluation) == "423.1 ± 61 (n=100)" and mean_std(None) == "-"


def test_populations_read_their_trials_only_when_asked(store: Store) -> None:
    (bare,) = populations(store.client)
    assert bare.trials == []
    (full,) = populations(store.client, with_trials=True)
    assert [t.name for t in full.trials] == ["PPO_00000", "PPO_00001", "PPO_00002"]
    assert full.to_json()["trials"][0]["name"] == "PPO_00001"


def test_a_trial_reads_its_workbench_tags(store: Store) -> None:
    pop = find_population(store.client, "pop", store.uri)
    by_name = {t.name: t for t in pop.trials}
    assert by_name["PPO_00001"].cloned_from == "PPO_00000"
    assert by_name["PPO_00001"].eval_return == 7.5
    assert by_name["PPO_00001"].parent_run_id == pop.run_id
    assert by_name["PPO_00000"].error is None and by_name["PPO_00000"].cloned_from is None
    error = by_name["PPO_00002"].error
    assert error is not None and error.strip().splitlines()[-1] == "ValueError: boom"
    assert math.isnan(by_name["PPO_00002"].best_return)


def test_a_trial_in_detail(store: Store) -> None:
    detail = trial_detail(store.client, "PPO_00001", None, store.uri)
    assert detail.trial.name == "PPO_00001" and detail.population.name == "pop"
    # The population comes with all its trials (the ancestry reads the donor's history).
    assert len(detail.population.trials) == 3
    assert detail.schedule == [(1, 1, {"lr": 0.3}), (2, 2, {"lr": 0.2})]
    assert [(s.trial_name, s.first_iteration, s.last_iteration) for s in detail.segments] == [
        ("PPO_00000", 1, 1),
        ("PPO_00001", 2, 2),
    ]
    assert detail.stitched == {"lr": [(1, 0.1), (2, 0.2)], "activation": [(2, "relu")]}
    data = detail.to_json()
    assert data["population"] == "pop" and data["trial_id"] == "abc_00001"
    assert data["params"] == {"lr": "0.3"} and data["best_return"] == 8.0
    assert data["error"] is None
    assert data["schedule"] == [
        {"step": 1, "iteration": 1, "values": {"lr": 0.3}},
        {"step": 2, "iteration": 2, "values": {"lr": 0.2}},
    ]
    assert data["ancestry"] == [
        {"trial_id": "abc_00000", "name": "PPO_00000", "first_iteration": 1, "last_iteration": 1},
        {"trial_id": "abc_00001", "name": "PPO_00001", "first_iteration": 2, "last_iteration": 2},
    ]
    assert data["stitched_schedule"] == detail.stitched


def test_a_trial_in_detail_by_run_id_and_its_error(store: Store) -> None:
    failed = next(
        t for t in find_population(store.client, "pop", store.uri).trials if t.name == "PPO_00002"
    )
    detail = trial_detail(store.client, failed.run_id, "not-consulted", store.uri)
    assert detail.trial.run_id == failed.run_id
    data = detail.to_json()
    assert data["best_return"] is None and "ValueError: boom" in data["error"]
    assert data["schedule"] == [] and data["stitched_schedule"] == {}


def test_an_unknown_trial_names_the_trials_there_are(store: Store) -> None:
    with pytest.raises(ExperimentError, match="no trial 'PPO_00009' in population 'pop'"):
        trial_detail(store.client, "PPO_00009", None, store.uri)


def test_the_lineage_of_a_population(store: Store) -> None:
    lineage = population_lineage(store.client, "exp", store.uri)
    assert lineage.population.name == "pop"
    assert [r.seq for r in lineage.records] == [0]
    assert lineage.best_trial_id == "abc_00001"
    assert lineage.trials == {
        "abc_00000": ("PPO_00000", 3),
        "abc_00001": ("PPO_00001", 2),
        "abc_00002": ("PPO_00002", 0),
    }
    tree = lineage.tree()
    assert "PPO_00001 <- PPO_00000@1" in tree and "(best)" in tree
    (record,) = lineage.to_json()
    assert {k: record[k] for k in EXPLOIT} == EXPLOIT


def test_a_population_without_exploits_has_an_empty_lineage(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    pop = store.population("solo")
    store.trial(pop, "PPO_00000")
    lineage = population_lineage(store.client, None, store.uri)
    assert lineage.records == [] and lineage.to_json() == []
    assert lineage.best_trial_id is None  # no return yet


# --- diagnose's TARGET ---------------------------------------------------------------------


def _results_folder(store: Store, tmp_path: Path) -> Path:
    folder = tmp_path / "results" / "pop"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RESOLVED_FILE).write_text("name: pop\n")
    return folder


def test_a_target_by_population_name_means_every_trial(store: Store) -> None:
    target = find_target("pop", store=store.uri, population_ref=None)
    assert target.uri == store.uri and target.population.name == "pop"
    assert [t.name for t in target.trials] == ["PPO_00000", "PPO_00001", "PPO_00002"]
    newest = find_target(None, store=store.uri, population_ref=None)
    assert newest.population.run_id == target.population.run_id


def test_a_target_by_trial_means_that_trial(store: Store) -> None:
    target = find_target("PPO_00001", store=store.uri, population_ref="pop")
    assert target.population.name == "pop" and [t.name for t in target.trials] == ["PPO_00001"]
    run_id = target.trials[0].run_id
    assert [t.run_id for t in find_target(run_id, store=store.uri, population_ref=None).trials] == [
        run_id
    ]


def test_a_results_folder_is_its_own_store_and_population(store: Store, tmp_path: Path) -> None:
    other = store.population("other", results_dir=tmp_path / "elsewhere")  # newer, not it
    store.trial(other, "PPO_00000")
    folder = _results_folder(store, tmp_path)
    target = find_target(str(folder), store=None, population_ref=None)
    assert target.uri == store.uri  # the results folder's mlflow.db, beside the folder
    assert target.population.name == "pop" and len(target.trials) == 3


def test_a_results_folder_mlflow_does_not_record_is_found_by_its_name(
    store: Store, tmp_path: Path
) -> None:
    folder = tmp_path / "moved" / "pop"
    folder.mkdir(parents=True)
    (folder / RESOLVED_FILE).write_text("name: pop\n")
    target = find_target(str(folder), store=store.uri, population_ref=None)
    assert target.population.name == "pop" and len(target.trials) == 3


def test_a_target_that_is_nothing_says_so(store: Store) -> None:
    with pytest.raises(ExperimentError) as info:
        find_target("nothing-like-it", store=store.uri, population_ref=None)
    message = str(info.value)
    assert "'nothing-like-it' is neither a results folder, a population" in message
    assert "no population or experiment named 'nothing-like-it'" in message


def test_no_target_in_an_empty_store_says_there_is_no_population(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    with pytest.raises(ExperimentError, match="holds no workbench population yet"):
        find_target(None, store=store.uri, population_ref=None)


def test_a_population_is_a_plain_dataclass_to_build_in_tests() -> None:
    pop = Population("r", "p", "e", "0", "FINISHED", 0, None, "")
    assert pop.best() is None and pop.to_json()["trials"] == []


# --- the population's result ---------------------------------------------------------------

# PPO_00000's policy of iteration 2, confirmed over 100 episodes: the population's result,
# although PPO_00001 has the better training score (8.0 against 5.0).
RESULT = PopulationResult(
    trial_id="abc_00000",
    trial_name="PPO_00000",
    iteration=2,
    checkpoint="PPO_00000/candidates/iteration_000002",
    return_mean=487.25,
    return_std=12.5,
    episodes=100,
    short_return_mean=500.0,
    eval_env_steps=51_000,
    eval_time_s=2.5,
)


def test_the_member_holding_the_result_is_the_best_one(store: Store) -> None:
    pop = find_population(store.client, "pop", store.uri)
    assert pop.result is None
    best = pop.best()
    assert best is not None and best.name == "PPO_00001"  # without one: the best score
    assert pop.result_line() == (
        "No result chosen (evaluated candidates are chosen when a population ends); "
        "best by training score: PPO_00001"
    )
    log_population_result(store.client, pop.run_id, RESULT)
    pop = find_population(store.client, "pop", store.uri)
    assert pop.result is not None
    # As the population's run records it: the figures and where the policy lies.
    assert (pop.result.trial_id, pop.result.trial_name, pop.result.iteration) == (
        "abc_00000",
        "PPO_00000",
        2,
    )
    assert pop.result.checkpoint == RESULT.checkpoint
    assert (pop.result.return_mean, pop.result.return_std, pop.result.episodes) == (
        487.25,
        12.5,
        100,
    )
    assert (pop.result.eval_env_steps, pop.result.eval_time_s) == (51_000, 2.5)
    best = pop.best()
    assert best is not None and best.name == "PPO_00000"
    assert pop.result_line() == (
        "The population's result: PPO_00000 at iteration 2: 487.2 +- 12.5 (n=100)"
    )
    data = pop.to_json()
    assert data["result"]["trial_name"] == "PPO_00000" and data["result"]["iteration"] == 2
    # The leaderboard still ranks by the training score.
    assert [t["name"] for t in data["trials"]] == ["PPO_00001", "PPO_00000", "PPO_00002"]


def test_the_lineage_marks_the_results_iteration(store: Store) -> None:
    before = population_lineage(store.client, "pop", store.uri)
    assert before.best_iteration is None
    assert before.tree().endswith(
        "* = the best trial PPO_00001's final policy and the weights it came from"
    )
    log_population_result(store.client, before.population.run_id, RESULT)
    lineage = population_lineage(store.client, "pop", store.uri)
    assert lineage.best_trial_id == "abc_00000" and lineage.best_iteration == 2
    lines = lineage.tree().splitlines()
    assert lines[0] == "* PPO_00000  [1-3]  (best)"
    assert lines[-1] == (
        "  * = the population's result, PPO_00000's policy of iteration 2, and the weights "
        "it came from"
    )


def test_a_result_whose_member_has_no_run_leaves_the_best_score() -> None:
    pop = Population("r", "p", "e", "0", "FINISHED", 0, None, "", result=RESULT)
    assert pop.best() is None  # no trials read: no member to name
    assert pop.result_line().startswith("The population's result: PPO_00000")


def test_result_of_reads_what_the_run_records_and_nothing_else() -> None:
    tags = {RESULT_TRIAL_ID_TAG: "abc_00003", RESULT_ITERATION_TAG: "7"}
    found = result_of(tags, {RESULT_RETURN_METRIC: 200.0})
    assert found is not None
    # The name defaults to the id; figures not logged are unknown, not zero.
    assert (found.trial_id, found.trial_name, found.iteration) == ("abc_00003", "abc_00003", 7)
    assert found.return_mean == 200.0 and math.isnan(found.return_std)
    assert found.episodes == 0 and found.checkpoint == ""
    unreadable = result_of({**tags, RESULT_ITERATION_TAG: "seven"}, {RESULT_RETURN_METRIC: 1.0})
    assert unreadable is not None and unreadable.iteration == 0
    assert result_of(tags, {}) is None  # no figure: no result
    assert result_of({}, {RESULT_RETURN_METRIC: 200.0}) is None  # whose, unknown
    assert result_of({RESULT_TRIAL_ID_TAG: ""}, {RESULT_RETURN_METRIC: 200.0}) is None


@pytest.mark.parametrize(
    ("scheduler", "said"),
    [
        ("asha", "(no exploits: asha does not clone members, PBT and PB2 do)"),
        ("pbt", "(no exploits yet)"),
        ("", "(no exploits yet)"),  # a store from before the scheduler was read
    ],
)
def test_a_population_whose_scheduler_never_clones_says_so(scheduler: str, said: str) -> None:
    pop = Population("r", "p", "e", "0", "FINISHED", 0, None, "", scheduler=scheduler)
    assert PopulationLineage(pop, []).tree().endswith(said)
