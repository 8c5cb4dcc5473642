"""`eval` and `export-policy` read a checkpoint's policy as plain data: the workbench's
own checkpoints (their manifest checked first) without unpickling code, and a checkpoint
it did not write only when told `--trust`. A crafted pickle is never run."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from ray.rllib.core.rl_module.rl_module import RLModule

from tests.support.policies import learner_group_checkpoint
from workbench.cli import main
from workbench.errors import ExperimentError
from workbench.policy.checkpoint import MODULE_DIR, find_checkpoint, load_module, read_checkpoint
from workbench.trial.manifest import MANIFEST_FILE, read_manifest, write_manifest

CARTPOLE = "sim_ext/CartPole-v1"
PICKLES = (
    Path("learner_group") / "class_and_ctor_args.pkl",
    MODULE_DIR / "class_and_ctor_args.pkl",
    MODULE_DIR / "module_state.pkl",
    Path("algorithm_state.pkl"),
)


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return learner_group_checkpoint(tmp_path_factory.mktemp("cartpole"), "PPO", CARTPOLE)


class _Payload:
    """Unpickling it runs a shell command that leaves a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def _crafted(folder: Path, marker: Path) -> Path:
    """A checkpoint-shaped folder whose every pickle runs the payload."""
    for name in PICKLES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(pickle.dumps(_Payload(marker)))
    return folder


@pytest.mark.parametrize(
    ("algorithm", "env_id"), [("PPO", CARTPOLE), ("SAC", "sim_ext/Pendulum-v1")]
)
def test_the_policy_is_the_one_rllib_restores(tmp_path: Path, algorithm: str, env_id: str) -> None:
    checkpoint = learner_group_checkpoint(tmp_path, algorithm, env_id)
    # A trained module's spaces carry their random generator (seeded, drawn from).
    ctor_file = checkpoint / MODULE_DIR / "class_and_ctor_args.pkl"
    ctor = pickle.loads(ctor_file.read_bytes())
    for space in ("observation_space", "action_space"):
        ctor["ctor_args_and_kwargs"][1][space].seed(3)
        ctor["ctor_args_and_kwargs"][1][space].sample()
    ctor_file.write_bytes(pickle.dumps(ctor))
    write_manifest(checkpoint, policy=(read_manifest(checkpoint) or {})["policy"])

    info = read_checkpoint(checkpoint)
    assert not info.trusted and info.env_id == env_id and info.algorithm == algorithm
    ours = load_module(info).get_state()
    rllib = RLModule.from_checkpoint(info.module_path.as_posix()).get_state()
    assert ours.keys() == rllib.keys()
    assert all(np.array_equal(ours[k], rllib[k]) for k in ours)


def test_a_crafted_checkpoint_is_refused_and_never_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "marker"
    folder = _crafted(tmp_path / "checkpoint_000000", marker)
    assert main(["eval", str(folder), "--no-log"]) == 2
    err = capsys.readouterr().err
    assert f"not written by the workbench (it has no {MANIFEST_FILE})" in err and "--trust" in err
    assert main(["export-policy", str(folder), "-o", str(tmp_path / "out")]) == 2
    assert "--trust" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

    # A manifest anyone could write (sizes, hashes, settings) changes nothing: the
    # policy is still read as plain data, and the payload is refused.
    write_manifest(
        folder,
        policy={
            "algorithm": "PPO",
            "env_id": CARTPOLE,
            "env_config": {},
            "normalize_actions": True,
            "clip_actions": False,
            "training_iteration": 1,
        },
    )
    assert main(["eval", str(folder), "--no-log"]) == 2
    err = capsys.readouterr().err
    assert "posix.system, which is not plain data" in err and "--trust" in err
    assert main(["export-policy", str(folder), "-o", str(tmp_path / "out")]) == 2
    assert "--trust" in capsys.readouterr().err
    assert not marker.exists(), "a pickle from the checkpoint ran"


def test_a_checkpoint_without_a_manifest_is_read_only_when_trusted(
    cartpole: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    foreign = shutil.copytree(cartpole, tmp_path / "foreign")
    (foreign / MANIFEST_FILE).unlink()
    with pytest.raises(ExperimentError, match="--trust"):
        read_checkpoint(foreign)
    assert main(["eval", str(foreign), "--no-log", "--episodes", "1", "--trust"]) == 0
    assert "return" in capsys.readouterr().out
    info = read_checkpoint(foreign, trust=True)
    assert info.trusted and info.env_id == CARTPOLE


def test_a_damaged_checkpoint_is_refused_and_a_trial_folder_means_its_newest_intact_one(
    cartpole: Path, tmp_path: Path
) -> None:
    trial = tmp_path / "PPO_00000"
    for index in (1, 2):
        shutil.copytree(cartpole, trial / f"checkpoint_{index:06d}")
    state = trial / "checkpoint_000002" / MODULE_DIR / "module_state.pkl"
    state.write_bytes(state.read_bytes()[:100])
    with pytest.raises(ExperimentError, match=r"the checkpoint is damaged: .*\(truncated\)"):
        read_checkpoint(trial / "checkpoint_000002")
    assert find_checkpoint(trial) == (trial / "checkpoint_000001").resolve()
