"""The population's result in real runs: a small PBT population that evaluates its members
every iteration hands over the best policy it produced (population_result.json, the
parent MLflow run's result, `locate`'s default); and Welch's test before an exploit keeps
a member that has found the reward from being cloned over by a noisy one, in Tune's own
loop (a toy trainable whose short evaluations are fixed, so the outcome is certain)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from ray import tune

from tests.support.experiments import small_pbt, write_experiment
from workbench.lineage_record import ExploitDecision
from workbench.trial.candidates import (
    CANDIDATES_DIR,
    RESULT_FILE,
    evaluations,
    kept,
    read_result,
)
from workbench.tune_ext.result_files import result_loggers

ITERATIONS = 4
SHORT_EPISODES = 5
EPISODES = 20


@pytest.mark.usefixtures("local_ray")
def test_a_pbt_population_hands_over_its_best_evaluated_policy(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from workbench.experiment.resolve import load_and_resolve
    from workbench.names import (
        PARENT_RUN_TAG,
        RESULT_CHECKPOINT_TAG,
        RESULT_EPISODES_METRIC,
        RESULT_ITERATION_TAG,
        RESULT_RETURN_METRIC,
        RESULT_TRIAL_ID_TAG,
        RESULT_TRIAL_TAG,
    )
    from workbench.policy.checkpoint import final_checkpoint, read_checkpoint
    from workbench.policy.evaluate import evaluate_checkpoint
    from workbench.policy.locate import locate
    from workbench.run.launch import run
    from workbench.run.population_result import policy_fingerprint

    data = small_pbt(
        tmp_path,
        name="chosen",
        population=2,
        stop={"iterations": ITERATIONS},
        search_space={"params": {"lr": {"loguniform": [1e-4, 1e-2]}}},
        evaluation={
            "at_end": "best",
            "every": 1,
            "short_episodes": SHORT_EPISODES,
            "keep": 2,
            "confirm": 2,
            "episodes": EPISODES,
        },
        seed=3,
    )
    resolved = load_and_resolve(write_experiment(tmp_path / "pop.yaml", data))
    summary = run(resolved, progress_interval_s=1e9)
    assert summary.errors == 0
    results_dir = resolved.results_dir

    # The record, and the summary that names it.
    assert (results_dir / RESULT_FILE).is_file(), summary.evaluation_note
    result = read_result(results_dir)
    assert result is not None and summary.result == result
    assert summary.best is not None and summary.best.name == result.trial_name
    assert any(line.startswith("The population's result: ") for line in summary.lines())

    # Every member evaluated itself while it trained and kept its best two.
    members = sorted(p for p in results_dir.glob("PPO_*") if p.is_dir())
    assert len(members) == 2
    logged = {m.name: evaluations(m) for m in members}
    for name, done in logged.items():
        assert len(done) >= ITERATIONS - 1, name  # every iteration (but possibly the first)
        assert {e.episodes for e in done} == {SHORT_EPISODES}
        assert 1 <= len(kept(results_dir / name)) <= 2
        # Each evaluation is the one a result of the member reported.
        text = (results_dir / name / "result.json").read_text()
        rows = [json.loads(line) for line in text.splitlines()]
        reported = [
            r["candidate"]["return_mean"] for r in rows if "return_mean" in r.get("candidate", {})
        ]
        assert [e.return_mean for e in done] == reported
    # The candidates: the kept ones and each member's final checkpoint, unless its policy
    # is one of the kept ones (the same weights are judged once).
    kept_policies = {policy_fingerprint(path) for m in members for path, _ in kept(m)}
    finals = [final_checkpoint(m) for m in members]
    distinct = [f for f in finals if f is not None and policy_fingerprint(f) not in kept_policies]
    assert len(kept_policies) == sum(len(kept(m)) for m in members)
    assert result.candidates == len(kept_policies) + len(distinct)

    # Its figure is a confirmed one, at least the best nominee's: the short evaluations
    # only nominate, and the top nominee is always confirmed, so the result's mean is at
    # least that candidate's confirmed mean ...
    best_short = max((e for done in logged.values() for e in done), key=lambda e: e.return_mean)
    nominees = sorted(result.confirmed, key=lambda c: -c["short_return_mean"])
    # (A member's best evaluation is always among its kept ones: it was nominated.)
    assert nominees[0]["short_return_mean"] >= best_short.return_mean
    assert result.return_mean == max(c["return_mean"] for c in result.confirmed)
    assert result.return_mean >= nominees[0]["return_mean"]
    # ... which differs from its short evaluation by noise alone: another 5 episodes
    # against 20 (its seeds are not the confirming ones). The bound allows four
    # standard errors of that difference plus the best-of-many bias of the maximum over
    # the run's short evaluations (< 2 standard errors for the 6 to 8 here), with a floor of
    # one CartPole return unit for policies whose every episode lasts as long.
    error = math.sqrt(
        best_short.return_std**2 / (SHORT_EPISODES - 1) + result.return_std**2 / (EPISODES - 1)
    )
    margin = 6 * error + 1.0
    assert result.return_mean >= best_short.return_mean - margin, (result, best_short)

    # The checkpoint it names is a whole policy, and rolls out to the recorded figure.
    checkpoint = result.checkpoint_path(results_dir)
    assert checkpoint.is_dir()
    if not result.final:
        assert checkpoint.parent.name == CANDIDATES_DIR
    again = evaluate_checkpoint(read_checkpoint(checkpoint), episodes=EPISODES, seed=3)
    assert again.stats()["return_mean"] == pytest.approx(result.return_mean)
    assert result.episodes == EPISODES
    # What choosing it cost: every short evaluation during the run, and the end's.
    during = sum(e.env_steps for done in logged.values() for e in done)
    assert result.eval_env_steps > during > 0

    # The population's MLflow run holds the result.
    store = tmp_path / "results" / "mlflow.db"
    client = MlflowClient(f"sqlite:///{store}")
    trial_run = client.get_run(summary.evaluation.run_id)
    assert trial_run.data.tags["mlflow.runName"] == result.trial_name
    parent = client.get_run(trial_run.data.tags[PARENT_RUN_TAG]).data
    assert parent.tags[RESULT_TRIAL_ID_TAG] == result.trial_id
    assert parent.tags[RESULT_TRIAL_TAG] == result.trial_name
    assert parent.tags[RESULT_ITERATION_TAG] == str(result.iteration)
    assert parent.tags[RESULT_CHECKPOINT_TAG] == result.checkpoint
    assert parent.metrics[RESULT_RETURN_METRIC] == pytest.approx(result.return_mean)
    assert parent.metrics[RESULT_EPISODES_METRIC] == EPISODES

    # `workbench eval` with no RUN, or the population's name, means that checkpoint; a
    # member's name still means its own newest checkpoint.
    expected = checkpoint.resolve()
    default = locate(None, store=str(store), population="chosen")
    assert default.checkpoint == expected and default.run_id == trial_run.info.run_id
    assert locate(None, store=str(store)).checkpoint == expected  # the newest population
    assert locate("chosen", store=str(store)).checkpoint == expected
    member = locate(result.trial_name, store=str(store), population="chosen")
    assert member.checkpoint.name.startswith("checkpoint_")


# --- Welch's test in Tune's loop ------------------------------------------------------------

# Each member's short evaluation, the same at every iteration: "found" balances the pole
# every episode; "noisy" ranks above it on the mean from a few lucky episodes.
EVALUATIONS = {
    "found": {"return_mean": 500.0, "return_std": 1.0, "episodes": 10.0},
    "noisy": {"return_mean": 510.0, "return_std": 150.0, "episodes": 10.0},
}
WELCH_ITERATIONS = 8


class Member(tune.Trainable):
    """A member whose short evaluation is its role's (the config copied with its weights
    when it is cloned over, as a real member's policy would be)."""

    def setup(self, config: dict[str, Any]) -> None:
        self.role = config["role"]

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        self.setup(new_config)
        return True

    def step(self) -> dict[str, Any]:
        return {"candidate": dict(EVALUATIONS[self.role]), "role_found": self.role == "found"}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        (Path(checkpoint_dir) / "role.json").write_text(json.dumps(self.role))

    def load_checkpoint(self, checkpoint: Any) -> None:
        self.role = json.loads((Path(checkpoint) / "role.json").read_text())


