"""A PPO learner that reports what its updates really used (shipped to Ray by value)."""

from __future__ import annotations

from typing import Any

import torch

from workbench.trial.lean_learner import LeanPPOTorchLearner


class ProbeLearner(LeanPPOTorchLearner):
    """The workbench's lean PPO learner (what PPO trials update with), reporting from
    inside each update what the first gradient step of the iteration used: the
    optimizer's learning rate, and the clip_param and entropy_coeff the loss read
    (``probe_first_*``), plus the last step's lr. It overrides only the lean loop's own
    hooks, so the updates it reports on are the lean path's (``lean_path`` says so)."""

    def update(self, *args: Any, **kwargs: Any) -> Any:
        self._probe_lr_seen = False
        self._probe_loss_seen = False
        self._probe_lean_steps = 0
        return super().update(*args, **kwargs)

    def lean_step(
        self,
        module_id: Any,
        optimizers: list[torch.optim.Optimizer],
        params: list[torch.Tensor],
        loss: torch.Tensor,
    ) -> None:
        lr = float(optimizers[0].param_groups[0]["lr"])
        if not self._probe_lr_seen:
            self.metrics.log_value("probe_first_lr", lr, window=1)
            self._probe_lr_seen = True
        self.metrics.log_value("probe_last_lr", lr, window=1)
        self._probe_lean_steps += 1
        self.metrics.log_value("probe_lean_steps", self._probe_lean_steps, window=1)
        super().lean_step(module_id, optimizers, params, loss)

    def lean_loss(
        self, *, module_id: Any, config: Any, batch: Any, fwd_out: Any, with_stats: bool
    ) -> Any:
        if not self._probe_loss_seen:
            entropy = self.entropy_coeff_schedulers_per_module[module_id].get_current_value()
            clip = self.clip_param_for(module_id, config)
            self.metrics.log_value("probe_first_clip_param", clip, window=1)
            self.metrics.log_value("probe_first_entropy_coeff", float(entropy), window=1)
            self._probe_loss_seen = True
        return super().lean_loss(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out, with_stats=with_stats
        )
