"""`workbench eval --video`: the written file plays (read back with imageio, frame by frame:
one frame per reset and per step, at the env's size), its episodes are the evaluation's
first episodes, and a wrong file name is refused before anything is rolled out."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.policies import learner_group_checkpoint
from workbench.cli import main
from workbench.policy.checkpoint import read_checkpoint
from workbench.policy.video import read_video, record_video


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return learner_group_checkpoint(tmp_path_factory.mktemp("cp"), "PPO", "sim_ext/CartPole-v1")


@pytest.mark.parametrize("suffix", [".mp4", ".gif"])
def test_eval_video_writes_a_playable_file_of_the_evaluated_episodes(
    cartpole: Path, tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / f"cartpole{suffix}"
    args = ["eval", str(cartpole), "--episodes", "3", "--seed", "5", "--no-log", "--json"]
    assert main([*args, "--video", str(out), "--video-episodes", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    video = report["video"]
    # The video's episodes are the evaluation's first two (same seeds, same policy).
    assert video["returns"] == report["returns"][:2]
    assert video["lengths"] == report["lengths"][:2]
    frames, height, width = read_video(out)
    assert frames == video["frames"] == sum(video["lengths"]) + 2  # a reset frame each
    assert (height, width) == (400, 600) == (video["height"], video["width"])
    assert video["fps"] == 50  # sim_ext CartPole's render_fps


def test_frames_show_the_env_moving(cartpole: Path, tmp_path: Path) -> None:
    import imageio.v3 as iio

    video = record_video(read_checkpoint(cartpole), tmp_path / "a.gif", seed=1)
    frames = iio.imread(tmp_path / "a.gif", index=None)
    assert frames.shape == (video.frames, 400, 600, 3) and frames.dtype == np.uint8
    assert len({f.tobytes() for f in frames}) > 1, "every frame alike: the state is not drawn"


def test_a_gymnasium_id_renders_with_its_own_renderer(tmp_path: Path) -> None:
    checkpoint = learner_group_checkpoint(tmp_path / "gym", "PPO", "CartPole-v1")
    video = record_video(read_checkpoint(checkpoint), tmp_path / "gym.mp4", seed=2)
    assert read_video(tmp_path / "gym.mp4") == (video.frames, 400, 600)


@pytest.mark.parametrize(
    ("name", "message"),
    [("out.avi", "ending in .mp4 or .gif"), ("nowhere/out.mp4", "does not exist")],
)
def test_a_wrong_video_file_is_refused_first(
    cartpole: Path, tmp_path: Path, name: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / name
    assert main(["eval", str(cartpole), "--no-log", "--video", str(target)]) == 2
    err = capsys.readouterr().err
    assert "--video" in err and message in err
    assert not target.exists()
