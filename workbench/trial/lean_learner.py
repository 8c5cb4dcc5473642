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
  same ``np.random.permutation`` draws), so the same seed gives the same minibatches;
* each minibatch is one forward, RLlib's PPO loss (the same operations), one backward,
  one NaN check for all gradients together, one Adam step (``fused`` on CPU);
* the metrics RLlib logs per minibatch are logged once per iteration, with the values
  RLlib's reduction yields (the last minibatch's loss terms, summed step counts).

It also gives PPO's ``clip_param`` a schedule (RL Zoo's linear clip decay), which RLlib's
own learner lacks: ``learner_config_dict["clip_param_schedule"]``, RLlib's schedule
format ``[[timestep, value], ...]`` (workbench.trial.config sets it from the experiment
file).

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
from ray.rllib.algorithms.ppo.ppo import (
    LEARNER_RESULTS_KL_KEY,
    LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY,
    LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY,
)
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core import ALL_MODULES
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical
from ray.rllib.core.learner.learner import ENTROPY_KEY, POLICY_LOSS_KEY, VF_LOSS_KEY
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.core.rl_module.apis import SelfSupervisedLossAPI
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.lambda_defaultdict import LambdaDefaultDict
from ray.rllib.utils.metrics import (
    DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY,
    MODULE_TRAIN_BATCH_SIZE_MEAN,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_TRAINED,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    WEIGHTS_SEQ_NO,
)
from ray.rllib.utils.schedules.scheduler import Scheduler
from ray.rllib.utils.torch_utils import compute_global_norm, explained_variance

logger = logging.getLogger(__name__)

CLIP_SCHEDULE_KEY = "clip_param_schedule"  # in config.learner_config_dict
LEAN_KEY = "lean_learner"  # in config.learner_config_dict: False runs RLlib's own update
CURRENT_CLIP_PARAM_KEY = "curr_clip_param"  # logged per module when clip_param has a schedule
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
_NOTICED: set[str] = set()
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


def notice_once(message: str) -> None:
    """One line per reason and process: a fallback is said once."""
    if message not in _NOTICED:
        _NOTICED.add(message)
        logger.warning(message)
        print(f"[workbench] {message}", flush=True)


# One minibatch of the plan: row ranges [start, end) to concatenate, in order, and
# SHUFFLE where RLlib reshuffles the batch between two of them.
SHUFFLE = None
Piece = tuple[int, int] | None


def minibatch_plan(
    n: int, minibatch_size: int, num_epochs: int, shuffle: bool
) -> list[list[Piece]]:
    """What RLlib's ``MiniBatchCyclicIterator`` does to a batch of ``n`` rows, as a plan:
    for each minibatch, the row ranges it concatenates, with ``SHUFFLE`` where the batch
    is reshuffled (``np.random.permutation(n)``, as RLlib draws it) before the next range.

    RLlib cycles: a minibatch that runs past the end of the batch takes the tail, counts
    an epoch, shuffles the batch when asked, and continues from the top of the shuffled
    batch; it stops once every row was covered ``num_epochs`` times. Each range refers to
    the batch's order at that point of the plan."""
    if n <= 0 or minibatch_size <= 0:
        return []
    plan: list[list[Piece]] = []
    start, epochs = 0, 0
    while epochs < num_epochs:
        steps = minibatch_size
        pieces: list[Piece] = []
        while start + steps >= n:
            pieces.append((start, n))
            steps -= n - start
            start = 0
            epochs += 1
            if shuffle:
                pieces.append(SHUFFLE)
        end = start + steps
        if end > start:
            pieces.append((start, end))
        start = end
        plan.append(pieces)
    return plan


