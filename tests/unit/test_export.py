"""`workbench export-policy`: the exported files act as the RLlib module does, and load
with plain torch (the example of docs/evaluate-export.md runs as written, without Ray)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.support.policies import learner_group_checkpoint, rllib_actor
from workbench.cli import main
from workbench.policy.checkpoint import read_checkpoint
from workbench.policy.export import export_policy, sample_observations

ROOT = Path(__file__).resolve().parents[2]
CASES = [
    ("PPO", "sim_ext/CartPole-v1"),  # categorical: argmax
    ("PPO", "sim_ext/Pendulum-v1"),  # Gaussian: its mean, unsquashed to [-2, 2]
    ("DQN", "sim_ext/Acrobot-v1"),  # the module gives its actions itself (greedy)
]


@pytest.fixture(scope="module", params=CASES, ids=[f"{a}-{e.split('/')[1]}" for a, e in CASES])
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    algorithm, env_id = request.param
    checkpoint = learner_group_checkpoint(tmp_path_factory.mktemp("checkpoint"), algorithm, env_id)
    folder = tmp_path_factory.mktemp("export") / "policy"
    export_policy(read_checkpoint(checkpoint), folder)
    return folder


def _torchscript(path: Path) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():  # torch 2.13 deprecates TorchScript
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.jit")
        return torch.jit.load(str(path))  # type: ignore[no-untyped-call]


def test_the_exported_policy_acts_as_the_rllib_module(exported: Path) -> None:
    spec = json.loads((exported / "policy.json").read_text())
    checkpoint = Path(spec["checkpoint"])
    observations = sample_observations(spec["env_id"], spec["env_config"], n=300, seed=7)
    expected = rllib_actor(checkpoint)(observations)
    loaded = {
        "torch.export": torch.export.load(str(exported / "policy.pt2")).module(),
        "TorchScript": _torchscript(exported / "policy.pt"),
    }
    for name, policy in loaded.items():
        for batch in (observations, observations[:1]):
            with torch.no_grad():
                actions = policy(torch.from_numpy(batch)).numpy()
            reference = expected[: len(batch)]
            assert actions.shape == reference.shape, name
            if spec["action_space"]["type"] == "Discrete":
                assert actions.dtype == np.int64
                np.testing.assert_array_equal(actions, reference, err_msg=name)
            else:
                np.testing.assert_allclose(actions, reference, rtol=0, atol=1e-6, err_msg=name)
    if spec["action_space"]["type"] == "Box":
        assert "mapped from [-1, 1] to the action bounds" in spec["output"]


def test_the_spec_describes_the_env_and_its_spaces(exported: Path) -> None:
    spec = json.loads((exported / "policy.json").read_text())
    assert spec["env_id"].startswith("sim_ext/") and spec["deterministic"] is True
    assert spec["files"] == {"torch_export": "policy.pt2", "torchscript": "policy.pt"}
    assert {spec["observation_space"]["type"], spec["action_space"]["type"]} <= {
        "Box",
        "Discrete",
    }
    if spec["env_id"] == "sim_ext/Pendulum-v1":
        assert spec["action_space"] == {
            "type": "Box",
            "shape": [1],
            "dtype": "float32",
            "low": [-2.0],
            "high": [2.0],
        }


def _documented_example() -> str:
    """The Python example of docs/evaluate-export.md that loads an exported policy."""
    page = (ROOT / "docs" / "evaluate-export.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    return next(b for b in blocks if "torch.export.load" in b)


def test_the_documented_example_runs_without_ray(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    checkpoint = learner_group_checkpoint(
        tmp_path_factory.mktemp("docs"), "PPO", "sim_ext/CartPole-v1"
    )
    work = tmp_path_factory.mktemp("work")
    assert main(["export-policy", str(checkpoint), "-o", str(work / "policy")]) == 0
    code = _documented_example() + (
        "\nimport sys\n"
        "assert not [m for m in sys.modules if m == 'ray' or m.startswith('ray.')]\n"
        "print('mean return', total.mean())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=work, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "mean return" in result.stdout


def test_bad_input_names_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = learner_group_checkpoint(tmp_path / "ckpt", "PPO", "sim_ext/CartPole-v1")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    assert main(["export-policy", str(checkpoint), "-o", str(tmp_path / "full")]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"

    out = str(tmp_path / "out")
    assert main(["export-policy", str(checkpoint), "-o", out, "--env", "sim_ext/Acrobot-v1"]) == 2
    assert "trained on 'sim_ext/CartPole-v1'" in capsys.readouterr().err
    trial = tmp_path / "PPO_00000"
    trial.mkdir()
    (trial / "params.json").write_text("{}")
    assert main(["export-policy", str(trial), "-o", out]) == 2
    assert "holds no checkpoint" in capsys.readouterr().err
    assert not Path(out).exists()
