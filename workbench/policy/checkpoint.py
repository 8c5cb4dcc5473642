"""Algorithm checkpoints read for inference only: where the RLModule lies, the settings
acting with it needs, and which checkpoint a folder means.

A checkpoint the workbench wrote carries a manifest (`workbench.trial.manifest`): its
files' sizes and hashes, checked before anything is read, and the env and action
settings as JSON. Its policy is then built without unpickling anything but plain data:
RLlib's module pickles are read by an unpickler that accepts numbers, text, containers,
numpy arrays, Gymnasium spaces and RLlib's own module classes, and refuses every other
global (a function to call, a class from elsewhere). A checkpoint without a manifest can
only be read RLlib's way, by unpickling, which runs whatever code its files hold: that
takes ``trust=True`` (the CLI's ``--trust``)."""

from __future__ import annotations

import contextlib
import logging
import pickle
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.core.models.catalog import Catalog
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.rl_module import RLModule

from workbench.analysis.lineage import read_jsonl
from workbench.errors import ExperimentError
from workbench.lineage_record import LineageRecord
from workbench.names import LINEAGE_FILE
from workbench.trial.manifest import MANIFEST_FILE, Candidate, choose, problem, read_manifest
from workbench.trial.observation_filter import ObservationStats

POLICY_ID = "default_policy"


MODULE_DIR = Path("learner_group") / "learner" / "rl_module" / POLICY_ID


_CONFIG_FILE = Path("learner_group") / "class_and_ctor_args.pkl"


_CHECKPOINT_NAME = re.compile(r"^checkpoint_(\d+)$")


_WHAT_IS_VALID = (
    "valid: an algorithm checkpoint folder (a trial's checkpoint_NNNNNN, holding "
    f"{MODULE_DIR}), a trial folder with checkpoints, or an MLflow trial run (run id or "
    "trial name, with --store/--population)"
)

