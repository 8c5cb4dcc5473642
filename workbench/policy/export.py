"""Export: a checkpoint's policy as files that plain torch loads, without Ray or RLlib.

The exported function is the deterministic policy the evaluation rolls out
(`workbench.evaluate.Policy`): a batch of observations in, the actions the env takes
out (argmax / distribution mean, then RLlib's unsquashing of Box actions to their
bounds). Files:

- ``policy.pt2``: a ``torch.export`` program (torch's supported format since it
  deprecated TorchScript in 2.x): ``torch.export.load(path).module()``;
- ``policy.pt``: the same as TorchScript, for libtorch (C++) and older torch:
  ``torch.jit.load(path)`` (torch 2.13 marks it deprecated);
- ``policy.onnx``: only where the ``onnx`` package is installed;
- ``policy.json``: the env id and env_config, the observation and action spaces, how
  actions were post-processed, where the policy came from.

Each file is loaded back after it is written and checked against the RLlib module on
real observations of the env.
"""

from __future__ import annotations

import importlib.util
import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from workbench.errors import ExperimentError
from workbench.policy.checkpoint import PolicyCheckpoint, load_module
from workbench.policy.evaluate import make_vector_env, policy_module
from workbench.policy.locate import locate_checkpoint

PROGRAM_FILE = "policy.pt2"
TORCHSCRIPT_FILE = "policy.pt"
ONNX_FILE = "policy.onnx"
SPEC_FILE = "policy.json"
FORMAT_VERSION = 1


def space_to_json(space: Any) -> dict[str, Any]:
    """A Gymnasium Box or Discrete space as JSON (infinite bounds as "inf"/"-inf")."""
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.Box):

        def bound(values: np.ndarray) -> list[Any]:
            return [
                float(v) if math.isfinite(v) else ("inf" if v > 0 else "-inf")
                for v in np.asarray(values, dtype=np.float64).ravel()
            ]

        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": bound(space.low),
            "high": bound(space.high),
        }
    return {"type": type(space).__name__, "repr": repr(space)}


def sample_observations(
    env_id: str, env_config: dict[str, Any], n: int = 256, seed: int = 0
) -> np.ndarray:
    """`n` observations the env really gives: resets and random actions (float32)."""
    envs = 16
    env = make_vector_env(env_id, envs, env_config)
    try:
        env.action_space.seed(seed)
        obs, _ = env.reset(seed=seed)
        batches = [obs]
        while sum(len(b) for b in batches) < n:
            obs, *_ = env.step(env.action_space.sample())
            batches.append(obs)
    finally:
        env.close()
    return np.concatenate(batches)[:n].astype(np.float32)


@dataclass
class ExportedPolicy:
    folder: Path
    files: dict[str, Path]
    spec: dict[str, Any]
    max_difference: dict[str, float] = field(default_factory=dict)  # per file, vs RLlib
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"Policy of {self.spec['checkpoint']} exported to {self.folder}:"]
        for kind, path in self.files.items():
            diff = self.max_difference.get(kind)
            checked = "" if diff is None else f" (checked: max |difference| {diff:.3g})"
            out.append(f"  {path.name}: {kind}{checked}")
        out.extend(f"  {note}" for note in self.notes)
        return out


