"""`workbench resume` asks Tune's saved search, not only its trials, whether a population has
finished. A searcher with a concurrency limit (Optuna with `max_concurrent: 1`, random
search too) makes trials one at a time: a run stopped between one trial's end and the next
one's start leaves every trial it made TERMINATED and trials still to make. Seen in CI: the
resume said "has finished; nothing to resume" and the study kept one trial of two. The
search states here are written by Ray's own SearchGenerator and BasicVariantGenerator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ray import tune
from ray.tune.experiment import Experiment
from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter, SearchGenerator

from workbench.errors import ExperimentError
from workbench.run.results_folder import nothing_to_resume, search_has_more
from workbench.tune_ext.optuna_study import StudySearch

SESSION = "2026-12-01_10-00-00"


def _trainable(config: dict[str, float]) -> dict[str, float]:
    return {"score": config["lr"]}


def _experiment(folder: Path, samples: int = 2) -> Experiment:
    space = {"lr": tune.loguniform(1e-4, 1e-2)}
    return Experiment(
        "probe",
        run=_trainable,
        num_samples=samples,
        config=space,
        storage_path=str(folder / "storage"),
    )


def _optuna(folder: Path) -> SearchGenerator:
    """Optuna one trial at a time, as the workbench builds it (`search_algorithm`)."""
    searcher = StudySearch(folder / "absent", "probe", metric="score", mode="max", seed=0)
    search = SearchGenerator(ConcurrencyLimiter(searcher, max_concurrent=1))
    experiment = _experiment(folder)
    search.set_search_properties("score", "max", experiment.spec["config"])
    search.add_configurations([experiment])
    return search


def _random(folder: Path) -> BasicVariantGenerator:
    search = BasicVariantGenerator(max_concurrent=1, random_state=0)
    search.add_configurations([_experiment(folder)])
    return search


def _folder(tmp_path: Path, trials: list[str]) -> Path:
    """A results folder whose snapshot holds ``trials``, every one TERMINATED."""
    folder = tmp_path / "probe"
    folder.mkdir()
    data = [[json.dumps({"trial_id": t, "status": "TERMINATED"}), "{}"] for t in trials]
    (folder / f"experiment_state-{SESSION}.json").write_text(json.dumps({"trial_data": data}))
    return folder


def test_stopped_between_optuna_trials_there_is_something_to_resume(tmp_path: Path) -> None:
    search = _optuna(tmp_path)
    first = search.next_trial()
    assert first is not None and search.next_trial() is None  # one at a time
    folder = _folder(tmp_path, [first.trial_id])
    search.save_to_dir(str(folder), SESSION)

    assert search_has_more(folder, created=1)
    assert nothing_to_resume(folder, "probe", restart_errored=False) is None


def test_stopped_between_random_search_trials_there_is_something_to_resume(
    tmp_path: Path,
) -> None:
    search = _random(tmp_path)
    first = search.next_trial()
    assert first is not None
    folder = _folder(tmp_path, [first.trial_id])
    search.save_to_dir(str(folder), SESSION)

    assert nothing_to_resume(folder, "probe", restart_errored=False) is None


def test_every_trial_made_and_ended_is_finished(tmp_path: Path) -> None:
    search = _random(tmp_path)
    made = []
    while (trial := search.next_trial()) is not None:
        made.append(trial.trial_id)
        search.on_trial_complete(trial.trial_id)
    assert len(made) == 2
    folder = _folder(tmp_path, made)
    search.save_to_dir(str(folder), SESSION)

    assert not search_has_more(folder, created=2)
    done = nothing_to_resume(folder, "probe", restart_errored=False)
    assert done is not None and "has finished (2 trials, 0 errored)" in done


def test_a_search_a_stop_rule_ended_is_finished_with_trials_unmade(tmp_path: Path) -> None:
    # Tune finishes the search when the stopper's stop_all() says so (a return target
    # met): the population has ended with fewer trials than planned.
    search = _optuna(tmp_path)
    first = search.next_trial()
    assert first is not None
    search.set_finished()
    folder = _folder(tmp_path, [first.trial_id])
    search.save_to_dir(str(folder), SESSION)

    assert not search_has_more(folder, created=1)
    assert nothing_to_resume(folder, "probe", restart_errored=False) is not None


def test_the_newest_search_state_decides(tmp_path: Path) -> None:
    search = _optuna(tmp_path)
    first = search.next_trial()
    assert first is not None
    folder = _folder(tmp_path, [first.trial_id])
    search.save_to_dir(str(folder), "2026-12-01_09-00-00")  # the first session's
    search.set_finished()
    search.save_to_dir(str(folder), SESSION)  # the resume's, which ended it

    assert not search_has_more(folder, created=1)


def test_no_search_state_goes_by_the_trials(tmp_path: Path) -> None:
    folder = _folder(tmp_path, ["a"])
    assert not search_has_more(folder, created=1)
    assert nothing_to_resume(folder, "probe", restart_errored=False) is not None


def test_a_damaged_search_state_is_one_clear_error(tmp_path: Path) -> None:
    folder = _folder(tmp_path, ["a"])
    damaged = folder / f"search_gen_state-{SESSION}.json"
    damaged.write_bytes(b"\x80\x05truncated")
    with pytest.raises(ExperimentError) as err:
        nothing_to_resume(folder, "probe", restart_errored=False)
    assert err.value.exit_code == 2
    message = str(err.value)
    assert str(damaged) in message and "search state cannot be read" in message
