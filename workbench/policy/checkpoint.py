"""Algorithm checkpoints read for inference only: where the RLModule lies, the config
its learner group was built with, and which checkpoint a folder means."""

from __future__ import annotations

import contextlib
import logging
import pickle
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.rllib.core.rl_module.rl_module import RLModule

from workbench.errors import ExperimentError

POLICY_ID = "default_policy"


MODULE_DIR = Path("learner_group") / "learner" / "rl_module" / POLICY_ID


_CONFIG_FILE = Path("learner_group") / "class_and_ctor_args.pkl"


_CHECKPOINT_NAME = re.compile(r"^checkpoint_(\d+)$")


_WHAT_IS_VALID = (
    "valid: an algorithm checkpoint folder (a trial's checkpoint_NNNNNN, holding "
    f"{MODULE_DIR}), a trial folder with checkpoints, or an MLflow trial run (run id or "
    "trial name, with --store/--population)"
)


@dataclass(frozen=True)
class PolicyCheckpoint:
    """What acting with a checkpoint's policy needs, read from the checkpoint itself."""

    path: Path  # the algorithm checkpoint folder
    algorithm: str  # PPO, APPO, ...
    env_id: str
    env_config: dict[str, Any]
    normalize_actions: bool  # RLlib unsquashes Box actions from [-1, 1] to the bounds
    clip_actions: bool  # ... or only clips them (when not normalising)
    training_iteration: int | None  # the Tune iteration the checkpoint was saved at

    @property
    def module_path(self) -> Path:
        return self.path / MODULE_DIR


def is_checkpoint(path: Path) -> bool:
    """An algorithm checkpoint, or at least its learner group: all a policy needs."""
    return (path / MODULE_DIR).is_dir() and (path / _CONFIG_FILE).is_file()


def trial_checkpoints(trial_dir: Path) -> list[Path]:
    """A trial folder's checkpoints, oldest first (Tune numbers them in save order, so
    the last is the newest policy even after a PBT exploit rewound the iterations)."""
    if not trial_dir.is_dir():
        return []
    found = []
    for child in trial_dir.iterdir():
        match = _CHECKPOINT_NAME.match(child.name)
        if match and is_checkpoint(child):
            found.append((int(match.group(1)), child))
    return [path for _, path in sorted(found)]


def find_checkpoint(path: Path) -> Path:
    """``path`` if it is a checkpoint, else the newest checkpoint of the trial folder."""
    path = path.expanduser()
    if is_checkpoint(path):
        return path.resolve()
    if not path.exists():
        raise ExperimentError.single(str(path), "", f"does not exist; {_WHAT_IS_VALID}")
    checkpoints = trial_checkpoints(path)
    if checkpoints:
        return checkpoints[-1].resolve()
    if path.is_dir() and (path / "params.json").is_file():
        raise ExperimentError.single(
            str(path),
            "",
            "this trial folder holds no checkpoint (a trial saves one every "
            "checkpoint.frequency iterations and at its end with checkpoint.at_end); "
            f"{_WHAT_IS_VALID}",
        )
    raise ExperimentError.single(str(path), "", f"is not a checkpoint; {_WHAT_IS_VALID}")


def read_checkpoint(path: Path) -> PolicyCheckpoint:
    """The checkpoint's algorithm, env and action settings (no module is built)."""
    path = find_checkpoint(path)
    try:
        with (path / _CONFIG_FILE).open("rb") as f:
            config = pickle.load(f)["ctor_args_and_kwargs"][1]["config"]
    except (OSError, KeyError, IndexError, TypeError, pickle.UnpicklingError) as err:
        raise ExperimentError.single(
            str(path),
            str(_CONFIG_FILE),
            f"cannot read the algorithm config the checkpoint was trained with ({err}); "
            f"{_WHAT_IS_VALID}",
        ) from None
    iteration = None
    state = path / "algorithm_state.pkl"
    with (
        contextlib.suppress(OSError, pickle.UnpicklingError, AttributeError, EOFError),
        state.open("rb") as f,
    ):
        iteration = pickle.load(f).get("training_iteration")
    env = config.env
    return PolicyCheckpoint(
        path=path,
        algorithm=type(config).__name__.removesuffix("Config"),
        env_id=env if isinstance(env, str) else getattr(env, "__name__", str(env)),
        env_config=dict(config.env_config or {}),
        normalize_actions=bool(config.normalize_actions),
        clip_actions=bool(config.clip_actions),
        training_iteration=None if iteration is None else int(iteration),
    )


@contextlib.contextmanager
def _quiet_rllib() -> Iterator[None]:
    """RLlib logs a deprecation warning of its own for every module it builds."""
    log = logging.getLogger("ray._common.deprecation")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def load_module(checkpoint: PolicyCheckpoint) -> Any:
    """The checkpoint's RLModule, on CPU, in eval mode."""
    with _quiet_rllib():
        module: Any = RLModule.from_checkpoint(checkpoint.module_path.resolve().as_posix())
    module.eval()
    return module


def check_env(checkpoint: PolicyCheckpoint, env_id: str | None, source: str) -> None:
    """Refuses to act on another env than the one the policy was trained on."""
    if env_id is not None and env_id != checkpoint.env_id:
        raise ExperimentError.single(
            source,
            "--env",
            f"{env_id!r}: the checkpoint {checkpoint.path} was trained on "
            f"{checkpoint.env_id!r}; valid: {checkpoint.env_id!r} (change its settings with "
            f"--env-config KEY=VALUE), or a checkpoint trained on {env_id!r}",
        )
