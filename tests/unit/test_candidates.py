"""The candidates for a population's result (workbench.trial.candidates): a member's short
evaluations logged, its best ``keep`` policies kept past checkpoint rotation (ties: the
newer one), the record of the population's result; and the trainable that evaluates
itself every ``evaluation.every`` iterations. No Ray."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest

from workbench.names import EVAL_EPISODES_METRIC, EVAL_RETURN_METRIC, EVAL_STD_METRIC
from workbench.trial.candidates import (
    CANDIDATE_FILE,
    EVALUATIONS_FILE,
    RESULT_FILE,
    CandidateSettings,
    Evaluated,
    PopulationResult,
    candidates_dir,
    evaluations,
    kept,
    ranks_among,
    read_result,
    record,
    write_result,
)
from workbench.trial.manifest import problem, read_manifest
from workbench.trial.score import EVAL_ENV_STEPS_METRIC, RETURNS_KEY, ScoreSettings
from workbench.trial.trainable import seeded_trainable


def _evaluated(iteration: int, mean: float, *, std: float = 1.0) -> Evaluated:
    return Evaluated(
        trial_id="t0",
        iteration=iteration,
        return_mean=mean,
        return_std=std,
        episodes=10,
        env_steps=100 * iteration,
        time_s=0.5,
        trained_env_steps=1000 * iteration,
    )


def _saver(saved: list[int], iteration: int) -> Any:
    """A ``save`` that writes a marker file, as a checkpoint's files would be."""

    def save(folder: Path) -> None:
        (folder / "policy.txt").write_text(str(iteration))
        saved.append(iteration)

    return save


def _kept(trial_dir: Path) -> list[tuple[int, float]]:
    return [(e.iteration, e.return_mean) for _, e in kept(trial_dir)]


def _folders(trial_dir: Path) -> list[str]:
    return sorted(p.name for p in candidates_dir(trial_dir).iterdir() if p.is_dir())


# --- which ranks -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "others", "keep", "ranks"),
    [
        (5.0, [], 2, True),  # the first evaluation is always kept
        (5.0, [9.0], 2, True),  # second of two
        (5.0, [9.0, 7.0], 2, False),  # third of three: two are better
        (8.0, [9.0, 7.0], 2, True),  # between them
        (7.0, [9.0, 7.0], 2, True),  # a tie with the worse one: kept (the newer)
        (9.0, [9.0, 9.0], 1, True),  # a tie with the best: kept
        (1.0, [2.0], 1, False),
    ],
)
def test_ranks_among_counts_only_strictly_better_ones(
    value: float, others: list[float], keep: int, ranks: bool
) -> None:
    assert ranks_among(value, others, keep) is ranks


@pytest.mark.parametrize(
    ("every", "episodes", "due_at"),
    [
        (2, 10, [2, 4, 6]),
        (1, 10, [1, 2, 3, 4, 5, 6]),
        (3, 10, [3, 6]),
        (0, 10, []),  # evaluation.every: 0 turns the candidates off
        (2, 0, []),  # no episodes: nothing to evaluate
    ],
)
def test_candidate_settings_due_every_n_iterations_never_at_0(
    every: int, episodes: int, due_at: list[int]
) -> None:
    settings = CandidateSettings(every=every, episodes=episodes, keep=2)
    assert [i for i in range(7) if settings.due(i)] == due_at
    assert settings.active is bool(due_at)


# --- record: the log, the kept ones ------------------------------------------------------


def test_keep_2_keeps_the_two_best_and_deletes_the_rest(tmp_path: Path) -> None:
    saved: list[int] = []
    returned = {}
    for iteration, mean in [(2, 10.0), (4, 30.0), (6, 20.0), (8, 5.0), (10, 40.0)]:
        returned[iteration] = record(
            tmp_path, _evaluated(iteration, mean), keep=2, save=_saver(saved, iteration)
        )
    # 8 (5.0) ranked third when it came: never saved; 2 and then 6 were pushed out.
    assert saved == [2, 4, 6, 10]
    assert returned[8] is None
    assert _kept(tmp_path) == [(10, 40.0), (4, 30.0)]  # best first
    assert _folders(tmp_path) == ["iteration_000004", "iteration_000010"]
    for path, evaluated in kept(tmp_path):
        # The checkpoint's files and its record beside them, whole.
        assert (path / "policy.txt").read_text() == str(evaluated.iteration)
        assert Evaluated.from_json(json.loads((path / CANDIDATE_FILE).read_text())) == evaluated
    assert returned[10] == candidates_dir(tmp_path) / "iteration_000010"
    # No staging folder left behind.
    assert not [p for p in candidates_dir(tmp_path).iterdir() if p.name.startswith(".")]
    # Every evaluation is in the log, kept or not, in order.
    assert [(e.iteration, e.return_mean) for e in evaluations(tmp_path)] == [
        (2, 10.0),
        (4, 30.0),
        (6, 20.0),
        (8, 5.0),
        (10, 40.0),
    ]


