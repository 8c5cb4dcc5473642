"""How a population's result is chosen (workbench.run.population_result.choose): every
member's kept candidates and its final checkpoint, the best few by short evaluation
confirmed over more episodes, the best confirmed one handed over. Trial folders laid out
as a run leaves them, the rollouts a stub: no Ray, no policy."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from workbench.policy.checkpoint import MODULE_DIR, final_checkpoint
from workbench.policy.evaluate import Evaluation
from workbench.run.population_result import choose, gather
from workbench.trial.candidates import (
    SHORT_EVAL_SEED_OFFSET,
    Evaluated,
    PopulationResult,
    read_result,
    record,
)

SEED = 7
SHORT, EPISODES = 10, 100
TRIALS = {"abc_00000": "PPO_00000", "abc_00001": "PPO_00001", "abc_00002": "PPO_00002"}


def _checkpoint(trial_dir: Path, index: int) -> Path:
    """A checkpoint folder as `final_checkpoint` recognises one (the learner group's module
    and its config; no manifest, as before manifests: taken as it is)."""
    folder = trial_dir / f"checkpoint_{index:06d}"
    (folder / MODULE_DIR).mkdir(parents=True)
    (folder / "learner_group" / "class_and_ctor_args.pkl").write_bytes(b"")
    return folder


def _candidate(trial_dir: Path, trial_id: str, iteration: int, short: float) -> Path:
    """A kept candidate, recorded as a member records one (its evaluation logged too)."""
    done = Evaluated(trial_id, iteration, short, 5.0, SHORT, env_steps=1000, time_s=0.25)
    path = record(trial_dir, done, keep=5, save=lambda folder: None)
    assert path is not None
    return path


class Rollouts:
    """The stub ``evaluate``: each checkpoint's returns over the short and the long
    evaluation, every episode 20 steps long; the calls it got."""

    def __init__(self) -> None:
        self.short: dict[Path, float] = {}
        self.long: dict[Path, float] = {}
        self.iterations: dict[Path, int] = {}
        self.broken: set[Path] = set()
        self.calls: list[tuple[str, int, int]] = []

    def __call__(self, path: Path, episodes: int, seed: int) -> Evaluation:
        path = path.resolve()
        self.calls.append((f"{path.parent.name}/{path.name}", episodes, seed))
        if path in self.broken:
            raise ValueError("the checkpoint is damaged")
        mean = (self.short if episodes == SHORT else self.long)[path]
        # Spread around the mean: +-1, the mean exact.
        returns = [mean + (1.0 if k % 2 else -1.0) for k in range(episodes)]
        return Evaluation(
            returns=returns,
            lengths=[20] * episodes,
            env_id="sim_ext/CartPole-v1",
            env_config={},
            seed=seed,
            deterministic=True,
            checkpoint=path,
            training_iteration=self.iterations.get(path),
            time_s=0.5,
        )


def _choose(
    results: Path, rollouts: Rollouts, confirm: int = 3
) -> tuple[PopulationResult, Evaluation] | None:
    return choose(
        results,
        TRIALS,
        episodes=EPISODES,
        short_episodes=SHORT,
        confirm=confirm,
        seed=SEED,
        evaluate=rollouts,
    )


@pytest.fixture
def population(tmp_path: Path) -> tuple[Path, Rollouts, dict[str, Path]]:
    """PPO_00000 kept its policies of iterations 4 (short 480: the best short evaluation,
    which its confirmation does not bear out: 350) and 6 (300) and ended at 8 (200);
    PPO_00001 kept iteration 2 (450, confirmed 400) and ended at 6 (470, confirmed 460:
    the result); PPO_00002 left nothing."""
    results = tmp_path / "results"
    p0, p1 = results / "PPO_00000", results / "PPO_00001"
    rollouts = Rollouts()
    paths = {
        "p0@4": _candidate(p0, "abc_00000", 4, 480.0),
        "p0@6": _candidate(p0, "abc_00000", 6, 300.0),
        "p0 final": _checkpoint(p0, 8),
        "p1@2": _candidate(p1, "abc_00001", 2, 450.0),
        "p1 final": _checkpoint(p1, 6),
    }
    (results / "PPO_00002").mkdir()
    rollouts.short = {
        paths["p0 final"].resolve(): 200.0,
        paths["p1 final"].resolve(): 470.0,
    }
    rollouts.iterations = {paths["p0 final"].resolve(): 8, paths["p1 final"].resolve(): 6}
    rollouts.long = {
        paths["p0@4"].resolve(): 350.0,
        paths["p0@6"].resolve(): 290.0,
        paths["p0 final"].resolve(): 190.0,
        paths["p1@2"].resolve(): 400.0,
        paths["p1 final"].resolve(): 460.0,
    }
    return results, rollouts, paths


def test_the_result_is_the_best_confirmed_not_the_best_short_evaluation(
    population: tuple[Path, Rollouts, dict[str, Path]],
) -> None:
    results, rollouts, paths = population
    chosen = _choose(results, rollouts, confirm=3)
    assert chosen is not None
    result, evaluation = chosen
    assert (result.trial_id, result.trial_name, result.iteration) == ("abc_00001", "PPO_00001", 6)
    assert result.final  # the member's final checkpoint, not a kept candidate
    assert result.checkpoint == "PPO_00001/checkpoint_000006"  # relative: the folder may move
    assert result.checkpoint_path(results).resolve() == paths["p1 final"].resolve()
    assert (result.return_mean, result.return_std, result.episodes) == (460.0, 1.0, EPISODES)
    assert result.short_return_mean == 470.0
    assert evaluation.checkpoint == paths["p1 final"].resolve() and evaluation.seed == SEED
    # The three best short evaluations confirmed (480, 470, 450), best confirmed first.
    assert result.confirmed == [
        {
            "trial": "PPO_00001",
            "iteration": 6,
            "final": True,
            "short_return_mean": 470.0,
            "return_mean": 460.0,
        },
        {
            "trial": "PPO_00001",
            "iteration": 2,
            "final": False,
            "short_return_mean": 450.0,
            "return_mean": 400.0,
        },
        {
            "trial": "PPO_00000",
            "iteration": 4,
            "final": False,
            "short_return_mean": 480.0,
            "return_mean": 350.0,
        },
    ]
    assert result.candidates == 5  # 3 kept, 2 final; PPO_00002 has none
    # The record in the results folder is the one returned.
    assert read_result(results) == result


def test_short_and_confirming_evaluations_use_their_own_seeds_and_episodes(
    population: tuple[Path, Rollouts, dict[str, Path]],
) -> None:
    results, rollouts, _ = population
    _choose(results, rollouts, confirm=3)
    short_seed = SEED + SHORT_EVAL_SEED_OFFSET
    # The final checkpoints short-evaluated on the members' short seeds, then the three
    # nominated ones confirmed on the experiment's.
    assert rollouts.calls == [
        ("PPO_00000/checkpoint_000008", SHORT, short_seed),
        ("PPO_00001/checkpoint_000006", SHORT, short_seed),
        ("candidates/iteration_000004", EPISODES, SEED),
        ("PPO_00001/checkpoint_000006", EPISODES, SEED),
        ("candidates/iteration_000002", EPISODES, SEED),
    ]


def test_the_evaluations_env_steps_and_time_are_counted(
    population: tuple[Path, Rollouts, dict[str, Path]],
) -> None:
    results, rollouts, _ = population
    chosen = _choose(results, rollouts, confirm=3)
    assert chosen is not None
    result, _ = chosen
    during_run = 3 * 1000  # the members' logged short evaluations
    finals = 2 * SHORT * 20  # the final checkpoints' short evaluations, 20 steps an episode
    confirming = 3 * EPISODES * 20
    assert result.eval_env_steps == during_run + finals + confirming
    assert result.eval_time_s == pytest.approx(3 * 0.25 + 2 * 0.5 + 3 * 0.5)


def test_confirm_bounds_the_candidates_rolled_out(
    population: tuple[Path, Rollouts, dict[str, Path]],
) -> None:
    results, rollouts, _ = population
    chosen = _choose(results, rollouts, confirm=1)
    assert chosen is not None
    result, _ = chosen
    # Only the best short evaluation is confirmed: it is the result, however it confirms.
    assert (result.trial_name, result.iteration, result.final) == ("PPO_00000", 4, False)
    assert result.checkpoint == "PPO_00000/candidates/iteration_000004"
    assert result.return_mean == 350.0 and len(result.confirmed) == 1
    assert [c for c in rollouts.calls if c[1] == EPISODES] == [
        ("candidates/iteration_000004", EPISODES, SEED)
    ]


def test_a_final_checkpoint_is_a_candidate_beside_the_kept_ones(tmp_path: Path) -> None:
    # A member that never evaluated itself (evaluation.every: 0): its final policy alone.
    results = tmp_path / "results"
    trial_dir = results / "PPO_00002"
    older, newest = _checkpoint(trial_dir, 3), _checkpoint(trial_dir, 5)
    assert final_checkpoint(trial_dir) == newest
    rollouts = Rollouts()
    rollouts.short = {older.resolve(): 500.0, newest.resolve(): 90.0}
    rollouts.long = {older.resolve(): 500.0, newest.resolve(): 95.0}
    rollouts.iterations = {newest.resolve(): 5}
    chosen = _choose(results, rollouts)
    assert chosen is not None
    result, _ = chosen
    # The newest checkpoint (the policy the member ended with), not an older better one.
    assert (result.trial_name, result.iteration, result.final) == ("PPO_00002", 5, True)
    assert (result.return_mean, result.candidates) == (95.0, 1)
    assert result.eval_env_steps == SHORT * 20 + EPISODES * 20


def test_equal_confirmations_go_to_the_better_nominated_one(tmp_path: Path) -> None:
    results = tmp_path / "results"
    low = _candidate(results / "PPO_00000", "abc_00000", 2, 400.0)
    high = _candidate(results / "PPO_00001", "abc_00001", 2, 420.0)
    rollouts = Rollouts()
    rollouts.long = {low.resolve(): 410.0, high.resolve(): 410.0}
    for _ in range(2):  # not by chance: the same each time
        chosen = _choose(results, rollouts)
        assert chosen is not None and chosen[0].trial_name == "PPO_00001"


def test_a_policy_that_cannot_be_evaluated_is_passed_over(
    population: tuple[Path, Rollouts, dict[str, Path]],
) -> None:
    results, rollouts, paths = population
    # PPO_00001's final checkpoint is damaged: no candidate (its short evaluation fails);
    # PPO_00001's kept one of iteration 2 cannot be confirmed: the next best is taken.
    rollouts.broken = {paths["p1 final"].resolve(), paths["p1@2"].resolve()}
    chosen = _choose(results, rollouts, confirm=3)
    assert chosen is not None
    result, _ = chosen
    assert result.candidates == 4
    assert (result.trial_name, result.iteration, result.return_mean) == ("PPO_00000", 4, 350.0)
    assert [(c["trial"], c["iteration"]) for c in result.confirmed] == [
        ("PPO_00000", 4),
        ("PPO_00000", 6),
    ]


def test_no_policy_to_evaluate_is_no_result(tmp_path: Path) -> None:
    results = tmp_path / "results"
    (results / "PPO_00000").mkdir(parents=True)  # a member that saved nothing
    rollouts = Rollouts()
    assert _choose(results, rollouts) is None
    assert rollouts.calls == []
    assert read_result(results) is None  # nothing written
    # Candidates that cannot be confirmed, none of them: no result either.
    _candidate(results / "PPO_00000", "abc_00000", 2, 10.0)
    rollouts.broken = {(results / "PPO_00000" / "candidates" / "iteration_000002").resolve()}
    assert _choose(results, rollouts) is None
    assert read_result(results) is None


def test_gather_lists_every_candidate_best_short_evaluation_first(
    population: tuple[Path, Rollouts, dict[str, Path]],
) -> None:
    results, rollouts, _ = population
    found, steps, seconds = gather(
        results, TRIALS, short_episodes=SHORT, seed=SEED, evaluate=rollouts
    )
    shown: Sequence[tuple[str, int, float, bool]] = [
        (c.trial_name, c.iteration, c.short_return_mean, c.final) for c in found
    ]
    assert shown == [
        ("PPO_00000", 4, 480.0, False),
        ("PPO_00001", 6, 470.0, True),
        ("PPO_00001", 2, 450.0, False),
        ("PPO_00000", 6, 300.0, False),
        ("PPO_00000", 8, 200.0, True),
    ]
    assert steps == 3 * 1000 + 2 * SHORT * 20
    assert seconds == pytest.approx(3 * 0.25 + 2 * 0.5)


def test_a_final_policy_identical_to_a_kept_candidate_is_judged_once(tmp_path: Path) -> None:
    """A member that ended right after keeping a candidate holds the same weights twice:
    the manifests list the same module files, and the final checkpoint is not confirmed
    again (it would take a confirmation slot from another policy)."""
    from workbench.run.population_result import policy_fingerprint
    from workbench.trial.manifest import MANIFEST_FILE

    results = tmp_path / "results"
    member = results / "PPO_00000"
    candidate = _candidate(member, "abc_00000", 4, 480.0)
    final = _checkpoint(member, 4)
    other = _checkpoint(results / "PPO_00001", 4)

    def manifest(folder: Path, module_hash: str) -> None:
        files = {
            "learner_group/learner/rl_module/default_policy/module_state.pkl": {
                "sha256": module_hash,
                "size": 10,
            },
            "algorithm_state.pkl": {"sha256": folder.name, "size": 5},  # not the policy
        }
        (folder / MANIFEST_FILE).write_text(json.dumps({"files": files, "policy": {"x": 1}}))

    manifest(candidate, "same")
    manifest(final, "same")
    manifest(other, "different")
    assert policy_fingerprint(candidate) == policy_fingerprint(final) is not None
    assert policy_fingerprint(other) != policy_fingerprint(final)
    assert policy_fingerprint(tmp_path) is None  # no manifest: nothing to compare
    rollouts = Rollouts()
    rollouts.short = {final.resolve(): 480.0, other.resolve(): 100.0}
    rollouts.long = {candidate.resolve(): 470.0, other.resolve(): 90.0}
    found = _choose(results, rollouts)
    assert found is not None
    result, _ = found
    assert result.candidates == 2  # the candidate and the other member's final policy
    assert [c["trial"] for c in result.confirmed] == ["PPO_00000", "PPO_00001"]
    assert not any(call.endswith("PPO_00000/checkpoint_000004") for call, *_ in rollouts.calls)
