"""Torch in a trial process without its compiler: about 2 of the 6 CPU seconds a trial
process spent before its first ``train()`` (docs/ray-fixes.md).

Two calls on every trial's path import ``torch._dynamo`` and Inductor (with sympy and the
distributed packages) though eager training never compiles:

* RLlib seeds torch with ``torch.use_deterministic_algorithms(True)``, which imports
  Inductor's config to set its ``deterministic`` flag;
* ``torch.optim.Adam``'s ``step``, ``zero_grad``, ``add_param_group``, ``state_dict`` and
  ``load_state_dict`` carry torch's marker that keeps ``torch.compile`` out of them, and the
  marker imports ``torch._dynamo`` the first time one of them runs.

``EagerAdam`` is torch's Adam with those methods undecorated (the same code, the same state
dict), and ``install()`` makes ``torch.use_deterministic_algorithms`` set torch's flag and
leave Inductor's to the environment variable Inductor reads when it is first imported.
Once anything has imported torch's compiler, both do exactly what torch does.
"""

# torch types its optimizer methods loosely (ParamSpec wrappers).
# mypy: disable-error-code="no-untyped-call,no-any-return"
from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

import torch

_COMPILER = "torch._dynamo"
_INDUCTOR_CONFIG = "torch._inductor.config"
# Inductor's config reads it when first imported (torch/_inductor/config.py).
INDUCTOR_DETERMINISTIC_ENV = "TORCHINDUCTOR_DETERMINISTIC"


def _undecorated(method: Callable[..., Any]) -> Callable[..., Any]:
    """The method as written, without torch's wrappers (``functools.wraps`` chains)."""
    return inspect.unwrap(method)


_ADAM_STEP = _undecorated(torch.optim.Adam.step)
_ZERO_GRAD = _undecorated(torch.optim.Optimizer.zero_grad)
_ADD_PARAM_GROUP = _undecorated(torch.optim.Optimizer.add_param_group)
_STATE_DICT = _undecorated(torch.optim.Optimizer.state_dict)
_LOAD_STATE_DICT = _undecorated(torch.optim.Optimizer.load_state_dict)


def compiler_loaded() -> bool:
    return _COMPILER in sys.modules or _INDUCTOR_CONFIG in sys.modules


class EagerAdam(torch.optim.Adam):
    """``torch.optim.Adam``, stepping and reading and writing its state without importing
    torch's compiler while nothing else has (then it is torch's Adam, marker and all)."""

    def step(self, closure: Any = None) -> Any:
        if compiler_loaded():
            return super().step(closure)
        # What torch's step wrapper does outside torch.compile: grad mode as configured.
        before = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(self.defaults["differentiable"])
            return _ADAM_STEP(self, closure)
        finally:
            torch.set_grad_enabled(before)

    def zero_grad(self, set_to_none: bool = True) -> None:
        if compiler_loaded():
            return super().zero_grad(set_to_none)
        return _ZERO_GRAD(self, set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if compiler_loaded():
            return super().add_param_group(param_group)
        return _ADD_PARAM_GROUP(self, param_group)

    def state_dict(self) -> Any:
        if compiler_loaded():
            return super().state_dict()
        return _STATE_DICT(self)

    def load_state_dict(self, state_dict: Any) -> None:
        if compiler_loaded():
            return super().load_state_dict(state_dict)
        return _LOAD_STATE_DICT(self, state_dict)


_TORCH_USE_DETERMINISTIC = torch.use_deterministic_algorithms


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """``torch.use_deterministic_algorithms``: torch's flag now, Inductor's from the
    environment when it is imported (torch's own function once it has been)."""
    if compiler_loaded():
        _TORCH_USE_DETERMINISTIC(mode, warn_only=warn_only)
        return
    os.environ[INDUCTOR_DETERMINISTIC_ENV] = "1" if mode else "0"
    torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)


def install() -> None:
    """In this process, ``torch.use_deterministic_algorithms`` as above (RLlib seeds
    torch through it when it builds an algorithm, a learner or an env runner)."""
    torch.use_deterministic_algorithms = use_deterministic_algorithms