def test_a_tie_keeps_the_newer_policy(tmp_path: Path) -> None:
    saved: list[int] = []
    for iteration in (2, 4, 6):
        path = record(tmp_path, _evaluated(iteration, 50.0), keep=2, save=_saver(saved, iteration))
        # Each of them was kept when it came: the folder it names is there.
        assert path is not None and path.is_dir(), iteration
    assert saved == [2, 4, 6]
    # Three alike, two kept: the two newest (a member's later policy has trained longer).
    assert _kept(tmp_path) == [(6, 50.0), (4, 50.0)]
    assert _folders(tmp_path) == ["iteration_000004", "iteration_000006"]


def test_the_same_iteration_again_replaces_its_candidate(tmp_path: Path) -> None:
    # A restore (a retry, a resume) trains an iteration again: its newer evaluation wins.
    saved: list[int] = []
    record(tmp_path, _evaluated(4, 10.0), keep=2, save=_saver(saved, 4))
    record(tmp_path, _evaluated(4, 12.0), keep=2, save=_saver(saved, 40))
    assert _kept(tmp_path) == [(4, 12.0)]
    (path, _), *_ = kept(tmp_path)
    assert (path / "policy.txt").read_text() == "40"


def test_a_save_that_fails_leaves_no_candidate_and_no_staging_folder(tmp_path: Path) -> None:
    def broken(folder: Path) -> None:
        (folder / "half.bin").write_text("x")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        record(tmp_path, _evaluated(2, 10.0), keep=2, save=broken)
    assert kept(tmp_path) == []
    assert list(candidates_dir(tmp_path).iterdir()) == [candidates_dir(tmp_path) / EVALUATIONS_FILE]


def test_a_truncated_log_line_and_a_record_cut_short_are_skipped(tmp_path: Path) -> None:
    saved: list[int] = []
    record(tmp_path, _evaluated(2, 10.0), keep=2, save=_saver(saved, 2))
    record(tmp_path, _evaluated(4, 20.0), keep=2, save=_saver(saved, 4))
    log = candidates_dir(tmp_path) / EVALUATIONS_FILE
    # A line that is JSON but not an evaluation (its fields missing), then a process
    # killed while appending: the last line is half written.
    cut = json.dumps(_evaluated(6, 30.0).to_json())[:25]
    log.write_text(log.read_text() + '{"trial_id": "t0"}\n' + cut)
    assert [e.iteration for e in evaluations(tmp_path)] == [2, 4]
    # The resumed member's next evaluation goes on a line of its own, and is read.
    record(tmp_path, _evaluated(8, 1.0), keep=2, save=_saver(saved, 8))
    assert [e.iteration for e in evaluations(tmp_path)] == [2, 4, 8]
    assert log.read_text().endswith("\n") and cut + "\n" in log.read_text()
    # A candidate whose record was cut short is no candidate.
    (candidates_dir(tmp_path) / "iteration_000004" / CANDIDATE_FILE).write_text('{"trial_')
    assert _kept(tmp_path) == [(2, 10.0)]


def test_a_member_without_candidates_has_none(tmp_path: Path) -> None:
    assert kept(tmp_path / "nowhere") == []
    assert evaluations(tmp_path / "nowhere") == []
    candidates_dir(tmp_path).mkdir()
    (candidates_dir(tmp_path) / "iteration_000002").mkdir()  # no record: not written whole
    assert kept(tmp_path) == []


# --- the population's result -------------------------------------------------------------


def _result(**fields: Any) -> PopulationResult:
    data: dict[str, Any] = {
        "trial_id": "abc_00001",
        "trial_name": "PPO_00001",
        "iteration": 6,
        "checkpoint": "PPO_00001/candidates/iteration_000006",
        "return_mean": 487.25,
        "return_std": 12.5,
        "episodes": 100,
        "short_return_mean": 500.0,
        "confirmed": [
            {
                "trial": "PPO_00001",
                "iteration": 6,
                "final": False,
                "short_return_mean": 500.0,
                "return_mean": 487.25,
            }
        ],
        "candidates": 5,
        "eval_env_steps": 123_456,
        "eval_time_s": 3.5,
        "final": False,
    }
    data.update(fields)
    return PopulationResult(**data)


