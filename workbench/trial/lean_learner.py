"""A PPO learner for small networks on CPU: RLlib's algorithm, a fraction of its overhead.

RLlib 2.60's ``Learner.update`` pays, for every minibatch, for work that does not depend
on the network: it slices and concatenates ``SampleBatch`` objects into a new
``MultiAgentBatch``, builds dictionaries of per-module outputs, logs a dozen metrics
through the ``MetricsLogger`` (explained variance included), checks every gradient
tensor for NaN twice with a Python-level ``all()`` each, and steps a for-loop Adam. On
the 64x64 networks of the small-env defaults that is two thirds of the cost of an update
(`benchmarks/learner_overhead.py`, docs/benchmarks/learner-overhead.md).

``LeanPPOTorchLearner`` keeps RLlib's PPO, its connectors, RLModule, optimizer state,
schedules and checkpoints, and replaces only the loop inside ``update``:

* the learner connector pipeline (GAE included) runs once per iteration, as in RLlib;
  its tensors are the train batch, and minibatches are views of them (a permuted copy
  once per epoch, exactly where RLlib's ``MiniBatchCyclicIterator`` shuffles, with the
  same ``np.random.permutation`` draws: workbench.trial.minibatch_plan), so the same
  seed gives the same minibatches;
* each minibatch is one forward, RLlib's PPO loss (the same operations:
  workbench.trial.ppo_loss), one backward, one NaN check for all gradients together,
  one Adam step (``fused`` on CPU: workbench.trial.lean_common.LeanAdam);
* the metrics RLlib logs per minibatch are logged once per iteration, with the values
  RLlib's reduction yields (the last minibatch's loss terms, summed step counts).

It also gives PPO's ``clip_param`` a schedule (RL Zoo's linear clip decay), which RLlib's
own learner lacks: ``learner_config_dict["clip_param_schedule"]``, RLlib's schedule
format ``[[timestep, value], ...]`` (workbench.trial.clip_schedule; workbench.trial.config
sets it from the experiment file).

Where it does not apply (several modules, a recurrent module, remote learners, a GPU,
data iterators, mixed precision, torch.compile, torch LR schedulers, a batch without a
column layout it can slice) it says so once and runs RLlib's own ``update``: never
different semantics.
"""

# RLlib types its modules, batches and distributions loosely (str | RLModule, ndarray |
# Tensor): inside the learner they are always torch modules and tensors.
# mypy: disable-error-code="no-untyped-call,attr-defined,arg-type,assignment,dict-item"
from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core import ALL_MODULES
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.core.rl_module.apis import SelfSupervisedLossAPI
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.metrics import (
    DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY,
    MODULE_TRAIN_BATCH_SIZE_MEAN,
    NUM_ENV_STEPS_TRAINED,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    WEIGHTS_SEQ_NO,
)
from ray.rllib.utils.torch_utils import compute_global_norm

from workbench.trial.clip_schedule import ClipParamSchedule
from workbench.trial.lean_common import LEAN_KEY, LeanAdam
from workbench.trial.minibatch_plan import minibatch_plan
from workbench.trial.notices import notice_once
from workbench.trial.ppo_loss import LeanPPOLoss
from workbench.trial.weight_sync import install_in_place_sync

logger = logging.getLogger(__name__)

# RLlib's per-minibatch hooks the lean loop replaces: a subclass overriding one of them
# (a custom loss, say) gets RLlib's own update, where the hook is called.
_BYPASSED_HOOKS = (
    "compute_loss_for_module",
    "compute_losses",
    "compute_gradients",
    "postprocess_gradients",
    "apply_gradients",
    "_update",
    "_uncompiled_update",
)
# The columns RLlib's default PPO module and PPO's loss read from a train batch.
_PPO_COLUMNS = frozenset(
    {
        Columns.OBS,
        Columns.ACTIONS,
        Columns.ACTION_LOGP,
        Columns.ACTION_DIST_INPUTS,
        Columns.LOSS_MASK,
        Postprocessing.ADVANTAGES,
        Postprocessing.VALUE_TARGETS,
        WEIGHTS_SEQ_NO,
    }
)


