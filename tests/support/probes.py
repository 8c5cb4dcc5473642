"""A PPO learner that reports what its updates really used (shipped to Ray by value)."""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner


class ProbeLearner(PPOTorchLearner):
    """Reports, from inside each update, what the first gradient step of the
    iteration used: the optimizer's learning rate, and the clip_param and
    entropy_coeff the loss read (``probe_first_*``), plus the last step's lr."""

    def update(self, *args: Any, **kwargs: Any) -> Any:
        self._probe_lr_seen = False
        self._probe_loss_seen = False
        return super().update(*args, **kwargs)

    def apply_gradients(self, gradients_dict: Any) -> None:
        lr = float(next(iter(self._named_optimizers.values())).param_groups[0]["lr"])
        if not self._probe_lr_seen:
            self.metrics.log_value("probe_first_lr", lr, window=1)
            self._probe_lr_seen = True
        self.metrics.log_value("probe_last_lr", lr, window=1)
        super().apply_gradients(gradients_dict)

    def compute_loss_for_module(
        self, *, module_id: Any, config: Any, batch: Any, fwd_out: Any
    ) -> Any:
        if not self._probe_loss_seen:
            entropy = self.entropy_coeff_schedulers_per_module[module_id].get_current_value()
            self.metrics.log_value("probe_first_clip_param", float(config.clip_param), window=1)
            self.metrics.log_value("probe_first_entropy_coeff", float(entropy), window=1)
            self._probe_loss_seen = True
        return super().compute_loss_for_module(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )
