"""Candidates for the population's result: a member's policy evaluated as it trains, and
the best of them kept beyond checkpoint rotation.

A population's product is the best policy it ever produced, judged by evaluation, not by
a training window: a member may find the reward and lose it again, or be cloned over,
long before the run ends. Every ``evaluation.every`` iterations a member rolls out its
current policy over ``evaluation.short_episodes`` deterministic episodes (in its own
process, batched over the vector env), reports ``candidate/*`` with the result, and
appends the evaluation to its ``candidates/evaluations.jsonl``. When the evaluation
ranks among the member's best ``evaluation.keep``, the policy is saved as a whole
checkpoint under ``candidates/iteration_NNNNNN`` (``candidate.json`` beside RLlib's
files), where Tune's rotation (``checkpoint.keep``) never deletes it; the member's worse
candidates are deleted. When the population ends, the driver confirms the best
candidates over ``evaluation.episodes`` episodes and records the winner as the
population's result (``population_result.json``, `workbench.run.population_result`).

This module holds the records and the folder layout; both sides, the trial writing and
the driver and inspection commands reading, use it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from workbench.files import write_atomic

CANDIDATES_DIR = "candidates"
CANDIDATE_FILE = "candidate.json"
EVALUATIONS_FILE = "evaluations.jsonl"
RESULT_FILE = "population_result.json"
CANDIDATE_PREFIX = "candidate/"
CANDIDATE_RETURN_METRIC = CANDIDATE_PREFIX + "return_mean"
CANDIDATE_STD_METRIC = CANDIDATE_PREFIX + "return_std"
CANDIDATE_EPISODES_METRIC = CANDIDATE_PREFIX + "episodes"
CANDIDATE_BEST_METRIC = CANDIDATE_PREFIX + "best_return"
# Seconds the iteration spent evaluating and keeping its candidate (not training: the time
# split of `workbench diagnose` leaves them out of the iteration's shares).
CANDIDATE_TIME_METRIC = CANDIDATE_PREFIX + "time_s"
# Seeds of the short evaluations start here: never the confirming evaluation's episodes.
SHORT_EVAL_SEED_OFFSET = 50_000


@dataclass(frozen=True)
class CandidateSettings:
    """How a member evaluates itself while it trains (hashable: part of ScoreSettings)."""

    every: int = 0  # iterations between evaluations; 0: never
    episodes: int = 10
    keep: int = 2

    @property
    def active(self) -> bool:
        return self.every > 0 and self.episodes > 0

    def due(self, iteration: int) -> bool:
        return self.active and iteration > 0 and iteration % self.every == 0


@dataclass(frozen=True)
class Evaluated:
    """One short evaluation of a member's policy at one iteration."""

    trial_id: str
    iteration: int
    return_mean: float
    return_std: float
    episodes: int
    env_steps: int  # the evaluation's own env steps
    time_s: float
    trained_env_steps: int = 0  # the member's lineage's env steps at that iteration
    at: float = 0.0  # when it was made (time.time())

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Evaluated:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def candidates_dir(trial_dir: Path) -> Path:
    return trial_dir / CANDIDATES_DIR


def candidate_name(iteration: int) -> str:
    return f"iteration_{iteration:06d}"


def kept(trial_dir: Path) -> list[tuple[Path, Evaluated]]:
    """A member's kept candidates (checkpoint folder, its evaluation), best first."""
    folder = candidates_dir(trial_dir)
    out = []
    if folder.is_dir():
        for child in folder.iterdir():
            record = child / CANDIDATE_FILE
            if child.is_dir() and record.is_file():
                try:
                    out.append((child, Evaluated.from_json(json.loads(record.read_text()))))
                except (ValueError, TypeError):
                    continue  # a record cut short: not a candidate
    # Of equal evaluations the newer first: the one `record` keeps (`ranks_among`).
    return sorted(out, key=lambda pair: (-pair[1].return_mean, -pair[1].iteration))


