"""An RLlib env runner for native vector environments: the same episodes, several times faster.

RLlib's ``SingleAgentEnvRunner`` does per-env Python work at every step: it runs the
env-to-module and module-to-env connector pipelines, unbatches actions and model
outputs into per-env items and appends them one by one to per-env episode objects.
On a C++ vector env that bookkeeping, not the environment, bounds sampling (~45 us
per env step; docs/benchmarks/sampling-throughput.md). ``FastEnvRunner`` keeps RLlib's
module, weights, state, metrics and checkpoints, and replaces only the inner loop of
``sample()``:

* the rollout lives in preallocated arrays for all N envs (observations, actions,
  rewards, terminated/truncated flags and the module's extra outputs);
* one batched forward pass per step on the whole batch, then the default connectors'
  work done on the batch (sample from the action distribution, its log-prob, the
  action unsquashing/clipping for Box spaces), and one ``env.step``;
* at the end of ``sample()`` the arrays become the same ``SingleAgentEpisode``
  chunks RLlib's runner returns (episodes continuing across calls keep their id and
  lookback buffer), in bulk: a few list extends per episode instead of per-step
  appends.

It applies to single-agent, non-recurrent modules with RLlib's default connector
pipelines, a Box observation space, Discrete or Box actions, NEXT_STEP autoreset
vector envs, and callbacks without per-step episode hooks; it samples for PPO, APPO
and IMPALA (algorithms whose modules output action distribution inputs). For
anything else it says so once and falls back to RLlib's own loop, never producing
different data.
"""

# RLlib types the runner's env, module and episodes as Optional (they are set after
# construction); once sampling they are always there, so these checks only add noise.
# mypy: disable-error-code="union-attr,arg-type,no-untyped-call,assignment,no-any-return"
from __future__ import annotations

import gc
import logging
import math
import time
import uuid
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.env.single_agent_episode import _REWARDS_BOX_SPACE, SingleAgentEpisode
from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer
from ray.rllib.utils.metrics import (
    ENV_STEP_TIMER,
    RLMODULE_INFERENCE_TIMER,
    WEIGHTS_SEQ_NO,
)
from ray.rllib.utils.spaces.space_utils import get_base_struct_from_space

from workbench.experiment.algorithms import FAST_RUNNER_ALGORITHMS
from workbench.trial import eager_torch
from workbench.trial.notices import notice_once
from workbench.trial.observation_filter import BatchFilter, find_filter, mean_std_filter

logger = logging.getLogger(__name__)

SUPPORTED_ALGORITHMS = FAST_RUNNER_ALGORITHMS
_REWARDS, _TERMINATED, _TRUNCATED = "__rewards", "__terminated", "__truncated"
_OWN = (Columns.ACTIONS, _REWARDS, _TERMINATED, _TRUNCATED)
_EPISODE_HOOKS = ("on_episode_created", "on_episode_start", "on_episode_step", "on_episode_end")


def unsupported_reason(runner: SingleAgentEnvRunner) -> str | None:
    """Why the fast loop cannot sample for this runner (None: it can)."""
    config = runner.config
    algo = getattr(config, "algo_class", None)
    name = getattr(algo, "__name__", "")
    if name not in SUPPORTED_ALGORITHMS:
        return f"the fast env runner samples for {', '.join(SUPPORTED_ALGORITHMS)}, not {name}"
    if config.is_multi_agent:
        return "multi-agent setups use RLlib's env runner"
    env = runner.env
    if env is None:
        return None  # a runner without env never samples
    if not isinstance(env.unwrapped, gym.vector.VectorEnv):
        return "the env is not a gymnasium VectorEnv"
    mode = env.metadata.get("autoreset_mode")
    if mode != gym.vector.AutoresetMode.NEXT_STEP:
        return f"the vector env's autoreset mode is {mode}, not NEXT_STEP"
    if not isinstance(env.single_observation_space, gym.spaces.Box):
        return "the observation space is not a Box"
    if not isinstance(env.single_action_space, (gym.spaces.Discrete, gym.spaces.Box)):
        return "the action space is neither Discrete nor Box"
    if config._module_to_env_connector is not None or config._env_to_module_connector not in (
        None,
        mean_std_filter,  # env.normalize_observations: applied on the batch (BatchFilter)
    ):
        return "custom connectors are configured"
    if not (
        config.add_default_connectors_to_env_to_module_pipeline
        and config.add_default_connectors_to_module_to_env_pipeline
    ):
        return "the default connector pipelines are switched off"
    module = runner.module
    if module is None:
        return None
    if module.is_stateful():
        return "the RLModule is recurrent (stateful)"
    if not runner.episodes_to_numpy:
        return "config.episodes_to_numpy is off"
    for callback in runner._callbacks:
        for hook in _EPISODE_HOOKS:
            if getattr(type(callback), hook) is not getattr(RLlibCallback, hook):
                return f"a callback implements {hook} (per-step episode work)"
    for hook in _EPISODE_HOOKS:
        if getattr(config, f"callbacks_{hook}", None):
            return f"config.callbacks_{hook} is set"
    return None