def _exploits(
    tmp_path: Path, exploit_test: str
) -> tuple[list[ExploitDecision], dict[str, list[bool]]]:
    """The exploits of a population of the two members under the experiment's PBT (the
    scheduler the workbench builds for ``exploit_test``), and by trial id whether each of
    its results was the found member's evaluation."""
    from tests.support.schedulers import built_scheduler
    from workbench.experiment.resolve import load_and_resolve

    folder = tmp_path / exploit_test
    folder.mkdir()
    data = small_pbt(
        folder,
        population=2,
        stop={"iterations": WELCH_ITERATIONS},
        search_space={"params": {"lr": {"loguniform": [1e-4, 1e-2]}}},
        scheduler={
            "type": "pbt",
            "perturbation_interval": 2,
            "quantile_fraction": 0.5,
            "resample_probability": 0.0,
            "rank_on": "evaluation",
            "exploit_test": exploit_test,
        },
        evaluation={"at_end": "none", "every": 2},
    )
    pbt = built_scheduler(load_and_resolve(write_experiment(folder / "pop.yaml", data)))
    seen: list[ExploitDecision] = []
    pbt.add_lineage_listener(seen.append)  # type: ignore[attr-defined]
    tuner = tune.Tuner(
        Member,
        param_space={"role": tune.grid_search(["found", "noisy"]), "lr": 1e-3},
        tune_config=tune.TuneConfig(scheduler=pbt, reuse_actors=True),
        run_config=tune.RunConfig(
            name="welch",
            storage_path=str(folder),
            stop={"training_iteration": WELCH_ITERATIONS},
            # Every checkpoint kept, as the workbench keeps them (workbench/tune_ext/
            # checkpoints.py): with Tune's num_to_keep, a donor this quick deletes the
            # checkpoint its clone is about to restore.
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1, num_to_keep=None),
            # The workbench's result.json, as its runs write it: Tune's own logger copies a
            # stale synced copy back over a trial's rows when it is cloned over, and the
            # rows from before the exploit can go (workbench/tune_ext/result_files.py).
            callbacks=result_loggers(),
            verbose=0,
        ),
    )
    grid = tuner.fit()
    roles = {}
    for i in range(len(grid)):
        metrics = grid[i].metrics
        assert metrics is not None and grid[i].error is None
        assert metrics["training_iteration"] == WELCH_ITERATIONS
        frame = grid[i].metrics_dataframe
        assert frame is not None
        roles[metrics["trial_id"]] = [bool(x) for x in frame["role_found"]]
    return seen, roles


@pytest.mark.usefixtures("local_ray")
def test_a_member_that_found_the_reward_is_not_cloned_over_by_a_noisy_one(tmp_path: Path) -> None:
    # Without the test (Tune's truncation selection): the noisy member's higher mean is
    # enough, and the member that had found the reward takes its weights.
    plain, roles = _exploits(tmp_path, "none")
    (found,) = [trial for trial, rows in roles.items() if rows[0]]
    assert [r.source for r in plain if r.target == found], (plain, roles)
    assert not all(roles[found]), roles  # it went on with the noisy member's weights
    # With Welch's test: 510 +- 150 over 10 episodes is no evidence against 500 +- 1.
    tested, roles = _exploits(tmp_path, "welch")
    assert tested == [], tested
    # Each member kept its own weights all along.
    assert sorted(tuple(set(rows)) for rows in roles.values()) == [(False,), (True,)], roles
