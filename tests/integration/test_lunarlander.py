"""experiments/lunarlander_pb2.yaml end to end: a third-party Python environment
(Gymnasium's Box2D LunarLanderContinuous) through the box2d extra, trained by its
PB2 population for a few small iterations with one exploit. Skipped, saying how to
install it, where the extra is not installed (CI installs it: make test-deps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.names import LINEAGE_FILE

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "experiments" / "lunarlander_pb2.yaml"

pytest.importorskip(
    "Box2D", reason="LunarLander needs the box2d extra: pip install -e '.[box2d]' (make test-deps)"
)


@pytest.mark.usefixtures("local_ray")
def test_the_lunarlander_pb2_experiment_runs_end_to_end(tmp_path: Path) -> None:
    from workbench.experiment.resolve import load_and_resolve
    from workbench.run.launch import run

    # The shipped file, made small: 2 members, 4 iterations of 512 env steps, a PB2
    # synchronous decision every 2 (the weaker member clones the other at 2).
    resolved = load_and_resolve(
        EXPERIMENT,
        [
            f"storage={tmp_path}",
            "population=2",
            "scheduler.quantile_fraction=0.5",
            "scheduler.perturbation_interval=2",
            "scheduler.burn_in_period=2",
            "scheduler.synch=true",
            # Any better donor clones: two members a few crashes apart need not differ by
            # Welch's test after 2 tiny iterations, and this checks the run, not the test.
            "scheduler.exploit_test=none",
            "training.train_batch_size_per_learner=512",
            "training.minibatch_size=128",
            "training.num_epochs=1",
            "stop.iterations=4",
            "stop.env_steps=null",
            "checkpoint.frequency=2",
            "evaluation.at_end=none",
            "resources.env_runners.envs_per_runner=4",
        ],
    )
    assert resolved.experiment.env.id == "LunarLanderContinuous-v3"
    summary = run(resolved, progress_interval_s=1e9)
    assert summary is not None

    rows = {
        path.parent.name: [json.loads(line) for line in path.read_text().splitlines()]
        for path in resolved.results_dir.glob("*/result.json")
    }
    assert len(rows) == 2
    for results in rows.values():
        # At its stop rule (a member that PB2 exploited at its last iteration has been
        # seen to report one more, from the donor's checkpoint).
        assert results[-1]["training_iteration"] >= 4
        # LunarLander's returns: random landers crash at about -100 to -600 an episode.
        returns = [
            r["env_runners"]["episode_return_mean"]
            for r in results
            if r.get("env_runners", {}).get("episode_return_mean") is not None
        ]
        assert returns and all(-2000 < value < 400 for value in returns)
    lineage = (resolved.results_dir / LINEAGE_FILE).read_text().splitlines()
    assert len(lineage) >= 1  # PB2 replaced the weaker member at iteration 2
