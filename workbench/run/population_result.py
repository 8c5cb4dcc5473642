"""The population's result: the best policy any member produced, chosen by evaluation.

When a population ends, the candidates are every policy a member kept during the run
(its best short evaluations, `workbench.trial.candidates`) and every member's final
policy (short-evaluated now, on the same episodes). The ``evaluation.confirm``
candidates with the best short evaluations are rolled out over ``evaluation.episodes``
episodes on the experiment's seeds (never the short evaluations' seeds), and the best
of those is the result. The short evaluations only nominate; the figure a user reads
is the confirming one. The record goes to ``population_result.json`` in the results
folder; `workbench.run.launch` logs it to MLflow and names it in the summary.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from workbench.policy.checkpoint import final_checkpoint, read_checkpoint
from workbench.policy.evaluate import Evaluation, evaluate_checkpoint
from workbench.trial.candidates import (
    SHORT_EVAL_SEED_OFFSET,
    PopulationResult,
    evaluations,
    kept,
    write_result,
)
from workbench.trial.manifest import MANIFEST_FILE

# (checkpoint folder, episodes, seed) -> its evaluation; tests put a stub in its place.
Evaluate = Callable[[Path, int, int], Evaluation]


@dataclass
class Candidate:
    trial_id: str
    trial_name: str
    iteration: int
    checkpoint: Path
    short_return_mean: float
    final: bool = False


def _evaluate(path: Path, episodes: int, seed: int) -> Evaluation:
    return evaluate_checkpoint(read_checkpoint(path), episodes=episodes, seed=seed)


def gather(
    results_dir: Path,
    trials: Mapping[str, str],
    *,
    short_episodes: int,
    seed: int,
    evaluate: Evaluate = _evaluate,
) -> tuple[list[Candidate], int, float]:
    """Every member's kept candidates and its final policy, best short evaluation first;
    with the env steps and seconds the run's short evaluations and these ones took.
    ``trials``: trial id -> trial name (the folder under ``results_dir``)."""
    found: list[Candidate] = []
    seen: set[str | None] = set()
    steps, seconds = 0, 0.0
    for trial_id, name in sorted(trials.items(), key=lambda item: item[1]):
        trial_dir = results_dir / name
        for done in evaluations(trial_dir):
            steps += done.env_steps
            seconds += done.time_s
        for path, record in kept(trial_dir):
            found.append(Candidate(trial_id, name, record.iteration, path, record.return_mean))
            seen.add(policy_fingerprint(path))
        final = final_checkpoint(trial_dir)
        if final is None:
            continue
        fingerprint = policy_fingerprint(final)
        if fingerprint is not None and fingerprint in seen:
            continue  # the same weights as a kept candidate: judged once
        seen.add(fingerprint)
        try:
            evaluation = evaluate(final, short_episodes, seed + SHORT_EVAL_SEED_OFFSET)
        except Exception:  # a final checkpoint that cannot be read is no candidate
            continue
        steps += sum(evaluation.lengths)
        seconds += evaluation.time_s
        found.append(
            Candidate(
                trial_id,
                name,
                int(evaluation.training_iteration or 0),
                final,
                evaluation.stats()["return_mean"],
                final=True,
            )
        )
    found.sort(key=lambda c: (-c.short_return_mean, c.trial_name, -c.iteration))
    return found, steps, seconds


def policy_fingerprint(checkpoint: Path) -> str | None:
    """What tells two checkpoints' policies apart: the hashes its manifest lists for the
    RL module's files, and the settings it acts with (observation filter included).
    None: no manifest to read."""
    try:
        manifest = json.loads((checkpoint / MANIFEST_FILE).read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    module = sorted(
        (name, entry.get("sha256"))
        for name, entry in files.items()
        if "/rl_module/" in f"/{name}" and isinstance(entry, dict)
    )
    if not module:
        return None
    text = json.dumps([module, manifest.get("policy")], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def choose(
    results_dir: Path,
    trials: Mapping[str, str],
    *,
    episodes: int,
    short_episodes: int,
    confirm: int,
    seed: int,
    evaluate: Evaluate = _evaluate,
) -> tuple[PopulationResult, Evaluation] | None:
    """The population's result and its confirming evaluation (None: no member left a
    policy to evaluate), written to the results folder."""
    candidates, steps, seconds = gather(
        results_dir, trials, short_episodes=short_episodes, seed=seed, evaluate=evaluate
    )
    if not candidates:
        return None
    confirmed: list[tuple[Candidate, Evaluation]] = []
    for candidate in candidates[:confirm]:
        try:
            evaluation = evaluate(candidate.checkpoint, episodes, seed)
        except Exception:
            continue
        steps += sum(evaluation.lengths)
        seconds += evaluation.time_s
        confirmed.append((candidate, evaluation))
    if not confirmed:
        return None
    # The best confirmed mean; of equals, the better-nominated one (listed first).
    best, evaluation = max(confirmed, key=lambda pair: pair[1].stats()["return_mean"])
    stats = evaluation.stats()
    result = PopulationResult(
        trial_id=best.trial_id,
        trial_name=best.trial_name,
        iteration=best.iteration,
        checkpoint=_relative(best.checkpoint, results_dir),
        return_mean=stats["return_mean"],
        return_std=stats["return_std"],
        episodes=int(stats["episodes"]),
        short_return_mean=best.short_return_mean,
        confirmed=[
            {
                "trial": c.trial_name,
                "iteration": c.iteration,
                "final": c.final,
                "short_return_mean": c.short_return_mean,
                "return_mean": e.stats()["return_mean"],
            }
            for c, e in sorted(confirmed, key=lambda pair: -pair[1].stats()["return_mean"])
        ],
        candidates=len(candidates),
        eval_env_steps=steps,
        eval_time_s=seconds,
        final=best.final,
    )
    write_result(results_dir, result)
    return result, evaluation


def _relative(path: Path, results_dir: Path) -> str:
    try:
        return str(path.resolve().relative_to(results_dir.resolve()))
    except ValueError:
        return str(path)