def _categorical_terms(
    logits: torch.Tensor, prev_logits: torch.Tensor, actions: torch.Tensor, *, kl: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """log p(actions), the entropy and KL(prev || current) of RLlib's TorchCategorical,
    computed with the operations torch's Categorical and its registered KL perform (the
    same values, bit for bit) without building two distribution objects per minibatch."""
    norm = logits - logits.logsumexp(dim=-1, keepdim=True)
    probs = torch.softmax(norm, dim=-1)
    logp = norm.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(torch.clamp(norm, min=torch.finfo(norm.dtype).min) * probs).sum(-1)
    if not kl:
        return logp, entropy, None
    prev_norm = prev_logits - prev_logits.logsumexp(dim=-1, keepdim=True)
    prev_probs = torch.softmax(prev_norm, dim=-1)
    t = prev_probs * (prev_norm - norm)
    t = torch.where(probs == 0, torch.inf, t)
    t = torch.where(prev_probs == 0, 0.0, t)
    return logp, entropy, t.sum(-1)


class _ClipParam:
    """A module's config with another clip_param (what RLlib's loss reads), the rest its."""

    def __init__(self, config: Any, clip_param: float) -> None:
        self._config = config
        self.clip_param = clip_param

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)


class LeanAdam:
    """A torch learner's Adam with the faster implementation on CPU, its state written and
    read as RLlib's own Adam's, and a gradient step with one NaN/inf check for all tensors.
    Mixed into the lean learners before RLlib's learner class."""

    # Adam's implementation on CPU: "fused" (one kernel for all tensors: ~4x faster than
    # the default for-loop on the small networks), "foreach", or None (torch's default).
    adam_implementation: str | None = "fused"

    # --- the optimizer -----------------------------------------------------------------

    def _adam_flags(self) -> dict[str, bool]:
        if self._device is not None and torch.device(self._device).type != "cpu":
            return {}
        if self.adam_implementation == "fused":
            return {"fused": True}
        if self.adam_implementation == "foreach":
            return {"foreach": True}
        return {}

    def configure_optimizers_for_module(self, module_id: Any, config: Any = None) -> None:
        """RLlib's Adam, with the faster implementation on CPU (the same state dict)."""
        params = self.get_parameters(self.module[module_id])
        optimizer = torch.optim.Adam(params, **self._adam_flags())
        self.register_optimizer(
            module_id=module_id,
            optimizer=optimizer,
            params=params,
            lr_or_lr_schedule=config.lr,
        )

    def _get_optimizer_state(self) -> Any:
        """RLlib's optimizer state, written as RLlib's own Adam writes it (without the
        implementation flag), so that RLlib's learner restores it as its own."""
        state = super()._get_optimizer_state()  # type: ignore[misc]
        for entry in state.values():
            for group in entry["state"].get("param_groups", []):
                group["fused"] = None
                group["foreach"] = None
        return state

    def _set_optimizer_state(self, state: Any) -> None:
        super()._set_optimizer_state(state)  # type: ignore[misc]
        flags = self._adam_flags()
        for optimizer in self._named_optimizers.values():
            for group in optimizer.param_groups:
                group["fused"] = flags.get("fused", None)
                group["foreach"] = flags.get("foreach", None)

    def lean_apply_gradients(self, gradients_dict: dict[Any, Any]) -> bool:
        """RLlib's TorchLearner.apply_gradients (non-finite gradients become finite, then
        every optimizer steps) with one check for all tensors; False, with nothing done,
        where mixed precision or torch LR schedulers need RLlib's own."""
        if self._grad_scalers is not None or self._lr_scheduler_classes is not None:
            return False
        grads = [g for g in gradients_dict.values() if g is not None]
        finite = self.config.torch_skip_nan_gradients or not grads
        if not finite:
            norms = torch._foreach_norm(grads)
            finite = bool(torch.isfinite(torch.stack(norms)).all())
        for pid, grad in gradients_dict.items():
            if not finite and grad is not None and not bool(torch.isfinite(grad).all()):
                logger.warning(f"Gradients {pid} contain `nan/inf` values; setting them to zero.")
                grad = torch.nan_to_num(grad)
            self._params[pid].grad = grad
        for module_id, names in self._module_optimizers.items():
            for name in names:
                self.get_optimizer(module_id, name).step()
        return True


