"""The score (the mean return of the last K episodes, carried across iterations and
checkpoints) and the evaluation that confirms a stop: exact numbers, no Ray."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from workbench.experiment.schema import StopSection
from workbench.names import (
    EVAL_EPISODES_METRIC,
    EVAL_RETURN_METRIC,
    EVAL_STD_METRIC,
    SCORE_EPISODES_METRIC,
    SCORE_METRIC,
    SCORE_STD_METRIC,
)
from workbench.run.stopping import RulesStopper
from workbench.run.summary import confirmation_line
from workbench.trial.manifest import read_manifest
from workbench.trial.score import (
    RETURNS_KEY,
    SCORE_FILE,
    ScoreSettings,
    ScoreWindow,
    episode_returns,
    evaluate_module,
    nested,
    pop_returns,
)
from workbench.trial.trainable import seeded_trainable

# --- the window on constructed episode streams ------------------------------------------------


def test_before_any_episode_there_is_no_score_only_a_count_of_zero() -> None:
    window = ScoreWindow(5)
    assert window.metrics() == {SCORE_EPISODES_METRIC: 0.0}
    window.push([])
    window.push([math.nan])  # not an episode's return: never averaged in, never counted
    assert window.metrics() == {SCORE_EPISODES_METRIC: 0.0}
    assert window.mean is None and window.total == 0
    assert not window.evaluation_due(-1e9)


def test_the_score_is_the_mean_and_std_of_the_last_k_returns_across_iterations() -> None:
    window = ScoreWindow(4)
    window.push([10.0, 20.0])  # iteration 1: two episodes ended
    assert window.metrics() == {
        SCORE_EPISODES_METRIC: 2.0,
        SCORE_METRIC: 15.0,
        SCORE_STD_METRIC: 5.0,
    }
    window.push([])  # iteration 2: none ended; the score stays
    assert window.metrics()[SCORE_METRIC] == 15.0
    window.push([30.0, 40.0, 50.0])  # iteration 3: the window wraps, 10 falls out
    metrics = window.metrics()
    assert list(window.returns) == [20.0, 30.0, 40.0, 50.0]
    assert metrics[SCORE_EPISODES_METRIC] == 4.0
    assert metrics[SCORE_METRIC] == 35.0
    assert metrics[SCORE_STD_METRIC] == pytest.approx(math.sqrt(125.0))
    assert window.total == 5
    window.push(np.array([100.0, 100.0, 100.0, 100.0, 100.0], dtype=np.float32))
    assert window.metrics() == {
        SCORE_EPISODES_METRIC: 4.0,
        SCORE_METRIC: 100.0,
        SCORE_STD_METRIC: 0.0,
    }


def test_a_window_of_one_is_the_last_episode() -> None:
    window = ScoreWindow(1)
    window.push([3.0, 7.0])
    assert window.metrics() == {
        SCORE_EPISODES_METRIC: 1.0,
        SCORE_METRIC: 7.0,
        SCORE_STD_METRIC: 0.0,
    }
    with pytest.raises(ValueError, match="at least one episode"):
        ScoreWindow(0)


def test_the_window_survives_a_checkpoint_round_trip(tmp_path: Path) -> None:
    window = ScoreWindow(3)
    window.push([1.0, 2.0, 3.0, 4.0])
    window.refused()
    window.push([5.0])
    window.save(tmp_path)
    assert json.loads((tmp_path / SCORE_FILE).read_text()) == {
        "size": 3,
        "returns": [3.0, 4.0, 5.0],
        "total": 5,
        "refused_at": 4,
    }
    restored = ScoreWindow(3)
    assert restored.restore(tmp_path)
    assert restored.state() == window.state()
    assert restored.metrics() == window.metrics()
    # A smaller window (the experiment changed since) keeps the newest returns.
    smaller = ScoreWindow(2)
    smaller.restore(tmp_path)
    assert list(smaller.returns) == [4.0, 5.0] and smaller.total == 5
    # A checkpoint from before the score: an empty window, said so.
    empty = ScoreWindow(3)
    empty.push([9.0])
    assert not empty.restore(tmp_path / "missing")
    assert empty.metrics() == {SCORE_EPISODES_METRIC: 0.0} and empty.total == 0


def test_a_refused_candidate_is_evaluated_again_only_after_a_whole_new_window() -> None:
    window = ScoreWindow(3)
    window.push([480.0, 490.0])
    assert window.evaluation_due(475.0)
    assert not window.evaluation_due(490.0)  # the mean is 485
    window.refused()
    window.push([500.0, 500.0])  # still at the target, but 2 < 3 new episodes
    assert not window.evaluation_due(475.0)
    window.push([500.0])  # every episode in the window is new since the refusal
    assert window.evaluation_due(475.0)
    window.push([0.0, 0.0])  # renewed, but below the target
    assert not window.evaluation_due(475.0)


# --- the returns from the env runners to the trainable ------------------------------------------


def _episode(id_: str, ret: float, done: bool) -> Any:
    return SimpleNamespace(id_=id_, is_done=done, get_return=lambda: ret)


def test_an_episode_s_return_adds_the_chunks_earlier_samples_returned() -> None:
    samples = [_episode("a", 5.0, True), _episode("b", 2.0, False), _episode("c", 1.0, True)]
    earlier = {"a": [_episode("a", 10.0, False), _episode("a", 20.0, False)]}
    assert episode_returns(samples, earlier) == [35.0, 1.0]
    assert episode_returns([], earlier) == []


def test_the_returns_leave_the_result_they_came_in() -> None:
    result: dict[str, Any] = {
        "env_runners": {RETURNS_KEY: [1.0, np.float32(2.5)], "episode_return_mean": 1.75},
        "evaluation": {"env_runners": {RETURNS_KEY: [9.0]}},
    }
    assert pop_returns(result) == [1.0, 2.5]
    assert result == {
        "env_runners": {"episode_return_mean": 1.75},
        "evaluation": {"env_runners": {}},
    }
    assert pop_returns(result) == []  # none logged this iteration
    assert pop_returns({"env_runners": {RETURNS_KEY: math.nan}}) == []  # RLlib's empty peek
    # One episode ended: RLlib compiles the one-item series to the item itself.
    assert pop_returns({"env_runners": {RETURNS_KEY: 21.0}}) == [21.0]
    assert pop_returns({"env_runners": {RETURNS_KEY: np.float32(21.0)}}) == [21.0]
    assert pop_returns({}) == []
    assert nested({SCORE_METRIC: 1.0, SCORE_EPISODES_METRIC: 2.0, EVAL_RETURN_METRIC: 3.0}) == {
        "score": {"return_mean": 1.0, "episodes": 2.0},
        "eval": {"return_mean": 3.0},
    }


# --- the trainable: score with every result, a stop the evaluation refuses ----------------------


class _FakeAlgorithm:
    """What seeded_trainable needs of an RLlib Algorithm: a step whose env runners
    report episodes (here: every iteration four episodes of return 480), and
    checkpoints of its own state."""

    def __init__(self, config: Any = None, **kwargs: Any) -> None:
        self.config = config
        self.iteration = 0
        self._time_total = 0.0
        self._timesteps_total = 0
        self._episodes_total = 0

    def step(self) -> dict[str, Any]:
        self.iteration += 1
        returns = [480.0] * 4
        return {
            "training_iteration": self.iteration,
            "env_runners": {RETURNS_KEY: returns, "episode_return_mean": 480.0},
        }

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        (Path(checkpoint_dir) / "algorithm.json").write_text(json.dumps(self.iteration))

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        self.iteration = json.loads((Path(checkpoint_dir) / "algorithm.json").read_text())


def _trainable(settings: ScoreSettings, passes_from: int) -> Any:
    """A trial whose training return is high and whose evaluation (the stub in place of
    the rollout) is low until iteration ``passes_from``."""
    base = seeded_trainable(_FakeAlgorithm, settings)

    class Stubbed(base):  # type: ignore[misc,valid-type]
        def __init__(self, config: Any = None) -> None:
            super().__init__(config=config)
            self.evaluated_at: list[int] = []

        def evaluate_for_stop(self) -> dict[str, float]:
            self.evaluated_at.append(self.iteration)
            mean = 490.0 if self.iteration >= passes_from else 300.0
            return {
                EVAL_RETURN_METRIC: mean,
                EVAL_STD_METRIC: 12.5,
                EVAL_EPISODES_METRIC: float(settings.eval_episodes),
            }

    return Stubbed(config={})


def test_a_trial_the_evaluation_refuses_trains_on_until_an_evaluation_passes() -> None:
    stop = StopSection(return_mean=475.0, eval_episodes=100)
    settings = ScoreSettings(window=8, target=475.0, eval_episodes=100)
    trial = _trainable(settings, passes_from=7)
    stopper = RulesStopper(stop.tune_stop(), all_at_return=True)
    stopped_at = None
    for _ in range(20):
        result = trial.step()
        assert result["score"] == {"return_mean": 480.0, "return_std": 0.0, "episodes": 8.0} or (
            result["training_iteration"] == 1 and result["score"]["episodes"] == 4.0
        )
        assert RETURNS_KEY not in result["env_runners"]  # a list, not a metric: taken out
        if stopper("t1", result):
            stopped_at = result["training_iteration"]
            break
    # Score 480 >= 475 from iteration 1: evaluated then (refused, 300), again only once
    # 8 new episodes (2 iterations) had ended: 3 and 5 (refused), 7 (passed: stop).
    assert trial.evaluated_at == [1, 3, 5, 7]
    assert stopped_at == 7
    assert stopper.stop_all() and stopper.reached_by == "t1"
    assert stopper.reached == {
        EVAL_RETURN_METRIC: 490.0,
        EVAL_STD_METRIC: 12.5,
        EVAL_EPISODES_METRIC: 100.0,
        SCORE_METRIC: 480.0,
        SCORE_EPISODES_METRIC: 8.0,
        "training_iteration": 7.0,
    }
    assert confirmation_line(stopper.reached, "PPO_00001") == (
        "Return target reached by PPO_00001 at iteration 7: score 480.0 over 8 episodes, "
        "confirmed by its evaluation: 490.0 ± 12.5 over 100 episodes"
    )


def test_without_an_evaluation_the_score_alone_stops_and_nothing_is_rolled_out() -> None:
    stop = StopSection(return_mean=475.0, eval_episodes=0)
    assert stop.tune_stop() == {SCORE_METRIC: 475.0}
    assert StopSection(return_mean=475.0).tune_stop() == {EVAL_RETURN_METRIC: 475.0}
    trial = _trainable(ScoreSettings(window=8, target=475.0, eval_episodes=0), passes_from=99)
    stopper = RulesStopper(stop.tune_stop(), all_at_return=True)
    result = trial.step()
    assert "eval" not in result and trial.evaluated_at == []
    assert stopper("t0", result) and stopper.reached[SCORE_METRIC] == 480.0


def test_eval_from_evaluates_below_the_target_and_the_evaluation_alone_stops() -> None:
    # The training score (480) stays below the target (490): without eval_from the
    # policy is never evaluated; with eval_from 450 it is, and its evaluation (490 from
    # iteration 3) meets the target although the score never does.
    stop = StopSection(return_mean=490.0, eval_episodes=100, eval_from=450.0)
    stopper = RulesStopper(stop.tune_stop(), all_at_return=True)
    never = _trainable(ScoreSettings(window=8, target=490.0, eval_episodes=100), passes_from=1)
    for _ in range(5):
        assert not stopper("t0", never.step())
    assert never.evaluated_at == []
    settings = ScoreSettings(window=8, target=490.0, eval_episodes=100, eval_from=450.0)
    trial = _trainable(settings, passes_from=3)
    stopped_at = None
    for _ in range(10):
        result = trial.step()
        if stopper("t1", result):
            stopped_at = result["training_iteration"]
            break
    assert trial.evaluated_at == [1, 3] and stopped_at == 3
    assert stopper.reached[SCORE_METRIC] == 480.0 and stopper.reached[EVAL_RETURN_METRIC] == 490.0


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"eval_from": 400.0}, "needs a return target"),
        ({"return_mean": 475.0, "eval_episodes": 0, "eval_from": 400.0}, "eval_episodes > 0"),
        ({"return_mean": 475.0, "eval_from": 480.0}, "a value <= 475"),
    ],
)
def test_eval_from_without_a_confirmed_target_or_above_it_is_refused(
    fields: dict[str, Any], words: str
) -> None:
    with pytest.raises(ValidationError, match=words):
        StopSection(**fields)


def test_the_trainable_checkpoints_its_window_and_a_restore_carries_it(tmp_path: Path) -> None:
    settings = ScoreSettings(window=6, target=None)
    donor = _trainable(settings, passes_from=1)
    for _ in range(3):
        donor.step()
    donor.save_checkpoint(str(tmp_path))
    manifest = read_manifest(tmp_path)
    assert manifest is not None and SCORE_FILE in manifest["files"]  # checked like the rest
    # A PBT exploit: another trial's actor restores the donor's checkpoint.
    clone = _trainable(settings, passes_from=1)
    clone.load_checkpoint(str(tmp_path))
    assert clone.score_window.state() == donor.score_window.state()
    assert clone.step()["score"]["episodes"] == 6.0
    assert clone.score_window.total == 16


# --- the evaluation itself: the same rollout `workbench eval` runs --------------------------------


def test_the_trial_s_evaluation_is_workbench_eval_s_rollout(tmp_path: Path) -> None:
    from tests.support.policies import learner_group_checkpoint
    from workbench.policy.checkpoint import load_module, read_checkpoint
    from workbench.policy.evaluate import evaluate_checkpoint

    folder = learner_group_checkpoint(tmp_path, "PPO", "sim_ext/CartPole-v1")
    checkpoint = read_checkpoint(folder)
    module = load_module(checkpoint)
    settings = ScoreSettings(target=475.0, eval_episodes=30, deterministic=True, eval_seed=7)
    before = torch.random.get_rng_state()
    ours = evaluate_module(
        module,
        env_id="sim_ext/CartPole-v1",
        env_config={},
        normalize_actions=True,
        clip_actions=False,
        settings=settings,
    )
    assert torch.equal(torch.random.get_rng_state(), before)  # training's stream untouched
    theirs = evaluate_checkpoint(checkpoint, episodes=30, deterministic=True, seed=7).stats()
    assert ours[EVAL_RETURN_METRIC] == pytest.approx(theirs["return_mean"])
    assert ours[EVAL_STD_METRIC] == pytest.approx(theirs["return_std"])
    assert ours[EVAL_EPISODES_METRIC] == 30.0
    again = evaluate_module(
        module,
        env_id="sim_ext/CartPole-v1",
        env_config={},
        normalize_actions=True,
        clip_actions=False,
        settings=settings,
    )
    assert again[EVAL_RETURN_METRIC] == ours[EVAL_RETURN_METRIC]


# --- what ranks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "file", ["cartpole_pbt.yaml", "pendulum_pb2.yaml", "cartpole_asha_optuna.yaml"]
)
def test_schedulers_and_searchers_rank_by_the_score_or_the_short_evaluation(file: str) -> None:
    """Never by RLlib's per-iteration mean return: PBT and PB2 by the members' short
    evaluations (scheduler.rank_on: evaluation, the default) or the score; ASHA by the
    score; Optuna's study by a trial's best short evaluation (its score without them)."""
    from tests.support.schedulers import built_scheduler, built_searcher
    from workbench.experiment.loading import load_experiment
    from workbench.experiment.resolve import resolve
    from workbench.trial.candidates import CANDIDATE_BEST_METRIC, CANDIDATE_RETURN_METRIC

    path = Path(__file__).resolve().parents[2] / "experiments" / file
    resolved = resolve(load_experiment(path), path, check_results=False)
    experiment = resolved.experiment
    section = experiment.scheduler
    if section.type in ("pbt", "pb2"):
        by_evaluation = section.rank_on == "evaluation"  # type: ignore[union-attr]
        expected = CANDIDATE_RETURN_METRIC if by_evaluation else SCORE_METRIC
    else:
        expected = SCORE_METRIC
    assert built_scheduler(resolved)._metric == expected
    if experiment.search.type == "optuna":  # random search ranks nothing
        searcher = built_searcher(resolved)
        inner = getattr(searcher, "searcher", searcher)  # behind a ConcurrencyLimiter
        evaluated = experiment.evaluation.every > 0
        assert inner.metric == (CANDIDATE_BEST_METRIC if evaluated else SCORE_METRIC)


@pytest.mark.parametrize("ended", [0, 1, 2])
def test_every_episode_rllib_gathers_reaches_the_window(ended: int) -> None:
    """Through RLlib's own metrics: an env runner logs each ended episode's return as the
    callback does, the algorithm aggregates the runner's metrics and compiles its result.
    With exactly one episode the compiled value is a bare number, which the window once
    dropped (an iteration's only episode lost from the score)."""
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    runner = MetricsLogger()
    returns = [21.0 + i for i in range(ended)]
    for value in returns:
        runner.log_value(RETURNS_KEY, value, reduce="item_series")
    algorithm = MetricsLogger()
    algorithm.aggregate([runner.reduce()], key="env_runners")
    result = algorithm.compile()
    popped = pop_returns(result)
    assert popped == returns
    window = ScoreWindow(20)
    window.push(popped)
    assert window.metrics()[SCORE_EPISODES_METRIC] == ended
