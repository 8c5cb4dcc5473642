"""The score a trial is ranked, stopped and shown by, and the evaluation that confirms a stop.

RLlib 2.60's ``env_runners/episode_return_mean`` is the mean of the episodes that ended
in one iteration: about four on CartPole near a return of 475, so one lucky iteration
reads 476 for a policy that averages 423. The score is the mean return of the last K
episodes that ended, carried across iterations (`ScoreWindow`), reported with every
result as ``score/return_mean``, ``score/return_std`` and ``score/episodes`` beside the
raw per-iteration mean. K is the experiment's ``score.window``.

Before the first episode of a trial has ended there is no score: the result carries
``score/episodes: 0`` and no ``score/return_mean``. Tune's schedulers skip a result
without their metric (PBT and PB2 with ``require_attrs=False``, ASHA), the stop rule
cannot be met by it and MLflow logs nothing for it: nothing ever ranks a NaN.

The returns come from the env runners: `WorkbenchCallbacks.on_sample_end` logs each
finished episode's whole return (its earlier chunks included) as an item series, which
RLlib gathers from every runner, local or remote, into the iteration's result
(``env_runners/<RETURNS_KEY>``); the trainable takes it out of the result and into the
window. The window is saved in every checkpoint (``SCORE_FILE``) and restored with it,
so a resumed trial goes on with its own window and a PBT exploit, which restores the
donor's checkpoint, carries the donor's.

A stop on a return target is confirmed by an evaluation: when the score reaches the
target, the trial rolls out its current policy over ``stop.eval_episodes`` episodes in
its own process (batched over the vector env: `workbench.trial.rollout`), and reports
``eval/return_mean``, ``eval/return_std`` and ``eval/episodes``; the stop rule is met by
the evaluation, not by the score. A trial whose evaluation falls short keeps training
and is evaluated again only once a whole new window of episodes has ended (K episodes
after the refused evaluation) and its score is still at the target: the next evaluation
is then of a policy the refused one did not already judge.
"""

from __future__ import annotations

import json
import math
import numbers
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workbench.experiment.schema import Experiment
from workbench.names import (
    EVAL_EPISODES_METRIC,
    EVAL_METRIC_PREFIX,
    EVAL_RETURN_METRIC,
    EVAL_STD_METRIC,
    SCORE_EPISODES_METRIC,
    SCORE_METRIC,
    SCORE_STD_METRIC,
)
from workbench.trial.candidates import CandidateSettings
from workbench.trial.observation_filter import ObservationStats
from workbench.trial.rollout import Policy, rollout, torch_actor

# The window's default: the mean of 20 episodes has a fifth of one episode's variance
# (standard error 13 at CartPole's std of ~60 near the target, against 30 for the ~4
# episodes of one iteration), and near the target 20 episodes are ~5 iterations of the
# main job, about one PBT perturbation interval (docs/benchmarks/score-window.md).
DEFAULT_WINDOW = 20
DEFAULT_EVAL_EPISODES = 100
# Per-episode returns in an env runner's metrics (RLlib's item series: every runner's
# list, gathered into the iteration's result under env_runners/).
RETURNS_KEY = "workbench_episode_returns"
ENV_RUNNERS = "env_runners"
# The window in a checkpoint folder (listed in its manifest like every other file).
SCORE_FILE = "workbench_score.json"
EVAL_TIME_METRIC = EVAL_METRIC_PREFIX + "time_s"
EVAL_ENV_STEPS_METRIC = EVAL_METRIC_PREFIX + "env_steps"
# The most envs one evaluation steps at once (more episodes: batches of this many).
MAX_ENVS = 1024


@dataclass(frozen=True)
class ScoreSettings:
    """What a trial needs to score itself and confirm a stop (hashable: it keys the
    trainable class, `workbench.trial.trainable.seeded_trainable`)."""

    window: int = DEFAULT_WINDOW
    # The return target of the stop rule (None: no return target, never evaluated).
    target: float | None = None
    # Episodes of the confirming evaluation; 0: a stop on the score alone.
    eval_episodes: int = DEFAULT_EVAL_EPISODES
    # The score at which the policy is evaluated (None: the target).
    eval_from: float | None = None
    deterministic: bool = True
    eval_seed: int = 0
    # The short evaluations that find the population's result (workbench.trial.candidates).
    candidates: CandidateSettings = CandidateSettings()  # noqa: RUF009 (frozen)

    @property
    def confirms(self) -> bool:
        return self.target is not None and self.eval_episodes > 0

    @property
    def evaluate_at(self) -> float | None:
        """The score that makes an evaluation due (None: never evaluated)."""
        if not self.confirms:
            return None
        return self.target if self.eval_from is None else self.eval_from