_TRUST = (
    "reading it means unpickling its files, which runs whatever code they hold; give "
    "--trust if you trust where the checkpoint came from (docs/evaluate-export.md)"
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
    # --trust: its module is loaded RLlib's way (unpickling); else as plain data only.
    trusted: bool = False
    # env.normalize_observations: the statistics the policy's observations go through.
    observation_filter: ObservationStats | None = None

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


def newest_checkpoint(checkpoints: list[Path]) -> Path:
    """Of a trial's checkpoints (oldest first), the newest intact one, as a trial restores
    (`workbench.trial.manifest.choose`); the newest if none is (reading it says why)."""
    index = {path: i for i, path in enumerate(checkpoints)}
    candidates = [
        Candidate(i, (path / MANIFEST_FILE).is_file(), problem(path)) for path, i in index.items()
    ]
    chosen = choose(len(checkpoints) - 1, candidates)
    return checkpoints[chosen.index] if chosen is not None else checkpoints[-1]


def _saved_at_iteration(checkpoint: Path) -> int | None:
    """The Tune iteration a workbench checkpoint was saved at, from its manifest."""
    try:
        manifest = read_manifest(checkpoint)
    except ValueError:
        return None
    settings = (manifest or {}).get("policy")
    value = settings.get("training_iteration") if isinstance(settings, dict) else None
    return int(value) if isinstance(value, int | float) else None


def _written_at(checkpoint: Path) -> float:
    """When a checkpoint was written: its manifest's time, written last (else the folder's)."""
    manifest = checkpoint / MANIFEST_FILE
    return (manifest if manifest.is_file() else checkpoint).stat().st_mtime


def _last_exploit_into(trial_dir: Path) -> LineageRecord | None:
    lineage = trial_dir.parent / LINEAGE_FILE
    if not lineage.is_file():
        return None
    try:
        records = read_jsonl(lineage)
    except (OSError, ValueError):
        return None
    mine = [record for record in records if record.target_name == trial_dir.name]
    return max(mine, key=lambda record: (record.seq, record.time)) if mine else None


def handed_checkpoint(trial_dir: Path) -> Path | None:
    """The donor checkpoint a PBT exploit handed the trial of ``trial_dir`` when the run
    ended before the trial trained from it (None: its own checkpoints hold its policy).

    An exploited trial restarts from the donor's checkpoint and saves its next ones in its
    own folder. Cut off first (the population's env-step budget or wall time ran out, the
    run was stopped), the weights it holds are the donor's, while its folder's newest
    checkpoint is a policy it had before the exploit: a shoot-out evaluated such a member
    of a LunarLander population on its iteration-4 policy although it held the best
    member's iteration-8 one. The lineage says so: the tracker writes the exploit with no
    ``restored_iteration`` when the trial never reported after it. The donor's checkpoint
    is the one of the iteration PBT handed over, written before the exploit (a donor
    rewound by an exploit of its own can save that iteration again later)."""
    record = _last_exploit_into(trial_dir)
    if (
        record is None
        or record.restored_iteration is not None
        or record.checkpoint_iteration is None
    ):
        return None
    own = trial_checkpoints(trial_dir)
    if own and _written_at(own[-1]) > record.time:
        return None  # it saved after the exploit: it did train from it
    handed = [
        checkpoint
        for checkpoint in trial_checkpoints(trial_dir.parent / record.source_name)
        if _saved_at_iteration(checkpoint) == record.checkpoint_iteration
        and _written_at(checkpoint) <= record.time
        and problem(checkpoint) is None
    ]
    return handed[-1] if handed else None


def final_checkpoint(trial_dir: Path) -> Path | None:
    """The checkpoint of the policy the trial of ``trial_dir`` held at its end: the one its
    last exploit handed it if it never trained from it (`handed_checkpoint`), else the
    newest intact one of its own; None if it has neither."""
    handed = handed_checkpoint(trial_dir)
    if handed is not None:
        return handed
    checkpoints = trial_checkpoints(trial_dir)
    return newest_checkpoint(checkpoints) if checkpoints else None


def find_checkpoint(path: Path) -> Path:
    """``path`` if it is a checkpoint, else the checkpoint of the policy the trial folder's
    trial held at its end (`final_checkpoint`)."""
    path = path.expanduser()
    if is_checkpoint(path):
        return path.resolve()
    if not path.exists():
        raise ExperimentError.single(str(path), "", f"does not exist; {_WHAT_IS_VALID}")
    final = final_checkpoint(path)
    if final is not None:
        return final.resolve()
    if path.is_dir() and (path / "params.json").is_file():
        raise ExperimentError.single(
            str(path),
            "",
            "this trial folder holds no checkpoint (a trial saves one every "
            "checkpoint.frequency iterations and at its end with checkpoint.at_end); "
            f"{_WHAT_IS_VALID}",
        )
    raise ExperimentError.single(str(path), "", f"is not a checkpoint; {_WHAT_IS_VALID}")


def read_checkpoint(path: Path, *, trust: bool = False) -> PolicyCheckpoint:
    """The checkpoint's algorithm, env and action settings (no module is built): from
    its manifest, checked first; without one only with ``trust`` (by unpickling)."""
    path = find_checkpoint(path)
    trouble = problem(path)
    try:
        manifest = read_manifest(path)
    except ValueError:
        manifest = {}
    if manifest is not None and trouble is not None:
        raise ExperimentError.single(
            str(path),
            "",
            f"the checkpoint is damaged: {trouble}; give its trial folder for the newest "
            "intact checkpoint",
        )
    settings = (manifest or {}).get("policy")
    if isinstance(settings, dict):
        try:
            return _from_settings(path, settings, trust)
        except (KeyError, TypeError, ValueError) as err:
            why = f"its {MANIFEST_FILE} does not say how its policy acts ({err!r})"
    elif manifest is None:
        why = f"it was not written by the workbench (it has no {MANIFEST_FILE})"
    else:
        why = f"its {MANIFEST_FILE} does not say how its policy acts"
    if not trust:
        raise ExperimentError.single(str(path), "", f"{why}: {_TRUST}")
    return _unpickled(path)


def _from_settings(path: Path, settings: dict[str, Any], trust: bool) -> PolicyCheckpoint:
    iteration = settings.get("training_iteration")
    env_config = settings["env_config"]
    if not isinstance(env_config, dict):
        raise TypeError("env_config is not a mapping")
    stats = settings.get("observation_filter")
    return PolicyCheckpoint(
        path=path,
        algorithm=str(settings["algorithm"]),
        env_id=str(settings["env_id"]),
        env_config=dict(env_config),
        normalize_actions=bool(settings["normalize_actions"]),
        clip_actions=bool(settings["clip_actions"]),
        training_iteration=None if iteration is None else int(iteration),
        trusted=trust,
        observation_filter=None if stats is None else ObservationStats.from_json(stats),
    )


def _unpickled(path: Path) -> PolicyCheckpoint:
    """RLlib's way (--trust): the learner group's pickled AlgorithmConfig."""
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
        trusted=True,
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


# What RLlib's module pickles hold: numpy arrays (and the scalars and random generators
# inside Gymnasium spaces), and classes of these kinds from Gymnasium and RLlib. Each of
# these only builds data; none calls anything it is handed but another of them.
_DATA_GLOBALS = {
    ("collections", "OrderedDict"),
    ("numpy", "dtype"),
    ("numpy", "ndarray"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    # A space's random generator: its bit generator by name or class, and its seed.
    ("numpy.random._pickle", "__generator_ctor"),
    ("numpy.random._pickle", "__bit_generator_ctor"),
    ("numpy.random._pickle", "__randomstate_ctor"),
    ("numpy.random._mt19937", "MT19937"),
    ("numpy.random._pcg64", "PCG64"),
    ("numpy.random._pcg64", "PCG64DXSM"),
    ("numpy.random._philox", "Philox"),
    ("numpy.random._sfc64", "SFC64"),
    ("numpy.random.bit_generator", "SeedSequence"),
    ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
}
_DATA_PACKAGES = ("gymnasium.spaces.", "ray.rllib.")
_DATA_CLASSES = (gym.Space, RLModule, Catalog, DefaultModelConfig)


class _DataUnpickler(pickle.Unpickler):
    """Unpickles plain data only: a global outside `_DATA_GLOBALS`, or a class that is not
    a Gymnasium space or RLlib's own module, catalog or model config, is refused before
    anything is called."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _DATA_GLOBALS:
            return super().find_class(module, name)
        if module.startswith(_DATA_PACKAGES) and name.isidentifier():
            found = super().find_class(module, name)
            if isinstance(found, type) and issubclass(found, _DATA_CLASSES):
                return found
        raise pickle.UnpicklingError(f"it refers to {module}.{name}, which is not plain data")


def _plain_data(path: Path) -> Any:
    with path.open("rb") as f:
        return _DataUnpickler(f).load()


def _module_as_data(folder: Path) -> Any:
    """The RLModule of ``folder`` built from its class and settings and given its
    weights, as RLModule.from_checkpoint does, with no code from the files run."""
    ctor = _plain_data(folder / RLModule.CLASS_AND_CTOR_ARGS_FILE_NAME)
    module_class = ctor["class"]
    args, kwargs = ctor["ctor_args_and_kwargs"]
    if not (isinstance(module_class, type) and issubclass(module_class, RLModule)):
        raise TypeError(f"{module_class!r} is not an RLModule class")
    state = _plain_data(folder / f"{RLModule.STATE_FILE_NAME}.pkl")
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, np.ndarray) and v.dtype != object
        for k, v in state.items()
    ):
        raise TypeError("its weights are not a mapping of names to numeric arrays")
    module = module_class(*args, **kwargs)
    module.set_state(state)
    return module


def load_module(checkpoint: PolicyCheckpoint) -> Any:
    """The checkpoint's RLModule, on CPU, in eval mode: built from plain data, or (a
    trusted checkpoint) RLlib's way."""
    with _quiet_rllib():
        if checkpoint.trusted:
            module: Any = RLModule.from_checkpoint(checkpoint.module_path.resolve().as_posix())
        else:
            try:
                module = _module_as_data(checkpoint.module_path)
            except (
                OSError,
                EOFError,
                pickle.UnpicklingError,
                KeyError,
                TypeError,
                ValueError,
            ) as err:
                raise ExperimentError.single(
                    str(checkpoint.path),
                    str(MODULE_DIR),
                    f"its policy cannot be read as plain data ({err}); {_TRUST}",
                ) from None
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
