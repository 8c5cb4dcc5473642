"""A trial process does not import torch's compiler (workbench/trial/eager_torch.py): what
torch does without the fix, and that the fix steps, saves and seeds exactly as torch does
(tests/integration/test_eager_torch_integration.py: a whole trial)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from workbench.trial.eager_torch import EagerAdam

ROOT = Path(__file__).resolve().parents[2]


def fresh(code: str) -> dict[str, Any]:
    """Runs ``code`` in a new Python (``loaded()`` names the compiler modules imported);
    its last stdout line is JSON."""
    out = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "RAY_ADDRESS": "", "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


PRELUDE = """import json, sys
def loaded():
    names = ("torch._dynamo", "torch._inductor.config", "sympy")
    return sorted(m for m in names if m in sys.modules)
"""


def test_torch_imports_its_compiler_for_adam_and_for_seeding_and_the_fix_does_not() -> None:
    found = fresh(
        """
        import torch
        from workbench.trial import eager_torch
        seen = {}
        torch.use_deterministic_algorithms(True)
        seen["torch's seeding"] = loaded()
        print(json.dumps(seen))
        """
    )
    assert found["torch's seeding"] == ["sympy", "torch._dynamo", "torch._inductor.config"]

    found = fresh(
        """
        import torch
        seen = {}
        model = torch.nn.Linear(4, 2)
        adam = torch.optim.Adam(model.parameters())
        seen["torch's Adam"] = loaded()
        print(json.dumps(seen))
        """
    )
    assert "torch._dynamo" in found["torch's Adam"]

    found = fresh(
        """
        import torch
        from workbench.trial import eager_torch
        eager_torch.install()
        torch.use_deterministic_algorithms(True)
        seen = {"deterministic": torch.are_deterministic_algorithms_enabled()}
        model = torch.nn.Linear(4, 2)
        adam = eager_torch.EagerAdam(model.parameters(), fused=True)
        model(torch.ones(3, 4)).sum().backward()
        adam.step()
        adam.zero_grad()
        adam.load_state_dict(adam.state_dict())
        adam.add_param_group({"params": [torch.nn.Parameter(torch.ones(2))]})
        seen["loaded"] = loaded()
        # Inductor, imported later (torch.compile), has the flag torch's own call sets.
        import torch._inductor.config as inductor
        seen["inductor deterministic"] = inductor.deterministic
        print(json.dumps(seen))
        """
    )
    assert found == {"deterministic": True, "loaded": [], "inductor deterministic": True}


def _train(optimizer: torch.optim.Optimizer, model: torch.nn.Module, steps: int) -> None:
    generator = torch.Generator().manual_seed(3)
    for _ in range(steps):
        x = torch.randn(16, 6, generator=generator)
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


@pytest.mark.parametrize("flags", [{"fused": True}, {"foreach": True}, {}, {"amsgrad": True}])
def test_eager_adam_steps_and_saves_exactly_as_torchs_adam(flags: dict[str, bool]) -> None:
    ours, theirs = _model(), _model()
    eager = EagerAdam(ours.parameters(), lr=3e-3, weight_decay=1e-4, **flags)
    plain = torch.optim.Adam(theirs.parameters(), lr=3e-3, weight_decay=1e-4, **flags)
    _train(eager, ours, 5)
    _train(plain, theirs, 5)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)
    assert repr(eager.state_dict()) == repr(plain.state_dict())
    # Each restores the other's state and goes on as the other would.
    # (Copies: torch's load_state_dict keeps the given tensors where dtype and device fit.)
    mine, yours = copy.deepcopy(eager.state_dict()), copy.deepcopy(plain.state_dict())
    eager.load_state_dict(yours)
    plain.load_state_dict(mine)
    _train(eager, ours, 3)
    _train(plain, theirs, 3)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)
    # The step runs without grad (an in-place update of a leaf would raise) and gives the
    # caller's grad mode back, as torch's wrapper does.
    with torch.enable_grad():
        eager.step()
        assert torch.is_grad_enabled()
    with torch.no_grad():
        eager.step()
        assert not torch.is_grad_enabled()
