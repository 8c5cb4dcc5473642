"""Evaluation: a trained policy restored for inference only and rolled out on its env.

No Tune and no Ray cluster: the policy is the RLModule inside an algorithm checkpoint
(``learner_group/learner/rl_module/default_policy``), the settings that matter for
acting (env id, env_config, RLlib's action normalisation) come from the config the
checkpoint's learner group was built with, and the rollout steps a vector env in this
process. By default the policy acts deterministically, as RLlib's env runners do with
``explore=False``: the argmax of a categorical, the mean of a Gaussian.

A policy is found from a checkpoint folder, a trial folder (its newest checkpoint) or
an MLflow trial run (the newest checkpoint in its population's results folder), and
evaluations are logged to the trial's MLflow run as ``eval/*`` metrics.
"""

from __future__ import annotations

import contextlib
import logging
import math
import pickle
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workbench.errors import ExperimentError

POLICY_ID = "default_policy"
MODULE_DIR = Path("learner_group") / "learner" / "rl_module" / POLICY_ID
_CONFIG_FILE = Path("learner_group") / "class_and_ctor_args.pkl"
_CHECKPOINT_NAME = re.compile(r"^checkpoint_(\d+)$")
RESULTS_DIR_TAG = "workbench.results_dir"
# Episodes still running after this many steps mean the env has no time limit.
MAX_EPISODE_STEPS = 100_000

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
    from ray.rllib.core.rl_module.rl_module import RLModule

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