def export_policy(checkpoint: PolicyCheckpoint, folder: Path) -> ExportedPolicy:
    """Writes the checkpoint's deterministic policy and its spec into a new folder."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ExperimentError.single(
            str(folder), "-o", "exists and is not an empty folder; give a new folder"
        )
    module = load_module(checkpoint)
    policy = policy_module(module, checkpoint, deterministic=True)
    observations = torch.from_numpy(
        sample_observations(checkpoint.env_id, checkpoint.env_config, n=64)
    )
    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    notes: list[str] = []
    with torch.no_grad():
        reference = policy(observations)
        batch = torch.export.Dim("batch")
        program = torch.export.export(policy, (observations,), dynamic_shapes=({0: batch},))
        files["torch_export"] = folder / PROGRAM_FILE
        torch.export.save(program, files["torch_export"])
        with warnings.catch_warnings():
            # torch 2.13 deprecates TorchScript (in favour of torch.export, above); the
            # file is for libtorch and older torch.
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.jit")
            traced = torch.jit.trace(policy, observations)  # type: ignore[no-untyped-call]
            files["torchscript"] = folder / TORCHSCRIPT_FILE
            traced.save(str(files["torchscript"]))
    if importlib.util.find_spec("onnx") is not None:
        try:
            torch.onnx.export(
                policy,
                (observations,),
                str(folder / ONNX_FILE),
                input_names=["obs"],
                output_names=["actions"],
                dynamic_axes={"obs": {0: "batch"}, "actions": {0: "batch"}},
            )
            files["onnx"] = folder / ONNX_FILE
        except Exception as err:  # optional: the torch formats are there
            notes.append(f"ONNX skipped: {type(err).__name__}: {err}".splitlines()[0])
    else:
        notes.append("ONNX skipped: the onnx package is not installed")
    spec = {
        "format": FORMAT_VERSION,
        "algorithm": checkpoint.algorithm,
        "env_id": checkpoint.env_id,
        "env_config": checkpoint.env_config,
        "observation_space": space_to_json(module.observation_space),
        "action_space": space_to_json(module.action_space),
        "input": "a float32 batch of observations, shape (batch, *observation_space.shape)",
        "output": "the actions the env takes, one per observation: "
        + _output_description(policy.to_env),
        "deterministic": True,
        "files": {kind: path.name for kind, path in files.items()},
        "checkpoint": str(checkpoint.path),
        "training_iteration": checkpoint.training_iteration,
        "torch": torch.__version__,
    }
    (folder / SPEC_FILE).write_text(json.dumps(spec, indent=2) + "\n")
    exported = ExportedPolicy(folder=folder, files=files, spec=spec, notes=notes)
    check_files(exported, observations[:17], reference[:17])
    return exported


def export_reference(
    ref: str,
    folder: Path,
    *,
    store: str | None = None,
    population: str | None = None,
    env_id: str | None = None,
    trust: bool = False,
) -> ExportedPolicy:
    """`workbench export-policy`: the policy a RUN|CHECKPOINT reference means (see
    `locate`), trained on `env_id` if given, exported into a new folder; one the
    workbench did not write only with `trust` (`workbench.policy.checkpoint`)."""
    _, checkpoint = locate_checkpoint(
        ref, store=store, population=population, env_id=env_id, trust=trust
    )
    return export_policy(checkpoint, folder)


def _output_description(to_env: str) -> str:
    if to_env == "unsquash":
        return "the distribution's mean mapped from [-1, 1] to the action bounds and clipped"
    if to_env == "clip":
        return "the distribution's mean clipped to the action bounds"
    return "the most likely action (argmax) or the distribution's mean"


def load_exported(path: Path) -> Any:
    """A file `export_policy` wrote, loaded with plain torch (callable: obs -> actions)."""
    if path.suffix == ".pt2":
        return torch.export.load(str(path)).module()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.jit")
        return torch.jit.load(str(path))  # type: ignore[no-untyped-call]


def check_files(exported: ExportedPolicy, observations: torch.Tensor, reference: Any) -> None:
    """Loads each torch file back and compares its actions with the live policy's
    (on a batch size other than the one it was traced with)."""
    for kind, path in exported.files.items():
        if path.suffix == ".onnx":
            continue  # checking it needs onnxruntime, which the workbench does not require
        with torch.no_grad():
            actions = load_exported(path)(observations)
        difference = float((actions.double() - reference.double()).abs().max())
        if actions.shape != reference.shape or difference > 1e-5:
            raise RuntimeError(
                f"{path}: the exported policy disagrees with the RLlib module "
                f"(shape {tuple(actions.shape)} vs {tuple(reference.shape)}, max difference "
                f"{difference:.3g})"
            )
        exported.max_difference[kind] = difference