def evaluations(trial_dir: Path) -> list[Evaluated]:
    """Every short evaluation a member made (kept or not), in order."""
    path = candidates_dir(trial_dir) / EVALUATIONS_FILE
    out = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                out.append(Evaluated.from_json(json.loads(line)))
            except (ValueError, TypeError):
                continue  # a line cut short by a killed process
    return out


def ranks_among(value: float, others: Iterable[float], keep: int) -> bool:
    """Whether ``value`` is among the best ``keep`` of ``others`` and itself (ties kept:
    the newer policy of two that evaluate alike is the one to keep)."""
    better = sum(1 for other in others if other > value)
    return better < keep


def record(
    trial_dir: Path,
    evaluated: Evaluated,
    keep: int,
    save: Callable[[Path], None],
) -> Path | None:
    """Appends the evaluation to the member's log and, when it ranks among the member's
    best ``keep``, saves the policy (``save(folder)`` writes a whole checkpoint) as a
    candidate and deletes the member's candidates that no longer rank. Returns the
    candidate's folder, or None when it was not kept."""
    folder = candidates_dir(trial_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / EVALUATIONS_FILE, "ab+") as log:  # appends wherever it reads
        # After a line cut short by a killed process, on a line of its own: appended to
        # the cut one, it would be lost with it.
        start = b""
        size = log.seek(0, os.SEEK_END)
        if size:
            log.seek(size - 1)
            start = b"" if log.read(1) == b"\n" else b"\n"
        log.write(start + (json.dumps(evaluated.to_json()) + "\n").encode())
    current = kept(trial_dir)
    if not ranks_among(evaluated.return_mean, (e.return_mean for _, e in current), keep):
        return None
    target = folder / candidate_name(evaluated.iteration)
    # Written beside, then renamed: a reader never sees half a candidate.
    staging = Path(tempfile.mkdtemp(prefix=".saving-", dir=folder))
    try:
        save(staging)
        (staging / CANDIDATE_FILE).write_text(json.dumps(evaluated.to_json()))
        if target.exists():  # the same iteration again (a restore): the newer one
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for path, _ in kept(trial_dir)[keep:]:
        shutil.rmtree(path, ignore_errors=True)
    return target if target.is_dir() else None


@dataclass
class PopulationResult:
    """What a population hands its user: the best policy any member produced over the
    run, chosen by an evaluation over ``episodes`` episodes among the candidates with
    the best short evaluations."""

    trial_id: str
    trial_name: str
    iteration: int
    checkpoint: str  # relative to the results folder
    return_mean: float
    return_std: float
    episodes: int
    short_return_mean: float  # the short evaluation that made it a candidate
    # The candidates confirmed, best first: trial name, iteration, short and full means.
    confirmed: list[dict[str, Any]] = field(default_factory=list)
    candidates: int = 0  # candidates considered (kept ones and final checkpoints)
    # What choosing it cost: every short evaluation during the run and the confirmations.
    eval_env_steps: int = 0
    eval_time_s: float = 0.0
    final: bool = False  # the member's final checkpoint, not a kept candidate

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PopulationResult:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def checkpoint_path(self, results_dir: Path) -> Path:
        return results_dir / self.checkpoint

    def summary(self) -> str:
        return (
            f"{self.trial_name} at iteration {self.iteration}: "
            f"{self.return_mean:.1f} +- {self.return_std:.1f} (n={self.episodes})"
        )


def write_result(results_dir: Path, result: PopulationResult) -> Path:
    return write_atomic(results_dir / RESULT_FILE, json.dumps(result.to_json(), indent=1))


def read_result(results_dir: Path) -> PopulationResult | None:
    """The population's result, None when the population has none (yet, or from before
    the workbench chose one)."""
    path = results_dir / RESULT_FILE
    if not path.is_file():
        return None
    try:
        result = PopulationResult.from_json(json.loads(path.read_text()))
    except (ValueError, TypeError):
        return None
    return result if math.isfinite(result.return_mean) else None
