"""Weight syncs from a local lean learner to the trial's own env runner as an in-place
tensor copy, instead of RLlib's round trip through numpy and Ray's object store."""

from __future__ import annotations

from typing import Any

import torch

from workbench.trial.lean_common import LeanAdam


def install_in_place_sync(algorithm: Any) -> None:
    """Where the learner is a local lean learner and the only env runner is the trial's own
    (``num_env_runners: 0``), weight syncs copy the learner's tensors into the runner's
    module in place (the ``on_algorithm_init`` callback ``install_lean_weight_sync`` of
    workbench.trial.lean_learner calls this).

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
