"""RLlib's PPO loss as the lean PPO learner computes it: the same operations in the same
order, its terms returned for one log per iteration instead of logged per minibatch."""

# RLlib types its modules, batches and distributions loosely (str | RLModule, ndarray |
# Tensor): inside the learner they are always torch modules and tensors.
# mypy: disable-error-code="no-untyped-call,attr-defined,arg-type,assignment,dict-item"
from __future__ import annotations

from typing import Any

import torch
from ray.rllib.algorithms.ppo.ppo import (
    LEARNER_RESULTS_KL_KEY,
    LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY,
    LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical
from ray.rllib.core.learner.learner import ENTROPY_KEY, POLICY_LOSS_KEY, VF_LOSS_KEY
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.metrics import DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY, WEIGHTS_SEQ_NO
from ray.rllib.utils.torch_utils import explained_variance


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


class LeanPPOLoss:
    """The lean PPO learner's loss (``lean_loss``), with the coefficients its schedules
    give now (entropy, KL, clip_param). Mixed into a PPO torch learner before RLlib's
    class."""

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
