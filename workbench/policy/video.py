"""Watching a trained policy: episodes rendered to an MP4 or a GIF (`workbench eval --video`).

The env is made with Gymnasium's ``render_mode="rgb_array"``: sim_ext's envs draw their
frames with NumPy (`sim_ext.render`), Gymnasium's ids with their own renderer (most need
pygame: ``pip install "gymnasium[classic-control]"``). The policy acts as the evaluation's
does (deterministic unless asked otherwise) and episode k starts from seed ``seed + k``,
so the first episodes of the video are the first episodes `workbench eval` scores.

Written with imageio: MP4 (H.264) through the ffmpeg that imageio-ffmpeg ships, GIF
through Pillow; the frame rate is the env's ``metadata["render_fps"]`` unless given."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import imageio.v2 as imageio_v2
import imageio.v3 as iio
import imageio_ffmpeg
import numpy as np
import torch

import sim_ext  # noqa: F401  (registers the sim_ext ids)
from workbench.errors import ExperimentError
from workbench.policy.checkpoint import PolicyCheckpoint, load_module
from workbench.policy.evaluate import MAX_EPISODE_STEPS, policy_module, torch_actor

FORMATS = (".mp4", ".gif")
DEFAULT_FPS = 30


@dataclass
class Video:
    """What was written: the file, its frames and size, and each episode's return."""

    path: Path
    frames: int
    width: int
    height: int
    fps: float
    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)

    def line(self) -> str:
        shown = ", ".join(f"{r:.1f}" for r in self.returns)
        return (
            f"Video: {self.path} ({self.frames} frames of {self.width}x{self.height} at "
            f"{self.fps:g} fps; {len(self.returns)} episodes, returns {shown})"
        )


def check_video_path(path: Path, source: str) -> None:
    """An .mp4 or .gif file in a folder that exists (checked before anything is rolled out)."""
    if path.suffix.lower() not in FORMATS:
        raise ExperimentError.single(
            source, "--video", f"{str(path)!r}: valid: a file name ending in .mp4 or .gif"
        )
    if not path.parent.expanduser().is_dir():
        raise ExperimentError.single(
            source, "--video", f"{str(path)!r}: the folder {path.parent} does not exist"
        )


def _render_env(checkpoint: PolicyCheckpoint, env_config: dict[str, Any], source: str) -> Any:
    try:
        return gym.make(checkpoint.env_id, render_mode="rgb_array", **env_config)
    except gym.error.DependencyNotInstalled as err:
        raise ExperimentError.single(
            source, "--video", f"{checkpoint.env_id} cannot render here: {err}"
        ) from None
    except (TypeError, ValueError, gym.error.Error) as err:
        raise ExperimentError.single(
            source,
            "--video",
            f"{checkpoint.env_id} cannot render rgb_array frames ({err}); valid: an env "
            "whose render_modes include 'rgb_array'",
        ) from None


def record_video(
    checkpoint: PolicyCheckpoint,
    path: Path,
    *,
    episodes: int = 1,
    deterministic: bool = True,
    seed: int = 0,
    env_config: dict[str, Any] | None = None,
    fps: float | None = None,
    source: str = "",
) -> Video:
    """Plays `episodes` episodes of the checkpoint's policy and writes their frames to
    `path` (.mp4 or .gif), one after the other."""
    source = source or str(checkpoint.path)
    check_video_path(path, source)
    config = {**checkpoint.env_config, **(env_config or {})}
    env = _render_env(checkpoint, config, source)
    frames: list[np.ndarray] = []
    video = Video(path=path, frames=0, width=0, height=0, fps=0.0)
    try:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            act = torch_actor(
                policy_module(load_module(checkpoint), checkpoint, deterministic=deterministic)
            )
            for k in range(episodes):
                obs, _ = env.reset(seed=seed + k)
                frames.append(_frame(env))
                total, steps = 0.0, 0
                for steps in range(1, MAX_EPISODE_STEPS + 1):  # noqa: B007
                    action = act(np.asarray(obs, dtype=np.float32)[None])[0]
                    obs, reward, terminated, truncated, _ = env.step(action)
                    total += float(reward)
                    frames.append(_frame(env))
                    if terminated or truncated:
                        break
                video.returns.append(total)
                video.lengths.append(steps)
        rate = fps or float(env.metadata.get("render_fps") or DEFAULT_FPS)
    except gym.error.DependencyNotInstalled as err:  # Gymnasium's renderers need pygame
        raise ExperimentError.single(
            source, "--video", f"{checkpoint.env_id} cannot render here: {err}"
        ) from None
    finally:
        env.close()
    _write(path, frames, rate)
    video.frames = len(frames)
    video.height, video.width = frames[0].shape[:2]
    video.fps = rate
    return video


def _frame(env: Any) -> np.ndarray:
    frame = np.asarray(env.render())
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        raise ValueError(f"render() gave {frame.dtype} {frame.shape}, not HxWx3 uint8")
    return frame


def _write(path: Path, frames: list[np.ndarray], fps: float) -> None:
    if path.suffix.lower() == ".gif":
        # Pillow keeps GIF frame times in 10 ms steps; loop=0 plays it on repeat.
        iio.imwrite(path, np.stack(frames), extension=".gif", duration=1000.0 / fps, loop=0)
        return
    # H.264 in yuv420p (what players expect) needs even sides: pad with the edge pixels.
    height, width = frames[0].shape[:2]
    pad = ((0, height % 2), (0, width % 2), (0, 0))
    even = [np.pad(f, pad, mode="edge") for f in frames] if any(p[1] for p in pad) else frames
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # imageio-ffmpeg's notes on sizes and codecs
        frames_in: Any = even
        imageio_v2.mimwrite(
            path, frames_in, format="FFMPEG", fps=fps, codec="libx264", macro_block_size=1
        )


def read_video(path: Path) -> tuple[int, int, int]:
    """(frames, height, width) of a written video, read back with imageio."""
    if path.suffix.lower() == ".gif":
        frames = iio.imread(path, index=None, extension=".gif")
        return int(frames.shape[0]), int(frames.shape[1]), int(frames.shape[2])
    # ffmpeg decodes the whole file to count its frames: a file a player can play.
    frames, _ = imageio_ffmpeg.count_frames_and_secs(str(path))
    reader = imageio_ffmpeg.read_frames(str(path))
    try:
        width, height = next(reader)["size"]  # the stream's metadata comes first
    finally:
        reader.close()
    return int(frames), int(height), int(width)