class LeanPPOTorchLearner(  # type: ignore[misc]
    LeanAdam, ClipParamSchedule, LeanPPOLoss, PPOTorchLearner
):
    """RLlib's PPO torch learner with a lean ``update`` loop (see the module docstring)."""

    # --- when it applies ------------------------------------------------------------------

    def lean_unfit(self, training_data: TrainingData, kwargs: dict[str, Any]) -> str | None:
        """Why this update takes RLlib's own path (None: the lean one applies)."""
        config = self.config
        if config.learner_config_dict.get(LEAN_KEY, True) is False:
            return "the lean learner is switched off (learner_config_dict lean_learner: false)"
        if training_data.episodes is None and training_data.episodes_refs is None:
            return "the update has no episodes (a batch or data iterator)"
        if kwargs.get("num_total_minibatches"):
            return "num_total_minibatches is set"
        if not kwargs.get("minibatch_size"):
            return "no minibatch_size"
        if config.num_learners > 1 or self.distributed:
            return "several learners (DDP)"
        if self._device is not None and torch.device(self._device).type != "cpu":
            return "the learner is on a GPU"
        if len(self.module) != 1:
            return "several RLModules (multi-agent)"
        module = next(iter(self.module.values()))
        if module.is_stateful():
            return "a recurrent (stateful) RLModule"
        if self._grad_scalers is not None or self._lr_scheduler_classes is not None:
            return "mixed precision or torch LR schedulers are configured"
        if self._torch_compile_complete_update or self._torch_compile_forward_train:
            return "torch.compile is configured"
        if isinstance(module.unwrapped(), SelfSupervisedLossAPI):
            return "the RLModule computes its own loss (SelfSupervisedLossAPI)"
        for hook in _BYPASSED_HOOKS:
            if getattr(type(self), hook) is not getattr(LeanPPOTorchLearner, hook):
                return f"{type(self).__name__} overrides {hook} (the lean loop does not call it)"
        return None

    # --- the update -----------------------------------------------------------------------

    def update(  # type: ignore[override]
        self,
        batch: Any = None,
        batches: Any = None,
        batch_refs: Any = None,
        episodes: Any = None,
        episodes_refs: Any = None,
        data_iterators: Any = None,
        training_data: TrainingData | None = None,
        *,
        timesteps: dict[str, Any] | None = None,
        num_total_minibatches: int = 0,
        num_epochs: int = 1,
        minibatch_size: int | None = None,
        shuffle_batch_per_epoch: bool = False,
        _no_metrics_reduce: bool = False,
        **kwargs: Any,
    ) -> Any:
        rllib_args = dict(
            batch=batch,
            batches=batches,
            batch_refs=batch_refs,
            episodes=episodes,
            episodes_refs=episodes_refs,
            data_iterators=data_iterators,
            training_data=training_data,
            timesteps=timesteps,
            num_total_minibatches=num_total_minibatches,
            num_epochs=num_epochs,
            minibatch_size=minibatch_size,
            shuffle_batch_per_epoch=shuffle_batch_per_epoch,
            _no_metrics_reduce=_no_metrics_reduce,
            **kwargs,
        )
        if training_data is None:
            training_data = TrainingData(
                batch=batch,
                batches=batches,
                batch_refs=batch_refs,
                episodes=episodes,
                episodes_refs=episodes_refs,
                data_iterators=data_iterators,
            )
        unfit = self.lean_unfit(
            training_data,
            {"num_total_minibatches": num_total_minibatches, "minibatch_size": minibatch_size},
        )
        if unfit is None and kwargs:
            unfit = f"update() got arguments the lean path does not know: {sorted(kwargs)}"
        if unfit is not None:
            notice_once(f"lean learner: RLlib's own update runs, because {unfit}")
            rllib_args["training_data"] = training_data
            for name in ("batch", "batches", "batch_refs", "episodes", "episodes_refs"):
                rllib_args[name] = None
            rllib_args["data_iterators"] = None
            return super().update(**rllib_args)
        assert minibatch_size is not None

        self._check_is_built()
        self.before_gradient_based_update(timesteps=timesteps or {})
        training_data.validate()
        training_data.solve_refs()
        self._weights_seq_no += 1

        train_batch = self._make_batch_if_necessary(training_data=training_data)
        for module_id in list(train_batch.policy_batches):
            if not self.should_module_be_updated(module_id, train_batch):
                del train_batch.policy_batches[module_id]
        if not train_batch.policy_batches:
            self.after_gradient_based_update(timesteps=timesteps or {})
            return None if _no_metrics_reduce else self.metrics.reduce()
        (module_id, module_batch), *_ = train_batch.policy_batches.items()
        columns = dict(module_batch)
        n = len(module_batch)
        plan = minibatch_plan(n, minibatch_size, num_epochs, shuffle_batch_per_epoch)
        sliceable = all(
            isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == n
            for v in columns.values()
        )
        if not plan or not sliceable:
            # Nested columns or an empty batch: RLlib's own iterator on the batch the
            # connectors already made.
            notice_once("lean learner: RLlib's minibatch loop runs for an empty or nested batch")
            return self._rllib_loop(
                train_batch,
                timesteps,
                num_epochs,
                minibatch_size,
                shuffle_batch_per_epoch,
                _no_metrics_reduce,
            )

        module = self.module[module_id]
        config = self.config.get_config_for_module(module_id)
        optimizers = [optim for _, optim in self.get_optimizers_for_module(module_id)]
        params = [p for p in self.get_parameters(module) if p.requires_grad]
        self._lean_grad_clip = config.grad_clip
        self._lean_clip_by = config.grad_clip_by
        self._lean_log_norm = bool(config.log_gradients)
        named = self.get_optimizers_for_module(module_id)
        self._lean_norm_name = named[0][0] if len(named) == 1 else None
        self._lean_last_norm = None
        # TorchRLModule.forward_train puts the module in training mode at every call (a
        # walk over all its submodules); once per update does the same.
        forward = module.forward_train
        if type(module).forward_train is TorchRLModule.forward_train and not module.inference_only:
            module.train()
            forward = module._forward_train
        if type(module.unwrapped()) is DefaultPPOTorchRLModule:
            # What RLlib's PPO module and loss read: the other columns (rewards, flags)
            # served the connectors and need no slicing.
            columns = {k: v for k, v in columns.items() if k in _PPO_COLUMNS}
        last = len(plan) - 1
        stats: dict[str, torch.Tensor] = {}
        loss = torch.zeros(())
        for step, pieces in enumerate(plan):
            if len(pieces) == 1 and pieces[0] is not None:
                s, e = pieces[0]
                minibatch = {k: v[s:e] for k, v in columns.items()}
            else:
                parts: list[dict[str, torch.Tensor]] = []
                for piece in pieces:
                    if piece is None:  # RLlib shuffles right after taking the batch's tail
                        order = torch.from_numpy(np.random.permutation(n))  # noqa: NPY002  (RLlib draws so)
                        columns = {k: v[order] for k, v in columns.items()}
                    else:
                        parts.append({k: v[piece[0] : piece[1]] for k, v in columns.items()})
                minibatch = (
                    parts[0]
                    if len(parts) == 1
                    else {k: torch.cat([part[k] for part in parts]) for k in columns}
                )
            fwd_out = forward(minibatch)
            loss, step_stats = self.lean_loss(
                module_id=module_id,
                config=config,
                batch=minibatch,
                fwd_out=fwd_out,
                with_stats=step == last,
            )
            self.lean_step(module_id, optimizers, params, loss)
            if step == last:
                stats = step_stats

        self._lean_log(module_id, stats, loss, n, minibatch_size, len(plan), train_batch)
        self.after_gradient_based_update(timesteps=timesteps or {})
        return None if _no_metrics_reduce else self.metrics.reduce()

    def _rllib_loop(
        self,
        train_batch: Any,
        timesteps: dict[str, Any] | None,
        num_epochs: int,
        minibatch_size: int,
        shuffle: bool,
        no_reduce: bool,
    ) -> Any:
        """RLlib's own minibatch loop over an already connected batch (this update's
        weights_seq_no and before-update hook are already done)."""
        self._weights_seq_no -= 1
        timesteps = timesteps or {}
        self.before_gradient_based_update = lambda **_: None  # type: ignore[method-assign]
        try:
            return PPOTorchLearner.update(
                self,
                training_data=TrainingData(batch=train_batch),
                timesteps=timesteps,
                num_epochs=num_epochs,
                minibatch_size=minibatch_size,
                shuffle_batch_per_epoch=shuffle,
                _no_metrics_reduce=no_reduce,
            )
        finally:
            del self.before_gradient_based_update

    _lean_grad_clip: float | None = None
    _lean_clip_by = "global_norm"
    _lean_log_norm = False
    _lean_norm_name: str | None = None
    _lean_last_norm: torch.Tensor | None = None

    def lean_step(
        self,
        module_id: Any,
        optimizers: list[torch.optim.Optimizer],
        params: list[torch.Tensor],
        loss: torch.Tensor,
    ) -> None:
        """One gradient step: RLlib's zero_grad, backward, gradient clipping, NaN
        handling (non-finite gradients become finite, as RLlib's default does; one check
        for all tensors) and optimizer step."""
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        if loss.grad_fn is None:
            return
        loss.backward()
        grads = {p: p.grad for p in params if p.grad is not None}
        clip = self._lean_grad_clip
        if clip is not None or self._lean_log_norm:
            if self._lean_norm_name is None or (
                clip is not None and self._lean_clip_by != "global_norm"
            ):
                # Several optimizers, or clipping per tensor: RLlib's own postprocessing.
                grads = self.postprocess_gradients(grads)
                for p, g in grads.items():
                    p.grad = g
            else:
                # RLlib's clip_gradients by global norm, without its per-step metrics.
                grad_list = list(grads.values())
                total = compute_global_norm(grad_list)
                if clip is not None:
                    coeff = torch.clamp(clip / torch.clamp(total + 1e-6, min=clip), max=1.0)
                    torch._foreach_mul_(grad_list, coeff)
                self._lean_last_norm = total
        if not self.config.torch_skip_nan_gradients and grads:
            norms = torch._foreach_norm(list(grads.values()))
            if not bool(torch.isfinite(torch.stack(norms)).all()):
                logger.warning("Gradients contain `nan/inf` values; setting them to zero.")
                for p, g in grads.items():
                    p.grad = torch.nan_to_num(g)
        for optimizer in optimizers:
            optimizer.step()

    def _lean_log(
        self,
        module_id: Any,
        stats: dict[str, torch.Tensor],
        loss: torch.Tensor,
        n: int,
        minibatch_size: int,
        minibatches: int,
        train_batch: Any,
    ) -> None:
        """What RLlib logs per minibatch, logged once with the values its reduction
        gives: window-1 terms of the last minibatch, sums of step counts."""
        off_policy = stats.pop(DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY, None)
        if off_policy is not None:
            self.metrics.log_value(
                (module_id, DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY), off_policy, window=1
            )
        self.metrics.log_dict(stats, key=module_id, window=1)
        if self._lean_last_norm is not None and (
            self._lean_clip_by == "global_norm" or self._lean_log_norm
        ):
            self.metrics.log_value(
                (module_id, f"gradients_{self._lean_norm_name}_global_norm"),
                self._lean_last_norm,
                window=1,
            )
        self.metrics.log_value((module_id, WEIGHTS_SEQ_NO), self._weights_seq_no, window=1)
        self.metrics.log_value(
            key=(module_id, MODULE_TRAIN_BATCH_SIZE_MEAN), value=minibatch_size, reduce="mean"
        )
        trained = minibatch_size * minibatches
        for key, reduce in (
            ((module_id, NUM_MODULE_STEPS_TRAINED), "sum"),
            ((module_id, NUM_MODULE_STEPS_TRAINED_LIFETIME), "lifetime_sum"),
            ((ALL_MODULES, NUM_MODULE_STEPS_TRAINED), "sum"),
            ((ALL_MODULES, NUM_MODULE_STEPS_TRAINED_LIFETIME), "lifetime_sum"),
        ):
            self.metrics.log_value(
                key=key,
                value=trained,
                reduce=reduce,
                with_throughput=key != (module_id, NUM_MODULE_STEPS_TRAINED),
            )
        # RLlib counts the whole batch's env steps for every minibatch (a minibatch's
        # MultiAgentBatch inherits the batch's env_steps); the same figure here.
        env_steps = int(train_batch.env_steps()) * minibatches
        self.metrics.log_value(
            (ALL_MODULES, NUM_ENV_STEPS_TRAINED), env_steps, reduce="sum", with_throughput=True
        )
        self.metrics.log_value(
            (ALL_MODULES, NUM_ENV_STEPS_TRAINED_LIFETIME),
            env_steps,
            reduce="lifetime_sum",
            with_throughput=True,
        )
        self.metrics.log_value(key=(module_id, self.TOTAL_LOSS_KEY), value=loss, window=1)
        if env_steps > 0:  # Ray's own (Prometheus) counters, once per iteration
            self._metrics_all_modules_num_env_steps_trained.inc(value=env_steps)
            self._metrics_all_modules_num_module_steps_trained.inc(value=trained)


def install_lean_weight_sync(algorithm: Any, **_: Any) -> None:
    """An ``on_algorithm_init`` callback: weight syncs from a local lean learner (PPO's or
    DQN's) to the trial's own env runner copy tensors in place (workbench.trial.weight_sync).

    Defined here because configs name it: RLlib's checkpoints and Tune's experiment state
    pickle the callback by this module's path."""
    install_in_place_sync(algorithm)