class Policy(torch.nn.Module):
    """An RLModule as a plain torch module: a batch of observations -> the actions the
    env takes, as RLlib's env runner computes them.

    ``forward_inference``; the module's own actions if it gives them (DQN), else its
    inference distribution made deterministic (argmax, mean) or sampled; then what
    RLlib's module-to-env connector does to Box actions (``NormalizeAndClipActions``):
    unsquash from [-1, 1] to the bounds and clip (``normalize_actions``, RLlib's
    default), or only clip (``clip_actions``).
    """

    low: torch.Tensor
    high: torch.Tensor

    def __init__(
        self,
        module: Any,
        action_space: Any,
        *,
        normalize_actions: bool,
        clip_actions: bool,
        deterministic: bool = True,
    ) -> None:
        import gymnasium as gym

        super().__init__()
        self.module = module
        self.dist_class = module.get_inference_action_dist_cls()
        self.deterministic = deterministic
        self.to_env = "none"
        if isinstance(action_space, gym.spaces.Box):
            bounded = bool(np.all(action_space.bounded_below & action_space.bounded_above))
            if normalize_actions:
                if bounded and action_space.dtype in (np.float32, np.float64):
                    self.to_env = "unsquash"
            elif clip_actions:
                self.to_env = "clip"
            self.register_buffer("low", torch.as_tensor(action_space.low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(action_space.high, dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        from ray.rllib.core.columns import Columns

        out = self.module.forward_inference({Columns.OBS: obs})
        if Columns.ACTIONS in out:
            actions: torch.Tensor = out[Columns.ACTIONS]
        else:
            dist = self.dist_class.from_logits(out[Columns.ACTION_DIST_INPUTS])
            actions = dist.to_deterministic().sample() if self.deterministic else dist.sample()
        if self.to_env == "unsquash":
            actions = self.low + (actions + 1.0) * (self.high - self.low) / 2.0
            actions = torch.clamp(actions, self.low, self.high)
        elif self.to_env == "clip":
            actions = torch.clamp(actions, self.low, self.high)
        return actions


def policy_module(
    module: Any, checkpoint: PolicyCheckpoint, *, deterministic: bool = True
) -> Policy:
    """The checkpoint's module as a `Policy`: observations -> the env's actions."""
    return Policy(
        module,
        module.action_space,
        normalize_actions=checkpoint.normalize_actions,
        clip_actions=checkpoint.clip_actions,
        deterministic=deterministic,
    ).eval()


# --- rollouts -----------------------------------------------------------------------


def make_vector_env(env_id: str, num_envs: int, env_config: dict[str, Any]) -> Any:
    """A vector env of `num_envs` copies: sim_ext's C++ batch, Gymnasium's own otherwise."""
    import gymnasium as gym

    import sim_ext  # noqa: F401  (registers the sim_ext ids)

    mode = "vector_entry_point" if env_id.startswith("sim_ext/") else "sync"
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode, **env_config)


@dataclass
class Evaluation:
    """Returns and lengths of `episodes` episodes; episode k started from seed + k."""

    returns: list[float]
    lengths: list[int]
    env_id: str
    env_config: dict[str, Any]
    seed: int
    deterministic: bool
    checkpoint: Path | None = None
    training_iteration: int | None = None
    run_id: str | None = None  # the MLflow run it was logged to
    notes: list[str] = field(default_factory=list)

    def stats(self) -> dict[str, float]:
        returns = np.asarray(self.returns, dtype=np.float64)
        return {
            "return_mean": float(returns.mean()),
            "return_std": float(returns.std()),
            "return_min": float(returns.min()),
            "return_max": float(returns.max()),
            "len_mean": float(np.mean(self.lengths)),
            "episodes": float(len(self.returns)),
        }

    def summary(self) -> str:
        s = self.stats()
        how = "deterministic" if self.deterministic else "stochastic"
        return (
            f"return {s['return_mean']:.1f} ± {s['return_std']:.1f} "
            f"(min {s['return_min']:.1f}, max {s['return_max']:.1f}), "
            f"episode length {s['len_mean']:.1f}, over {len(self.returns)} {how} episodes "
            f"on {self.env_id} (seeds {self.seed}..{self.seed + len(self.returns) - 1})"
        )


def rollout(
    act: Callable[[np.ndarray], np.ndarray],
    env_id: str,
    env_config: dict[str, Any],
    *,
    episodes: int,
    seed: int = 0,
    max_envs: int = 64,
) -> tuple[list[float], list[int]]:
    """Plays `episodes` whole episodes, up to `max_envs` at once; episode k is reset with
    seed ``seed + k``. Returns each episode's return and length, in episode order."""
    returns: list[float] = []
    lengths: list[int] = []
    while len(returns) < episodes:
        n = min(max_envs, episodes - len(returns))
        env = make_vector_env(env_id, n, env_config)
        try:
            obs, _ = env.reset(seed=[seed + len(returns) + i for i in range(n)])
            total = np.zeros(n, dtype=np.float64)
            length = np.zeros(n, dtype=np.int64)
            done = np.zeros(n, dtype=bool)
            for _ in range(MAX_EPISODE_STEPS):
                obs, reward, terminated, truncated, _ = env.step(act(obs))
                # Gymnasium's NEXT_STEP autoreset: a finished env restarts on its next
                # step; those steps belong to no episode of ours.
                running = ~done
                total += np.where(running, reward, 0.0)
                length += running
                done |= np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
                if done.all():
                    break
            else:
                raise ExperimentError.single(
                    env_id,
                    "",
                    f"{int((~done).sum())} episodes still running after {MAX_EPISODE_STEPS} "
                    "steps: the env has no time limit; give one (e.g. --env-config "
                    "max_episode_steps=N)",
                )
        finally:
            env.close()
        returns.extend(float(r) for r in total)
        lengths.extend(int(n_) for n_ in length)
    return returns, lengths


def torch_actor(policy: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., np.ndarray]:
    """numpy observations -> numpy actions through a torch policy (no gradients)."""

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out: np.ndarray = policy(torch.as_tensor(np.asarray(obs, dtype=np.float32))).numpy()
        return out

    return act


def evaluate_checkpoint(
    checkpoint: PolicyCheckpoint,
    *,
    episodes: int = 10,
    deterministic: bool = True,
    seed: int = 0,
    env_config: dict[str, Any] | None = None,
) -> Evaluation:
    """Rolls out the checkpoint's policy on its env (env_config: keys to override)."""
    config = {**checkpoint.env_config, **(env_config or {})}
    # Building the module and sampling (stochastic) draw from torch's global RNG: seeded
    # here, and left as it was. One thread: a small network's batch gains nothing from
    # more, and on a busy machine torch's threads wait on each other (seconds instead of
    # a tenth of one, measured).
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            module = load_module(checkpoint)
            _check_spaces(module, checkpoint, config)
            act = torch_actor(policy_module(module, checkpoint, deterministic=deterministic))
            start = time.monotonic()
            returns, lengths = rollout(act, checkpoint.env_id, config, episodes=episodes, seed=seed)
            elapsed = time.monotonic() - start
    finally:
        torch.set_num_threads(threads)
    result = Evaluation(
        returns=returns,
        lengths=lengths,
        env_id=checkpoint.env_id,
        env_config=config,
        seed=seed,
        deterministic=deterministic,
        checkpoint=checkpoint.path,
        training_iteration=checkpoint.training_iteration,
    )
    result.notes.append(f"{sum(lengths)} env steps in {elapsed:.1f} s")
    return result


def _check_spaces(module: Any, checkpoint: PolicyCheckpoint, env_config: dict[str, Any]) -> None:
    """The env (with these settings) must give and take what the policy was built for."""
    try:
        env = make_vector_env(checkpoint.env_id, 1, env_config)
    except (TypeError, ValueError) as err:
        raise ExperimentError.single(
            str(checkpoint.path), "--env-config", f"{checkpoint.env_id}: {err}"
        ) from None
    try:
        pairs = (
            ("observation", env.single_observation_space, module.observation_space),
            ("action", env.single_action_space, module.action_space),
        )
        for what, env_space, policy_space in pairs:
            if not _same_space(env_space, policy_space):
                raise ExperimentError.single(
                    str(checkpoint.path),
                    "--env-config",
                    f"{checkpoint.env_id} with env_config {env_config} has the {what} space "
                    f"{env_space}, but the policy was trained on {policy_space}; valid: the "
                    f"settings it was trained with ({checkpoint.env_config}) or others that "
                    "keep the spaces",
                )
    finally:
        env.close()


def _same_space(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    shape_a, shape_b = getattr(a, "shape", None), getattr(b, "shape", None)
    if shape_a != shape_b:
        return False
    return bool(getattr(a, "n", None) == getattr(b, "n", None))


# --- finding a policy from what a user types ------------------------------------------


@dataclass
class PolicySource:
    """A checkpoint, and the trial's MLflow run when there is one."""

    checkpoint: Path
    label: str  # how to name it to a person
    uri: str | None = None
    run_id: str | None = None


def locate(ref: str, *, store: str | None = None, population: str | None = None) -> PolicySource:
    """RUN|CHECKPOINT: a checkpoint or trial folder, else an MLflow trial run by id or name."""
    from workbench.inspection import client_for, find_trial
    from workbench.ui import resolve_store

    path = Path(ref).expanduser()
    if path.exists():
        checkpoint = find_checkpoint(path)
        uri, run_id = _run_of_trial_dir(checkpoint.parent, store)
        return PolicySource(checkpoint, str(checkpoint), uri, run_id)
    if "/" in ref or ref.startswith("."):
        raise ExperimentError.single(ref, "", f"no such folder; {_WHAT_IS_VALID}")
    uri = resolve_store(store)
    client = client_for(uri)
    trial = find_trial(client, ref, population, uri)
    parent = client.get_run(trial.tags["mlflow.parentRunId"])
    results_dir = parent.data.tags.get(RESULTS_DIR_TAG, "")
    pop_name = parent.data.tags.get("mlflow.runName", parent.info.run_id)
    label = f"trial {trial.name} (run {trial.run_id}) of population {pop_name}"
    trial_dir = Path(results_dir) / trial.name
    if not results_dir or not Path(results_dir).is_dir():
        raise ExperimentError.single(
            uri,
            "",
            f"{label}: its results folder {results_dir or '(not recorded)'} is gone, and "
            f"its checkpoints with it; {_WHAT_IS_VALID}",
        )
    checkpoints = trial_checkpoints(trial_dir)
    if not checkpoints:
        raise ExperimentError.single(
            uri,
            "",
            f"{label} saved no checkpoint in {trial_dir} (a trial saves one every "
            "checkpoint.frequency iterations and at its end with checkpoint.at_end); "
            f"{_WHAT_IS_VALID}",
        )
    return PolicySource(checkpoints[-1].resolve(), label, uri, trial.run_id)


def _run_of_trial_dir(trial_dir: Path, store: str | None) -> tuple[str | None, str | None]:
    """The MLflow store and run of a workbench trial folder ((None, None) if none)."""
    from workbench.inspection import client_for
    from workbench.ui import resolve_store

    results_dir = trial_dir.parent
    uri = resolve_store(store) if store is not None else _store_of_results(results_dir)
    if uri is None:
        return None, None
    client = client_for(uri)
    try:
        parents = client.search_runs(
            [e.experiment_id for e in client.search_experiments()],
            filter_string=f"tags.`{RESULTS_DIR_TAG}` = '{results_dir}'",
            order_by=["start_time DESC"],
            max_results=1,
        )
        if not parents:
            return uri, None
        parent = parents[0]
        children = client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}' "
            f"and tags.`mlflow.runName` = '{trial_dir.name}'",
            max_results=1,
        )
    except Exception:  # a store that does not answer: evaluate anyway, log nothing
        return uri, None
    return uri, children[0].info.run_id if children else None


def _store_of_results(results_dir: Path) -> str | None:
    """The store a workbench results folder logged to, when it is there to be read."""
    from workbench.results_folder import RESOLVED_FILE
    from workbench.schema import load_experiment
    from workbench.tracking import tracking_uri_for

    file = results_dir / RESOLVED_FILE
    if not file.is_file():
        return None
    try:
        experiment = load_experiment(file)
    except ExperimentError:
        return None
    if not experiment.tracking.enabled:
        return None
    uri = tracking_uri_for(experiment.tracking.uri, results_dir.parent)
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        return None  # MLflow would create an empty store there
    return uri


def log_evaluation(client: Any, run_id: str, result: Evaluation) -> None:
    """eval/* metrics (step: the checkpoint's iteration) and what was evaluated, as tags."""
    from mlflow.entities import Metric, RunTag

    now = int(time.time() * 1000)
    step = result.training_iteration or 0
    metrics = [
        Metric(f"eval/{key}", value, now, step)
        for key, value in result.stats().items()
        if math.isfinite(value)
    ]
    tags = [
        RunTag("workbench.eval.checkpoint", str(result.checkpoint or "")),
        RunTag("workbench.eval.deterministic", str(result.deterministic).lower()),
        RunTag("workbench.eval.seed", str(result.seed)),
        RunTag("workbench.eval.env_config", repr(result.env_config)[:5000]),
    ]
    client.log_batch(run_id, metrics=metrics, tags=tags)
    result.run_id = run_id
