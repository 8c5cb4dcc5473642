"""PPO's ``clip_param`` on a schedule (RL Zoo's linear clip decay), which RLlib's own PPO
learner lacks: a mixin of the lean PPO learner, read by its loss and by RLlib's."""

# RLlib types its learner's config and modules loosely: inside the learner they are its
# own config and torch modules.
# mypy: disable-error-code="no-untyped-call,attr-defined"
from __future__ import annotations

from typing import Any

from ray.rllib.utils.lambda_defaultdict import LambdaDefaultDict
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME
from ray.rllib.utils.schedules.scheduler import Scheduler

# In config.learner_config_dict: RLlib's schedule format [[timestep, value], ...]
# (workbench.trial.config sets it from the experiment file).
CLIP_SCHEDULE_KEY = "clip_param_schedule"
CURRENT_CLIP_PARAM_KEY = "curr_clip_param"  # logged per module when clip_param has a schedule


class _ClipParam:
    """A module's config with another clip_param (what RLlib's loss reads), the rest its."""

    def __init__(self, config: Any, clip_param: float) -> None:
        self._config = config
        self.clip_param = clip_param

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)


class ClipParamSchedule:
    """A scheduler per module for ``clip_param``, advanced after every update to the env
    steps sampled so far, as RLlib advances PPO's entropy schedule. Mixed into a PPO torch
    learner before RLlib's class."""

    def build(self) -> None:
        super().build()  # type: ignore[misc]
        schedule = self.config.learner_config_dict.get(CLIP_SCHEDULE_KEY)
        self.clip_param_schedulers_per_module: dict[Any, Scheduler] = LambdaDefaultDict(
            lambda module_id: Scheduler(
                fixed_value_or_schedule=schedule, framework=self.framework, device=self._device
            )
        )

    def clip_param_for(self, module_id: Any, config: Any) -> float:
        """The clip parameter of this module's loss now: its schedule's current value where
        the experiment gives one, else the config's (what RLlib's loss reads)."""
        if self.config.learner_config_dict.get(CLIP_SCHEDULE_KEY) is None:
            return float(config.clip_param)
        return float(self.clip_param_schedulers_per_module[module_id].get_current_value())

    def compute_loss_for_module(
        self, *, module_id: Any, config: Any, batch: Any, fwd_out: Any
    ) -> Any:
        """RLlib's PPO loss (its own update path: the lean loop switched off or unfit),
        reading the scheduled clip_param where the experiment gives a schedule."""
        if self.config.learner_config_dict.get(CLIP_SCHEDULE_KEY) is not None:
            config = _ClipParam(config, self.clip_param_for(module_id, config))
        return super().compute_loss_for_module(  # type: ignore[misc]
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )

    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        super().after_gradient_based_update(timesteps=timesteps)  # type: ignore[misc]
        if self.config.learner_config_dict.get(CLIP_SCHEDULE_KEY) is None:
            return
        for module_id in self.module._rl_modules:
            value = self.clip_param_schedulers_per_module[module_id].update(
                timestep=timesteps.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0)
            )
            self.metrics.log_value((module_id, CURRENT_CLIP_PARAM_KEY), value, window=1)
