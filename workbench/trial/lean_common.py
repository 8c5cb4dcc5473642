"""What both lean learners share: the switch that turns them off, and the fused Adam with
one NaN/inf check for all gradients (``LeanAdam``)."""

# RLlib types its learner's modules and optimizers loosely (inside the learner they are
# torch modules and optimizers), and torch types Adam's keywords one by one (the
# implementation flag goes in as a dict).
# mypy: disable-error-code="no-untyped-call,attr-defined,arg-type"
from __future__ import annotations

import logging
from typing import Any

import torch

from workbench.trial import eager_torch

logger = logging.getLogger(__name__)

LEAN_KEY = "lean_learner"  # in config.learner_config_dict: False runs RLlib's own update


class LeanAdam:
    """A torch learner's Adam with the faster implementation on CPU, its state written and
    read as RLlib's own Adam's, and a gradient step with one NaN/inf check for all tensors.
    Mixed into the lean learners before RLlib's learner class."""

    # Adam's implementation on CPU: "fused" (one kernel for all tensors: ~4x faster than
    # the default for-loop on the small networks), "foreach", or None (torch's default).
    adam_implementation: str | None = "fused"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        eager_torch.install()  # before RLlib's learner seeds torch (a remote learner's process)
        super().__init__(*args, **kwargs)

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
        """RLlib's Adam, with the faster implementation on CPU (the same state dict), that
        does not import torch's compiler (``eager_torch.EagerAdam``)."""
        params = self.get_parameters(self.module[module_id])
        optimizer = eager_torch.EagerAdam(params, **self._adam_flags())
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
