"""A trial built and trained as Tune builds it, saved and restored, in a process of its
own: torch's compiler is never imported (workbench/trial/eager_torch.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.experiments import tiny_ppo, write_experiment
from tests.unit.test_eager_torch import fresh


def test_a_trial_built_and_trained_as_tune_does_loads_no_compiler(tmp_path: Path) -> None:
    path = write_experiment(
        tmp_path,
        tiny_ppo(tmp_path, training={"train_batch_size_per_learner": 128, "minibatch_size": 64}),
    )
    found = fresh(
        f"""

        import ray
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        from workbench.experiment.resolve import load_and_resolve
        from workbench.trial.config import build_config
        from workbench.trial.trainable import seeded_trainable
        resolved = load_and_resolve({str(path)!r})
        config = build_config(resolved.experiment, resolved.defaults)
        trainable = seeded_trainable(config.algo_class)(config=config)
        trainable.train()
        saved = trainable.save({str(tmp_path / "ckpt")!r})
        trainable.restore(saved)
        trainable.train()
        import torch
        seeded = torch.are_deterministic_algorithms_enabled()
        print(json.dumps({{"loaded": loaded(), "seeded": seeded}}))
        trainable.stop()
        ray.shutdown()
        """
    )
    assert found == {"loaded": [], "seeded": True}