class _Rollout:
    """Preallocated arrays for up to ``capacity`` vector steps of ``n`` envs."""

    def __init__(self, capacity: int, n: int, obs_shape: tuple[int, ...], obs_dtype: Any):
        self.capacity = capacity
        self.obs = np.empty((capacity, n, *obs_shape), dtype=obs_dtype)
        self.stepped = np.empty((capacity, n), dtype=np.bool_)
        self.times = np.empty(capacity, dtype=np.float64)
        # Rewards and flags (in the env's dtypes), actions and the module's outputs.
        self.outputs: dict[str, np.ndarray] = {}

    def put_output(self, key: str, k: int, value: Any) -> None:
        array = self.outputs.get(key)
        if array is None or array.shape[1:] != np.shape(value) or array.dtype != value.dtype:
            value = np.asarray(value)
            array = self.outputs[key] = np.empty((self.capacity, *value.shape), value.dtype)
        array[k] = value

    def grown(self) -> _Rollout:
        n = self.obs.shape[1]
        bigger = _Rollout(self.capacity * 2, n, self.obs.shape[2:], self.obs.dtype)
        for name in ("obs", "stepped", "times"):
            getattr(bigger, name)[: self.capacity] = getattr(self, name)
        for key, array in self.outputs.items():
            grown = np.empty((bigger.capacity, *array.shape[1:]), array.dtype)
            grown[: self.capacity] = array
            bigger.outputs[key] = grown
        return bigger


def _buffer(data: Any, lookback: int, space: Any = None, struct: Any = None) -> Any:
    """An InfiniteLookbackBuffer as its constructor makes it, without recomputing the
    space's struct for every buffer of every episode (the bulk of its cost)."""
    buffer = object.__new__(InfiniteLookbackBuffer)
    buffer.data = data
    buffer.lookback = lookback
    buffer.finalized = not isinstance(data, list)
    buffer._space = space
    buffer._space_struct = struct
    return buffer


def _sample_categorical(logits: Any) -> tuple[Any, Any]:
    """TorchCategorical(logits).sample() and .logp(sample), the same operations torch's
    Categorical performs (so the same random draws and values), without building and
    validating a distribution object at every step."""

    normalized = logits - logits.logsumexp(dim=-1, keepdim=True)
    probs = torch.softmax(normalized, dim=-1)
    if probs.dim() == 2:  # (batch, events): the runner's case
        draws = torch.multinomial(probs, 1, True)
        return draws.view(-1), normalized.gather(-1, draws).view(-1)
    flat = probs.reshape(-1, probs.shape[-1])
    actions = torch.multinomial(flat, 1, True).T.reshape(probs.shape[:-1])
    logp = normalized.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    return actions, logp


class _Carry:
    """One env's ongoing episode between two sample() calls: what its next chunk needs
    (RLlib keeps this in a cut episode chunk)."""

    __slots__ = ("extras", "id_", "lb_actions", "lb_obs", "lb_rewards", "obs", "row", "start", "t")

    def __init__(self, obs: np.ndarray, start: float | None, row: int = -1) -> None:
        self.id_ = uuid.uuid4().hex
        self.row = row  # the rollout row of its reset observation, this call (-1: before)
        self.t = 0
        self.obs = obs  # the observation the next step starts from, shape (1, *obs)
        self.lb_obs = obs[:0]  # lookback before it
        self.lb_actions: np.ndarray | None = None
        self.lb_rewards: np.ndarray | None = None
        self.extras: dict[str, np.ndarray] = {}
        self.start = start