class ScoreWindow:
    """The returns of the last ``size`` finished episodes, and when the trial's last
    refused evaluation was (counted in episodes ever pushed)."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a score window holds at least one episode, not {size}")
        self.size = size
        self.returns: deque[float] = deque(maxlen=size)
        self.total = 0  # episodes pushed, ever (across restores)
        self.refused_at: int | None = None  # `total` when an evaluation last fell short

    def push(self, returns: Iterable[float]) -> None:
        for value in returns:
            number = float(value)
            if math.isnan(number):
                continue  # not an episode's return: never averaged in
            self.returns.append(number)
            self.total += 1

    def metrics(self) -> dict[str, float]:
        """The score keys of a result: the mean and std only once an episode has ended."""
        out = {SCORE_EPISODES_METRIC: float(len(self.returns))}
        if self.returns:
            values = np.asarray(self.returns, dtype=np.float64)
            out[SCORE_METRIC] = float(values.mean())
            out[SCORE_STD_METRIC] = float(values.std())
        return out

    @property
    def mean(self) -> float | None:
        return float(np.mean(self.returns)) if self.returns else None

    def evaluation_due(self, target: float) -> bool:
        """Whether the trial's policy should be evaluated now: its score is at the target
        and no refused evaluation judged any episode of its window."""
        mean = self.mean
        if mean is None or mean < target:
            return False
        return self.refused_at is None or self.total - self.refused_at >= self.size

    def refused(self) -> None:
        self.refused_at = self.total

    # --- checkpoints -------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "returns": list(self.returns),
            "total": self.total,
            "refused_at": self.refused_at,
        }

    def load(self, state: dict[str, Any]) -> None:
        """A saved window into this one (this one's size: the experiment's now; a smaller
        one keeps the newest returns)."""
        self.returns = deque((float(v) for v in state.get("returns", [])), maxlen=self.size)
        self.total = int(state.get("total", len(self.returns)))
        refused = state.get("refused_at")
        self.refused_at = None if refused is None else int(refused)

    def save(self, folder: Path) -> Path:
        path = folder / SCORE_FILE
        path.write_text(json.dumps(self.state()))
        return path

    def restore(self, folder: Path) -> bool:
        """The window saved in a checkpoint folder; False (and an empty window) for a
        checkpoint saved before the workbench kept one."""
        path = folder / SCORE_FILE
        if not path.is_file():
            self.load({})
            return False
        self.load(json.loads(path.read_text()))
        return True


def episode_returns(
    samples: Sequence[Any], earlier_chunks: Mapping[Any, Sequence[Any]]
) -> list[float]:
    """The whole returns of the episodes that ended in one ``sample()`` call: each done
    episode's last chunk and the chunks of it an earlier call returned (what RLlib's
    ``get_metrics`` adds up for episode_return_mean)."""
    out = []
    for episode in samples:
        if not episode.is_done:
            continue
        total = float(episode.get_return())
        for chunk in earlier_chunks.get(episode.id_, ()):
            total += float(chunk.get_return())
        out.append(total)
    return out


def pop_returns(result: dict[str, Any]) -> list[float]:
    """Takes the returns of the episodes that ended in an iteration out of its result
    (they are a list, not a metric; none logged yet: no key)."""
    evaluation = result.get("evaluation")
    if isinstance(evaluation, dict) and isinstance(evaluation.get(ENV_RUNNERS), dict):
        evaluation[ENV_RUNNERS].pop(RETURNS_KEY, None)  # RLlib's own evaluation runners
    runners = result.get(ENV_RUNNERS)
    values = runners.pop(RETURNS_KEY, None) if isinstance(runners, dict) else None
    if values is None:
        return []
    if isinstance(values, numbers.Real):
        # RLlib 2.60 compiles a series of one item to that item and an empty one to
        # NaN: an iteration in which exactly one episode ended reads 21.0, not [21.0].
        value = float(values)
        return [] if math.isnan(value) else [value]
    return [float(v) for v in values]


def nested(flat: dict[str, float]) -> dict[str, dict[str, float]]:
    """``{"score/return_mean": x}`` as a result's nested ``{"score": {"return_mean": x}}``."""
    out: dict[str, dict[str, float]] = {}
    for key, value in flat.items():
        group, _, name = key.partition("/")
        out.setdefault(group, {})[name] = value
    return out


# --- the confirming evaluation -------------------------------------------------------------


def evaluate_module(
    module: Any,
    *,
    env_id: str,
    env_config: dict[str, Any],
    normalize_actions: bool,
    clip_actions: bool,
    settings: ScoreSettings,
    observation_filter: ObservationStats | None = None,
) -> dict[str, float]:
    """The module's policy over ``settings.eval_episodes`` episodes (episode k reset with
    seed ``eval_seed + k``, all of them at once on one vector env), as eval/* metrics.

    Torch's global random stream is forked: a stochastic evaluation draws the same
    actions for the same weights, and the trial's training draws what it would have
    drawn without the evaluation. ``observation_filter``: the statistics the trial's
    MeanStdFilter has now (env.normalize_observations), applied, not updated."""
    policy = Policy(
        module,
        module.action_space,
        normalize_actions=normalize_actions,
        clip_actions=clip_actions,
        deterministic=settings.deterministic,
        observation_filter=observation_filter,
    )
    episodes = settings.eval_episodes
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.eval_seed)
        returns, lengths = rollout(
            torch_actor(policy),
            env_id,
            env_config,
            episodes=episodes,
            seed=settings.eval_seed,
            max_envs=min(episodes, MAX_ENVS),
        )
    values = np.asarray(returns, dtype=np.float64)
    return {
        EVAL_RETURN_METRIC: float(values.mean()),
        EVAL_STD_METRIC: float(values.std()),
        EVAL_EPISODES_METRIC: float(len(values)),
        EVAL_TIME_METRIC: time.perf_counter() - start,
        EVAL_ENV_STEPS_METRIC: float(sum(lengths)),
    }


def score_settings(experiment: Experiment) -> ScoreSettings:
    """The settings of an experiment's trials."""
    return ScoreSettings(
        window=experiment.score.window,
        target=experiment.stop.return_mean,
        eval_episodes=experiment.stop.eval_episodes,
        eval_from=experiment.stop.eval_from,
        deterministic=experiment.evaluation.deterministic,
        eval_seed=experiment.seed,
        candidates=CandidateSettings(
            every=experiment.evaluation.every,
            episodes=experiment.evaluation.short_episodes,
            keep=experiment.evaluation.keep,
        ),
    )