def test_the_population_result_round_trips_through_its_file(tmp_path: Path) -> None:
    result = _result()
    path = write_result(tmp_path, result)
    assert path == tmp_path / RESULT_FILE
    assert not list(tmp_path.glob("*.tmp"))
    assert read_result(tmp_path) == result
    assert result.checkpoint_path(tmp_path) == tmp_path / "PPO_00001/candidates/iteration_000006"
    assert result.summary() == "PPO_00001 at iteration 6: 487.2 +- 12.5 (n=100)"
    # Written again: replaced whole.
    write_result(tmp_path, _result(return_mean=490.0))
    again = read_result(tmp_path)
    assert again is not None and again.return_mean == 490.0


def test_a_result_file_from_a_newer_workbench_or_a_broken_one(tmp_path: Path) -> None:
    assert read_result(tmp_path) is None  # none chosen
    data = {**_result().to_json(), "chosen_by": "a later field"}
    (tmp_path / RESULT_FILE).write_text(json.dumps(data))
    assert read_result(tmp_path) == _result()  # a field it does not know is left out
    (tmp_path / RESULT_FILE).write_text(json.dumps(data)[:40])
    assert read_result(tmp_path) is None  # cut short
    (tmp_path / RESULT_FILE).write_text(json.dumps({"trial_id": "x"}))
    assert read_result(tmp_path) is None  # fields missing
    write_result(tmp_path, _result(return_mean=math.nan))
    assert read_result(tmp_path) is None  # no figure to hand over


# --- the trainable: a short evaluation every `every` iterations ----------------------------


class _TunesAlgorithm:
    """What seeded_trainable needs of an RLlib Algorithm, counting iterations as Tune's
    Trainable does: ``step`` returns the result of iteration ``self.iteration + 1`` and
    ``train`` counts it once step has returned (RLlib's own Algorithm.step says so)."""

    def __init__(self, config: Any = None, **kwargs: Any) -> None:
        self.config = config
        self._iteration = 0
        self._time_total = 0.0
        self._timesteps_total = 0
        self._episodes_total = 0

    @property
    def iteration(self) -> int:
        return self._iteration

    def step(self) -> dict[str, Any]:
        return {
            "training_iteration": self.iteration + 1,
            "num_env_steps_sampled_lifetime": 1000 * (self.iteration + 1),
            "env_runners": {RETURNS_KEY: [20.0, 22.0], "episode_return_mean": 21.0},
        }

    def train(self) -> dict[str, Any]:
        result = self.step()
        self._iteration += 1
        return result

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        (Path(checkpoint_dir) / "algorithm.json").write_text(json.dumps(self.iteration))

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        self._iteration = json.loads((Path(checkpoint_dir) / "algorithm.json").read_text())


class _Storage:
    """Tune's StorageContext as far as the trial's folder goes."""

    def __init__(self, trial_dir: Path) -> None:
        self.trial_fs_path = str(trial_dir)


def _self_evaluating(trial_dir: Path, means: list[float], every: int = 2) -> Any:
    """A member whose short evaluations (the stub in place of the rollout) return
    ``means`` in turn, std 2 over 5 episodes of 600 env steps in all."""
    settings = ScoreSettings(window=4, candidates=CandidateSettings(every=every, episodes=5))
    base = seeded_trainable(_TunesAlgorithm, settings)
    returns = iter(means)

    class Stubbed(base):  # type: ignore[misc,valid-type]
        trial_id = "abc_00000"

        def __init__(self) -> None:
            super().__init__(config={})
            self._storage = _Storage(trial_dir)
            self.evaluated: list[int] = []  # the iteration each evaluation's policy trained

        def evaluate_short(self) -> dict[str, float]:
            self.evaluated.append(self.iteration + 1)  # the iteration step() produces
            return {
                EVAL_RETURN_METRIC: next(returns),
                EVAL_STD_METRIC: 2.0,
                EVAL_EPISODES_METRIC: 5.0,
                EVAL_ENV_STEPS_METRIC: 600.0,
            }

    return Stubbed()


def _evaluation(mean: float, best: float) -> dict[str, float]:
    return {"return_mean": mean, "return_std": 2.0, "episodes": 5.0, "best_return": best}