class LeanPPOTorchLearner(LeanAdam, PPOTorchLearner):  # type: ignore[misc]
    """RLlib's PPO torch learner with a lean ``update`` loop (see the module docstring)."""

    def build(self) -> None:
        super().build()
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

    def lean_loss(
        self,
        *,
        module_id: Any,
        config: Any,
        batch: dict[str, torch.Tensor],
        fwd_out: dict[str, Any],
        with_stats: bool,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """RLlib's PPO loss (PPOTorchLearner.compute_loss_for_module, the same operations
        in the same order), returning its loss terms instead of logging them; the terms
        are computed only when ``with_stats`` (the iteration's last minibatch, the one
        RLlib's window-1 metrics report)."""
        module = self.module[module_id].unwrapped()
        mask = batch.get(Columns.LOSS_MASK)
        if mask is not None:
            num_valid = torch.sum(mask)

            def masked_mean(data: torch.Tensor) -> torch.Tensor:
                return torch.sum(data[mask]) / num_valid

        else:
            masked_mean = torch.mean

        train_cls = module.get_train_action_dist_cls()
        if train_cls is TorchCategorical and module.get_exploration_action_dist_cls() is train_cls:
            logp, curr_entropy, kl = _categorical_terms(
                fwd_out[Columns.ACTION_DIST_INPUTS],
                batch[Columns.ACTION_DIST_INPUTS],
                batch[Columns.ACTIONS],
                kl=config.use_kl_loss,
            )
            logp_ratio = torch.exp(logp - batch[Columns.ACTION_LOGP])
        else:
            curr_dist = train_cls.from_logits(fwd_out[Columns.ACTION_DIST_INPUTS])
            logp_ratio = torch.exp(
                curr_dist.logp(batch[Columns.ACTIONS]) - batch[Columns.ACTION_LOGP]
            )
            curr_entropy = curr_dist.entropy()
            kl = None
            if config.use_kl_loss:
                prev_dist = module.get_exploration_action_dist_cls().from_logits(
                    batch[Columns.ACTION_DIST_INPUTS]
                )
                kl = prev_dist.kl(curr_dist)
        if kl is not None:
            mean_kl_loss = masked_mean(kl)
        else:
            mean_kl_loss = torch.tensor(0.0, device=logp_ratio.device)

        clip = self.clip_param_for(module_id, config)
        advantages = batch[Postprocessing.ADVANTAGES]
        surrogate_loss = torch.min(
            advantages * logp_ratio,
            advantages * torch.clamp(logp_ratio, 1 - clip, 1 + clip),
        )
        if config.use_critic:
            value_fn_out = module.compute_values(batch, embeddings=fwd_out.get(Columns.EMBEDDINGS))
            vf_loss = torch.pow(value_fn_out - batch[Postprocessing.VALUE_TARGETS], 2.0)
            vf_loss_clipped = torch.clamp(vf_loss, 0, config.vf_clip_param)
        else:
            value_fn_out = vf_loss = vf_loss_clipped = torch.tensor(
                0.0, device=surrogate_loss.device
            )
        entropy_coeff = self.entropy_coeff_schedulers_per_module[module_id].get_current_value()
        total_loss = masked_mean(
            -surrogate_loss + config.vf_loss_coeff * vf_loss_clipped - entropy_coeff * curr_entropy
        )
        if config.use_kl_loss:
            total_loss = total_loss + self.curr_kl_coeffs_per_module[module_id] * mean_kl_loss

        stats: dict[str, torch.Tensor] = {}
        if with_stats:
            zero = torch.tensor(0.0, device=surrogate_loss.device)
            stats = {
                POLICY_LOSS_KEY: -masked_mean(surrogate_loss),
                VF_LOSS_KEY: masked_mean(vf_loss_clipped) if config.use_critic else zero,
                LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY: (
                    masked_mean(vf_loss) if config.use_critic else zero
                ),
                LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY: explained_variance(
                    batch[Postprocessing.VALUE_TARGETS], value_fn_out
                ),
                ENTROPY_KEY: masked_mean(curr_entropy),
                LEARNER_RESULTS_KL_KEY: mean_kl_loss,
            }
            if WEIGHTS_SEQ_NO in batch:
                behind = (self._weights_seq_no - batch[WEIGHTS_SEQ_NO]).float()
                stats[DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY] = (
                    masked_mean(behind) if mask is not None else torch.mean(behind)
                )
        return total_loss, stats

    def compute_loss_for_module(
        self, *, module_id: Any, config: Any, batch: Any, fwd_out: Any
    ) -> Any:
        """RLlib's PPO loss (its own update path: the lean loop switched off or unfit),
        reading the scheduled clip_param where the experiment gives a schedule."""
        if self.config.learner_config_dict.get(CLIP_SCHEDULE_KEY) is not None:
            config = _ClipParam(config, self.clip_param_for(module_id, config))
        return super().compute_loss_for_module(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )

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

    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        super().after_gradient_based_update(timesteps=timesteps)
        if self.config.learner_config_dict.get(CLIP_SCHEDULE_KEY) is None:
            return
        for module_id in self.module._rl_modules:
            value = self.clip_param_schedulers_per_module[module_id].update(
                timestep=timesteps.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0)
            )
            self.metrics.log_value((module_id, CURRENT_CLIP_PARAM_KEY), value, window=1)