class FastEnvRunner(SingleAgentEnvRunner):  # type: ignore[misc]
    """RLlib's single-agent env runner with a batched inner loop (see module docstring)."""

    def __init__(self, *, config: Any, **kwargs: Any) -> None:
        eager_torch.install()  # before RLlib seeds torch (a remote runner's own process)
        super().__init__(config=config, **kwargs)
        self.fallback_reason = unsupported_reason(self)
        if self.fallback_reason is not None:
            notice_once(f"fast env runner off: {self.fallback_reason}; using RLlib's loop")
        self._rollout: _Rollout | None = None
        # Per env: its ongoing episode, or None when that episode ended at the last
        # step (NEXT_STEP autoreset: the env's next step is its reset).
        self._carries: list[_Carry | None] | None = None
        self._obs_now: np.ndarray | None = None
        self._categorical = False
        self._obs_filter: BatchFilter | None = None
        if self.fast and self.env is not None:
            connector = find_filter(self)
            self._obs_filter = BatchFilter(connector) if connector is not None else None
        if self.module is not None:
            self._categorical = self.module.get_exploration_action_dist_cls() is TorchCategorical
        if self.env is not None:
            obs_space = self.env.single_observation_space
            if self._obs_filter is not None:
                obs_space = self._obs_filter.observation_space
            act_space = self.env.single_action_space
            self._spaces = (
                obs_space,
                get_base_struct_from_space(obs_space),
                act_space,
                get_base_struct_from_space(act_space),
                get_base_struct_from_space(_REWARDS_BOX_SPACE),
            )

    @property
    def fast(self) -> bool:
        return self.fallback_reason is None

    def _sample(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> list[SingleAgentEpisode]:
        if not self.fast or num_timesteps is None or random_actions or self.module is None:
            if self._carries is not None:
                # RLlib's loop keeps its own episode objects: start it from a reset.
                self._carries = None
                force_reset = True
            return super()._sample(  # type: ignore[no-any-return]
                num_timesteps=num_timesteps,
                num_episodes=num_episodes,
                explore=explore,
                random_actions=random_actions,
                force_reset=force_reset,
            )
        return self._fast_sample(num_timesteps, explore, force_reset)

    # --- the fast loop -----------------------------------------------------------------
    def _fast_reset(self) -> np.ndarray:
        self._ongoing_episodes_for_metrics.clear()
        self._shared_data = {}
        observations, _infos = self._try_env_reset(
            seed=self._seed if self._needs_initial_reset else None, options=None
        )
        self._needs_initial_reset = False
        # RLlib's episode objects are not kept by this loop.
        self._ongoing_episodes = [None for _ in range(self.num_envs)]
        obs = np.asarray(observations)
        if self._obs_filter is not None:
            obs = self._obs_filter(obs)
        now = time.perf_counter()
        self._carries = [_Carry(obs[i : i + 1].copy(), now) for i in range(self.num_envs)]
        return obs

    def _actions(self, obs: np.ndarray, explore: bool, t: int) -> tuple[Any, dict[str, Any]]:
        """One batched forward pass and GetActions' work on the whole batch."""

        batch = {Columns.OBS: torch.from_numpy(obs).to(self._device)}
        # forward_exploration/forward_inference without their per-call switch to eval
        # mode and back: _fast_sample puts the module in eval mode once per sample.
        with torch.no_grad():
            if explore:
                out = self.module._forward_exploration(batch, t=t)
            else:
                out = self.module._forward_inference(batch)
            if Columns.ACTIONS not in out and explore and self._categorical:
                out[Columns.ACTIONS], logp = _sample_categorical(out[Columns.ACTION_DIST_INPUTS])
                out.setdefault(Columns.ACTION_LOGP, logp)
            elif Columns.ACTIONS not in out:
                dist_cls = (
                    self.module.get_exploration_action_dist_cls()
                    if explore
                    else self.module.get_inference_action_dist_cls()
                )
                dist = dist_cls.from_logits(out[Columns.ACTION_DIST_INPUTS])
                if not explore:
                    dist = dist.to_deterministic()
                out[Columns.ACTIONS] = dist.sample()
                if Columns.ACTION_LOGP not in out:
                    out[Columns.ACTION_LOGP] = dist.logp(out[Columns.ACTIONS])
        numpy_out = {}
        for key, value in out.items():
            numpy_out[key] = (
                value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
            )
        return numpy_out.pop(Columns.ACTIONS), numpy_out

    def _for_env(self, actions: np.ndarray) -> np.ndarray:
        """NormalizeAndClipActions on the batch: what the env receives."""
        space = self.env.single_action_space
        if not isinstance(space, gym.spaces.Box):
            return actions
        if self.config.normalize_actions:
            low, high = space.low, space.high
            unsquashed = low + (actions + 1.0) * (high - low) / 2.0
            return np.clip(unsquashed, low, high).astype(space.dtype, copy=False)
        if self.config.clip_actions:
            return np.clip(actions, space.low, space.high).astype(space.dtype, copy=False)
        return actions

    def _fast_sample(
        self, num_timesteps: int, explore: bool, force_reset: bool
    ) -> list[SingleAgentEpisode]:
        # The loop allocates many small objects (tensors, per-step info dicts) that
        # trigger the cyclic garbage collector, whose full passes walk every object of
        # the process: paused for the duration of the sample, collected right after.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._fast_sample_body(num_timesteps, explore, force_reset)
        finally:
            if enabled:
                gc.enable()

    def _fast_sample_body(
        self, num_timesteps: int, explore: bool, force_reset: bool
    ) -> list[SingleAgentEpisode]:
        n = self.num_envs
        if force_reset or self._needs_initial_reset or self._carries is None:
            obs_now = self._fast_reset()
        else:
            # The env's last observations (for an env whose episode just ended, its
            # terminal one: what RLlib's loop feeds the module for that env too).
            assert self._obs_now is not None
            obs_now = self._obs_now
        assert self._carries is not None
        pending = np.array([c is None for c in self._carries], dtype=np.bool_)
        capacity = max(4, math.ceil(num_timesteps / n) + 4)
        rollout = self._rollout
        if (
            rollout is None
            or rollout.capacity < capacity
            or rollout.obs.shape[1:] != obs_now.shape
            or rollout.obs.dtype != obs_now.dtype
        ):
            rollout = _Rollout(capacity, n, obs_now.shape[1:], obs_now.dtype)
        runners = self.config.num_env_runners or 1
        lifetime = self.num_env_steps_sampled_lifetime // runners
        ts = 0
        k = 0
        t_infer = t_env = 0.0
        was_training = self.module.training
        self.module.eval()
        try:
            while ts < num_timesteps:
                if k == rollout.capacity:
                    rollout = rollout.grown()
                start = time.perf_counter()
                actions, outputs = self._actions(obs_now, explore, (lifetime + ts) * runners)
                middle = time.perf_counter()
                obs_now, rewards, terminated, truncated, _ = self.env.step(self._for_env(actions))
                end = time.perf_counter()
                t_env += end - middle
                t_infer += middle - start
                if self._obs_filter is not None:
                    obs_now = self._obs_filter(obs_now)
                stepped = np.logical_not(pending)
                rollout.obs[k] = obs_now
                rollout.stepped[k] = stepped
                rollout.times[k] = end
                put = rollout.put_output
                put(_REWARDS, k, rewards)
                put(_TERMINATED, k, terminated)
                put(_TRUNCATED, k, truncated)
                put(Columns.ACTIONS, k, actions)
                for key, value in outputs.items():
                    put(key, k, value)
                ts += int(np.count_nonzero(stepped))
                pending = stepped & (terminated | truncated)
                k += 1
        finally:
            if was_training:
                self.module.train()
        self._rollout = rollout
        self._obs_now = obs_now
        if k:
            self.metrics.log_value(RLMODULE_INFERENCE_TIMER, t_infer / k)
            self.metrics.log_value(ENV_STEP_TIMER, t_env / k)
        done, ongoing = self._episodes_from(rollout, k)
        self._done_episodes_for_metrics.extend(done)
        for chunk in ongoing:
            self._ongoing_episodes_for_metrics[chunk.id_].append(chunk)
        if ts > 0:
            self._log_env_steps(metric=self._metrics_num_env_steps_sampled, num_steps=ts)
        self._increase_sampled_metrics(ts, len(done))
        return done + ongoing

    def _chunk(
        self,
        carry: _Carry,
        rollout: _Rollout,
        i: int,
        first: int,
        last: int,
        keys: list[str],
        lookback: int,
    ) -> SingleAgentEpisode:
        """The episode chunk of env ``i`` for steps ``first..last`` (inclusive) of this
        call, continuing ``carry``: the numpy'ized chunk RLlib's loop would return."""
        outputs = rollout.outputs
        obs_space, obs_struct, act_space, act_struct, rew_struct = self._spaces

        steps = last + 1 - first
        seq_no = np.full(steps, self._weights_seq_no)
        if carry.row >= 0:
            # Reset in this call: everything is one slice of the rollout (copied: the
            # rollout's arrays are reused by the next call).
            observations = rollout.obs[carry.row : last + 1, i].copy()
            actions = outputs[Columns.ACTIONS][first : last + 1, i].copy()
            rewards = outputs[_REWARDS][first : last + 1, i].copy()
            extras = {key: outputs[key][first : last + 1, i].copy() for key in keys}
            extras[WEIGHTS_SEQ_NO] = seq_no
            back = 0
        else:

            def joined(previous: np.ndarray | None, new: np.ndarray) -> np.ndarray:
                if previous is None or not len(previous):
                    return new.copy()
                return np.concatenate([previous, new])

            observations = np.concatenate(
                [carry.lb_obs, carry.obs, rollout.obs[first : last + 1, i]]
            )
            actions = joined(carry.lb_actions, outputs[Columns.ACTIONS][first : last + 1, i])
            rewards = joined(carry.lb_rewards, outputs[_REWARDS][first : last + 1, i])
            extras = {
                key: joined(carry.extras.get(key), outputs[key][first : last + 1, i])
                for key in keys
            }
            extras[WEIGHTS_SEQ_NO] = joined(carry.extras.get(WEIGHTS_SEQ_NO), seq_no)
            back = len(carry.lb_obs)
        episode = object.__new__(SingleAgentEpisode)
        episode.id_ = carry.id_
        episode.agent_id = None
        episode.module_id = None
        episode.multi_agent_episode_id = None
        episode.observations = _buffer(observations, back, obs_space, obs_struct)
        episode._observation_space = obs_space
        episode.infos = _buffer([{} for _ in range(len(observations))], back)
        episode.actions = _buffer(actions, back, act_space, act_struct)
        episode._action_space = act_space
        episode.rewards = _buffer(rewards, back, _REWARDS_BOX_SPACE, rew_struct)
        episode.extra_model_outputs = {key: _buffer(v, back) for key, v in extras.items()}
        episode.is_terminated = bool(outputs[_TERMINATED][last, i])
        episode.is_truncated = bool(outputs[_TRUNCATED][last, i])
        episode.t_started = carry.t
        episode.t = carry.t + steps
        episode._custom_data = {}
        episode._start_time = carry.start if carry.start is not None else rollout.times[first]
        episode._last_step_time = float(rollout.times[last])
        episode._last_added_observation = observations[-1]
        episode._last_added_infos = {}
        # What the next chunk of this episode looks back on (as SingleAgentEpisode.cut).
        keep = min(lookback, len(actions))
        carry.t = episode.t
        carry.obs = observations[-1:]
        carry.lb_obs = observations[len(observations) - 1 - keep : len(observations) - 1]
        carry.lb_actions = actions[len(actions) - keep :]
        carry.lb_rewards = rewards[len(rewards) - keep :]
        carry.extras = {key: v[len(v) - keep :] for key, v in extras.items()}
        carry.start = None  # a continuation's clock starts at its first step (as in cut())
        carry.row = -1
        return episode

    def _episodes_from(
        self, rollout: _Rollout, steps: int
    ) -> tuple[list[SingleAgentEpisode], list[SingleAgentEpisode]]:
        """This call's arrays as RLlib's episode chunks: the finished episodes in the
        order RLlib's loop finishes them (step, then env), and the ongoing chunks."""
        assert self._carries is not None
        finished: list[tuple[int, int, SingleAgentEpisode]] = []
        ongoing: list[SingleAgentEpisode] = []
        keys = [key for key in rollout.outputs if key not in _OWN]
        lookback = self.config.episode_lookback_horizon
        ends_all = rollout.stepped[:steps] & (
            rollout.outputs[_TERMINATED][:steps] | rollout.outputs[_TRUNCATED][:steps]
        )
        for i in range(self.num_envs):
            carry = self._carries[i]
            ends = np.flatnonzero(ends_all[:, i]).tolist()
            first = 0
            for end in [*ends, steps - 1]:
                if first > end:
                    break
                if carry is None:
                    # This step is the reset of a new episode (its action was ignored).
                    carry = _Carry(
                        rollout.obs[first, i : i + 1].copy(), rollout.times[first], row=first
                    )
                    first += 1
                    if first > end:
                        break
                chunk = self._chunk(carry, rollout, i, first, end, keys, lookback)
                if chunk.is_done:
                    finished.append((end, i, chunk))
                    carry = None
                else:
                    ongoing.append(chunk)
                first = end + 1
            if carry is not None:
                carry.row = -1  # rows are this call's; the next call starts from carry.obs
            self._carries[i] = carry
        finished.sort(key=lambda item: (item[0], item[1]))
        return [episode for _, _, episode in finished], ongoing