def test_results_carry_the_short_evaluation_and_the_best_kept_one(tmp_path: Path) -> None:
    trial = _self_evaluating(tmp_path, [100.0, 300.0, 200.0, 50.0])
    results = [trial.train() for _ in range(9)]
    shown = [r.get("candidate") for r in results]
    evaluated = [i for i, r in enumerate(shown) if r is not None and "return_mean" in r]
    assert len(evaluated) == 4  # every second iteration
    assert [b - a for a, b in itertools.pairwise(evaluated)] == [2, 2, 2]
    assert shown[: evaluated[0]] == [None] * evaluated[0]  # nothing kept yet: no best
    # The evaluation's own seconds (left out of the time split): measured, so only >= 0.
    assert all(shown[i].pop("time_s") >= 0 for i in evaluated)
    assert [shown[i] for i in evaluated] == [
        _evaluation(100.0, 100.0),
        _evaluation(300.0, 300.0),
        _evaluation(200.0, 300.0),  # below the best: the best kept one is still 300
        _evaluation(50.0, 300.0),
    ]
    # Between evaluations every result carries the best kept one (Optuna's value).
    between = [shown[i] for i in range(evaluated[0], 9) if i not in evaluated]
    assert between == [{"best_return": 100.0}] + [{"best_return": 300.0}] * (len(between) - 1)
    assert all("candidate" in r for r in results[evaluated[0] :])
    logged = evaluations(tmp_path)
    assert [e.return_mean for e in logged] == [100.0, 300.0, 200.0, 50.0]
    assert {(e.episodes, e.env_steps, e.return_std, e.trial_id) for e in logged} == {
        (5, 600, 2.0, "abc_00000")
    }
    # The member's lineage's env steps when it was evaluated: its result's counter.
    assert [e.trained_env_steps for e in logged] == [
        results[i]["num_env_steps_sampled_lifetime"] for i in evaluated
    ]
    assert [e.return_mean for _, e in kept(tmp_path)] == [300.0, 200.0]


def test_a_short_evaluation_is_of_the_iteration_its_result_reports(tmp_path: Path) -> None:
    trial = _self_evaluating(tmp_path, [20.0, 40.0, 60.0, 80.0])
    results = [trial.train() for _ in range(8)]
    # evaluation.every: 2 -> results 2, 4, 6, 8 carry an evaluation of their own policy.
    evaluated_in = [
        r["training_iteration"] for r in results if "return_mean" in r.get("candidate", {})
    ]
    assert evaluated_in == [2, 4, 6, 8]
    assert trial.evaluated == [2, 4, 6, 8]
    # Named and recorded by the iteration that trained the policy (what the lineage,
    # the checkpoints and `workbench lineage`'s mark of the result count in).
    assert [(e.iteration, e.return_mean) for e in evaluations(tmp_path)] == [
        (2, 20.0),
        (4, 40.0),
        (6, 60.0),
        (8, 80.0),
    ]
    assert _folders(tmp_path) == ["iteration_000006", "iteration_000008"]
    for path, evaluated in kept(tmp_path):
        manifest = read_manifest(path)
        assert manifest is not None
        assert manifest["progress"]["training_iteration"] == evaluated.iteration


def test_the_kept_candidates_are_whole_checkpoints_of_the_member(tmp_path: Path) -> None:
    trial = _self_evaluating(tmp_path, [1.0, 5.0, 3.0, 4.0, 2.0, 0.0], every=1)
    for _ in range(6):
        trial.train()
    assert [e.return_mean for _, e in kept(tmp_path)] == [5.0, 4.0]
    for path, _ in kept(tmp_path):
        assert (path / "algorithm.json").is_file()  # the algorithm's own state
        assert problem(path) is None  # sealed by its manifest like any checkpoint
        manifest = read_manifest(path)
        assert manifest is not None and CANDIDATE_FILE not in manifest["files"]
    # Only the kept ones are left: every other candidate folder was deleted.
    assert len(_folders(tmp_path)) == 2


def test_a_trainable_without_a_trial_folder_evaluates_but_keeps_nothing(tmp_path: Path) -> None:
    trial = _self_evaluating(tmp_path, [7.0, 8.0, 9.0], every=1)
    trial._storage = None  # built outside Tune
    results = [trial.train() for _ in range(3)]
    assert all("candidate" not in r for r in results)
    assert not candidates_dir(tmp_path).exists()