# --- weight sync to a local env runner ----------------------------------------------------


def install_lean_weight_sync(algorithm: Any, **_: Any) -> None:
    """An ``on_algorithm_init`` callback: where the learner is a local lean learner and the
    only env runner is the trial's own (``num_env_runners: 0``), weight syncs copy the
    learner's tensors into the runner's module in place.

    RLlib's ``EnvRunnerGroup.sync_weights`` turns the learner's module state into numpy,
    puts it into Ray's object store even with no remote runner to read it, and loads it
    back into the runner's module from numpy, after every update. The copy here moves the
    same tensors (the learner's inference-only state: the keys RLlib would send), sets the
    runner's weights_seq_no as RLlib's ``set_state`` does, and leaves every other call
    (remote runners, global vars, another source) to RLlib's own method."""
    group = getattr(algorithm, "env_runner_group", None)
    learner_group = getattr(algorithm, "learner_group", None)
    if group is None or learner_group is None or not learner_group.is_local:
        return
    if not isinstance(learner_group._learner, LeanAdam):  # a lean learner: PPO's or DQN's
        return
    rllib_sync = group.sync_weights

    def sync_weights(
        policies: Any = None,
        from_worker_or_learner_group: Any = None,
        to_worker_indices: Any = None,
        global_vars: Any = None,
        timeout_seconds: Any = 0.0,
        inference_only: Any = False,
    ) -> None:
        runner = group.local_env_runner
        if (
            from_worker_or_learner_group is not learner_group
            or global_vars is not None
            or group.num_remote_workers() > 0
            or runner is None
            or not copy_weights(learner_group._learner, runner, policies, inference_only)
        ):
            rllib_sync(
                policies=policies,
                from_worker_or_learner_group=from_worker_or_learner_group,
                to_worker_indices=to_worker_indices,
                global_vars=global_vars,
                timeout_seconds=timeout_seconds,
                inference_only=inference_only,
            )

    group.sync_weights = sync_weights


def copy_weights(learner: Any, runner: Any, policies: Any, inference_only: bool) -> bool:
    """The learner's module state into a local single-agent env runner's module, tensor
    to tensor; False (nothing copied) where the layouts do not match one to one."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.core.rl_module.apis import InferenceOnlyAPI

    module_ids = list(policies) if policies is not None else list(learner.module.keys())
    if module_ids != [DEFAULT_MODULE_ID] or not isinstance(runner.module, torch.nn.Module):
        return False
    source = learner.module[DEFAULT_MODULE_ID]
    seq_no = learner._weights_seq_no
    if seq_no != 0 and runner._weights_seq_no >= seq_no:
        return True  # RLlib's set_state skips a runner that is not behind
    sent = source.state_dict()
    if inference_only and not source.inference_only and isinstance(source, InferenceOnlyAPI):
        dropped = source.get_non_inference_attributes()
        sent = {
            k: v
            for k, v in sent.items()
            if not any(k.startswith(a) and (len(k) == len(a) or k[len(a)] == ".") for a in dropped)
        }
    # RLlib loads it with strict=False: keys the runner's module lacks are ignored, keys
    # only the runner has (a full module's critic, on the trial's own runner) stay as
    # they are; an inference-only module missing one is an error there (left to RLlib).
    target = runner.module.state_dict()
    shared = [k for k in target if k in sent]
    if (getattr(runner.module, "inference_only", False) and len(shared) < len(target)) or any(
        target[k].shape != sent[k].shape for k in shared
    ):
        return False
    with torch.no_grad():
        for key in shared:
            target[key].copy_(sent[key])
    if seq_no > 0:
        runner._weights_seq_no = seq_no
    return True
