"""A trial whose newest checkpoint is damaged restores the newest intact one, and says
so on the console and on its MLflow run; a trial with no intact checkpoint fails with
one clear error (tests/unit/test_checkpoint_manifest.py checks the choice itself)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.support.experiments import CARTPOLE, small_pbt, write_experiment
from workbench.names import CHECKPOINT_FALLBACK_TAG
from workbench.policy.checkpoint import MODULE_DIR
from workbench.trial.manifest import CheckpointDamaged, read_manifest

STATE = MODULE_DIR / "module_state.pkl"


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_damaged_newest_checkpoint_falls_back_to_the_newest_intact_one(
    local_ray: None, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from mlflow.tracking import MlflowClient
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult

    from workbench.experiment.resolve import load_and_resolve
    from workbench.run.launch import run
    from workbench.trial.config import build_config
    from workbench.trial.trainable import seeded_trainable

    raised = tmp_path / "raised"
    data = small_pbt(
        tmp_path,
        scheduler={"type": "fifo"},
        population=1,
        stop={"iterations": 3},
        failure={"max_failures": 1},
        # Iterations of 256 env steps: the env raises once, in the third, after the
        # trial saved checkpoint_000000 (iteration 1) and checkpoint_000001 (iteration 2).
        env={"id": CARTPOLE, "config": {"fault_after_steps": 700, "fault_once_file": str(raised)}},
    )
    resolved = load_and_resolve(write_experiment(tmp_path, data, sort_keys=True))
    trial_dir = resolved.results_dir / "PPO_00000"
    damaged: list[Path] = []
    done = threading.Event()

    def damage_when_the_trial_fails() -> None:
        # Tune restores the trial in a new process (seconds): the newest checkpoint is
        # damaged well before, as a full disk or a cut copy would have left it.
        while not done.wait(0.01):
            if raised.exists():
                newest = sorted(trial_dir.glob("checkpoint_*"))[-1]
                _truncate(newest / STATE)
                damaged.append(newest)
                return

    watcher = threading.Thread(target=damage_when_the_trial_fails, daemon=True)
    watcher.start()
    try:
        summary = run(resolved, progress_interval_s=1e9)
    finally:
        done.set()
        watcher.join()
    assert damaged == [trial_dir / "checkpoint_000001"]
    assert summary.errors == 0 and summary.exit_code == 0
    note = f"PPO_00000: checkpoint_000001 is damaged ({STATE.as_posix()} has "
    assert note in capfd.readouterr().err
    client = MlflowClient(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    (trial_run,) = client.search_runs(
        [client.get_experiment_by_name("pop").experiment_id],
        filter_string="tags.`workbench.role` = 'trial'",
    )
    tag = trial_run.data.tags[CHECKPOINT_FALLBACK_TAG]
    assert tag.startswith(note.removeprefix("PPO_00000: "))
    assert tag.endswith(
        "restored the newest intact checkpoint, checkpoint_000000 (iteration 1), instead"
    )
    # It went on from iteration 1: iterations 2 and 3 again after the failure in the 3rd.
    history = client.get_metric_history(trial_run.info.run_id, "training_iteration")
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == [1, 2, 2, 3]

    config = build_config(resolved.experiment, resolved.defaults)
    trainable = seeded_trainable(config.algo_class)(config=config)
    try:
        # Tune hands a checkpoint with metrics that are not the ones it was saved at (PBT:
        # the donor's result in its scheduler state). RLlib takes the iteration from the
        # checkpoint's state, Tune's own restore the time from the metrics: a clone of
        # iteration 1's weights with another iteration's clock. The trainable takes both
        # from the checkpoint's manifest.
        first = trial_dir / "checkpoint_000000"
        saved = read_manifest(first)["progress"]  # type: ignore[index]
        assert saved["training_iteration"] == 1
        handed = _TrainingResult(
            checkpoint=Checkpoint(str(first)),
            metrics={"training_iteration": 2, "time_total_s": 1e6, "done": False},
        )
        config.algo_class.restore(trainable, handed)
        assert (trainable.iteration, trainable._time_total) == (1, 1e6)
        trainable.restore(handed)
        assert (trainable.iteration, trainable._time_total) == (1, saved["time_total_s"])

        # Every checkpoint damaged: the trial's restore fails, naming each one's problem.
        checkpoints = sorted(trial_dir.glob("checkpoint_*"))
        for checkpoint in checkpoints:
            _truncate(checkpoint / STATE)
        with pytest.raises(CheckpointDamaged, match="no intact checkpoint to restore") as info:
            trainable.restore(str(checkpoints[-1]))
    finally:
        trainable.stop()
    assert all(f"{c.name} {STATE.as_posix()} has" in str(info.value) for c in checkpoints)
