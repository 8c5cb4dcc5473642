"""Whether the env runners can feed the learner: a throughput model from measured rates,
or a short probe of the real algorithm (`workbench plan --probe`)."""

from __future__ import annotations

import copy
import itertools
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

from workbench.experiment.schema import Experiment
from workbench.experiment.search_space import SearchSpace
from workbench.trial import eager_torch
from workbench.trial.config import vectorize_mode

# --- documented rates (rough: they say where sampling cannot keep a learner busy) -----------
# RLlib's own sampling, one SingleAgentEnvRunner on one core of this machine (2 vCPU Xeon
# 2.3 GHz), CartPole, default PPO module, env steps/s by envs per runner (docs/resources.md
# quotes them). The environment is not the limit: RLlib's
# per-step Python bookkeeping and inference calls are, so other sim_ext envs are similar.
SAMPLING_RATES: dict[str, dict[int, float]] = {
    "sync": {1: 1.2e3, 8: 5.1e3, 64: 12.3e3},
    "vector_entry_point": {1: 0.9e3, 8: 6.8e3, 64: 22.2e3},
}


# The workbench's FastEnvRunner on the same core and module (docs/benchmarks/
# sampling-throughput.md, 2 December 2026): sim_ext's native vector envs, and Gymnasium's
# vector class of a Gymnasium env. Only the population forecast uses these: the verdict above
# keeps RLlib's rates as a floor.
FAST_SAMPLING_RATES: dict[str, dict[int, float]] = {
    "sim_ext": {1: 11.9e3, 8: 66.6e3, 64: 157e3},
    "gymnasium": {1: 7.6e3, 8: 46.3e3, 64: 96.4e3},
}


# One PPO learner update on CPU with RLlib's default model (two 256-unit layers each for
# policy and value), measured here: 4096 CartPole samples, one epoch, best of 4 runs:
# 6.8 ms per minibatch of 64, 7.7 of 128, 15.6 of 512, 54 of 2048, which is about
# 5.3 ms per minibatch plus 24 us per sample.
CPU_LEARNER_S_PER_MINIBATCH = 5.3e-3


CPU_LEARNER_S_PER_SAMPLE = 24e-6


# RLlib's PPO learner on one GPU, measured by `workbench plan --probe` on H200 nodes (16-core
# Xeon hosts) on 4 December 2026, docs/resources.md: about 16 ms per minibatch plus 11 us
# (64x64 MLP) to 18 us (1024x1024) per sample and epoch on the fastest of three machines;
# the other two took 1.7-2.1 times as long. Per-minibatch overhead, not arithmetic: the
# model's width hardly moves it, and one CPU core beat it on the 64x64 model.
GPU_LEARNER_S_PER_MINIBATCH = 16e-3


GPU_LEARNER_S_PER_SAMPLE = 18e-6


# The widest hidden layer at which RLlib's PPO learner on a GPU measured slower than the
# lean learner on one CPU thread (docs/benchmarks/learner-overhead.md, an H200 node: 64x64
# slower, 1024x1024 faster; widths between not measured).
GPU_SLOWER_UP_TO_WIDTH = 64


def small_model_on_gpu(exp: Experiment, config: AlgorithmConfig) -> str | None:
    """A note where a PPO trial's GPU learner trains a model so small that one CPU core was
    measured faster; None otherwise."""
    res = exp.resources
    model = config.model_config
    if res.gpus_per_learner <= 0 or exp.algorithm != "PPO" or model.get("conv_filters"):
        return None
    hidden = list(model.get("fcnet_hiddens") or [256, 256])  # RLlib's default when unset
    if max(hidden) > GPU_SLOWER_UP_TO_WIDTH:
        return None
    shape = "x".join(str(h) for h in hidden)
    return (
        f"resources.gpus_per_learner {res.gpus_per_learner:g}: on a {shape} model a GPU "
        "learner was measured slower than one CPU core (RLlib's on an H200 node 12.7-12.9 ms "
        "a minibatch, the lean learner on one CPU thread 2.8-4.6 ms; "
        "docs/benchmarks/learner-overhead.md); resources.num_learners 0 with "
        "gpus_per_learner 0 trains in the trial's own process"
    )


@dataclass
class Throughput:
    """Env steps per second the runners produce against what the learners consume."""

    runners: int  # 0: the main process samples
    per_runner: float
    learner_low: float | None  # over the searched range; None: not estimated
    learner_high: float | None
    measured: bool  # False: from the documented rates above
    detail: list[str] = field(default_factory=list)
    # The documented rates are RLlib's own runner's; another (faster) runner makes the
    # estimate a floor.
    sampling_floor: bool = False
    # For the population forecast: env steps/s of one runner on a whole core (the fast
    # runner's own rate where documented), and one learner epoch's cost in seconds per
    # sample and per minibatch (None: not a minibatch learner, or not known).
    per_core: float = 0.0
    learner_costs: tuple[float, float] | None = None
    # One learner update's cost beyond its epochs, in seconds per sample of the batch: the
    # learner connectors (advantages, value targets) run once a train(), however many
    # epochs follow (0: not measured apart; the documented rates hold it in their epoch).
    learner_call_s_per_sample: float = 0.0
    # CPU seconds of a fresh trial process's start alone, measured by the probe
    # (workbench/plan/start_probe.py; None: not measured).
    start_cpu_s: float | None = None
    # Measured by the same probe: (the trial processes a core it trained among, a train()'s
    # CPU there over its CPU alone; None: not measured), and the short evaluations a trial
    # runs inside its train(), CPU s a train() alone (0: none, or not measured).
    crowd: tuple[float, float] | None = None
    evaluation_s: float = 0.0

    @property
    def sampling(self) -> float:
        return max(self.runners, 1) * self.per_runner

    @property
    def ratio(self) -> tuple[float, float] | None:
        """Sampling rate / learner rate, (low, high); below 1 the learner waits."""
        if self.learner_low is None or self.learner_high is None:
            return None
        return self.sampling / self.learner_high, self.sampling / self.learner_low


def _throughput_lines(rate: Throughput) -> list[str]:
    how = "measured by --probe on this machine" if rate.measured else "estimate, not measured"
    out = [f"Sampling vs learning ({how}):"]
    if rate.runners:
        each = f"{rate.runners} runners x ~{_rate(rate.per_runner)}"
        out.append(f"  sampling: {each} = ~{_rate(rate.sampling)}")
    else:
        out.append(f"  sampling: in the trial's main process, ~{_rate(rate.sampling)}")
    out += [f"  {d}" for d in rate.detail]
    ratio = rate.ratio
    if ratio is None or rate.learner_low is None or rate.learner_high is None:
        return out
    low, high = ratio
    span = _rate(rate.learner_low)
    if rate.learner_high != rate.learner_low:
        span += f" to ~{_rate(rate.learner_high)}"
    out.append(f"  learner: ~{span}")
    shown = f"{low:.2g}" if math.isclose(low, high, rel_tol=0.05) else f"{low:.2g}-{high:.2g}"
    if high < 1 and rate.sampling_floor:
        verdict = (
            "sampling may not keep the learner busy (the sampling figure is a floor: "
            "`workbench plan --probe` measures it)"
        )
    elif high < 1:
        verdict = (
            f"sampling cannot keep the learner busy: it waits for samples (busy about "
            f"{100 * high / (1 + high):.0f}% of an iteration at best); add env runners or "
            "envs per runner"
        )
    elif low < 1:
        verdict = "sampling keeps the learner busy over part of the searched range only"
    else:
        verdict = "sampling keeps up; the learner is the slower half"
    out.append(f"  ratio sampling/learner: {shown}: {verdict}")
    return out


def _rate(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.3g}M env steps/s"
    if value >= 1e3:
        return f"{value / 1e3:.3g}k env steps/s"
    return f"{value:.3g} env steps/s"


def _searched_range(space: SearchSpace, name: str, base: float) -> tuple[float, float]:
    """The range a hyperparameter takes over the search (its fixed value if not searched)."""
    spec = space.get(name)
    if spec is None:
        return base, base
    if spec.bounds is not None:
        return spec.bounds
    values = [v for v in (spec.choice or spec.grid or []) if isinstance(v, int | float)]
    return (min(values), max(values)) if values else (base, base)


def _per_runner_rate(envs: int, mode: str) -> float:
    """Documented env steps/s of RLlib's runner (log-log interpolation; flat past the table)."""
    return _interpolate(
        SAMPLING_RATES["vector_entry_point" if mode == "vector_entry_point" else "sync"], envs
    )


def _fast_runner_rate(envs: int, env_id: str) -> float:
    """Documented env steps/s of the fast runner on a whole core."""
    native = env_id.startswith("sim_ext/")
    return _interpolate(FAST_SAMPLING_RATES["sim_ext" if native else "gymnasium"], envs)


def _interpolate(table: dict[int, float], envs: int) -> float:
    points = sorted(table.items())
    if envs <= points[0][0]:
        return points[0][1]
    for (n0, r0), (n1, r1) in itertools.pairwise(points):
        if envs <= n1:
            t = math.log(envs / n0) / math.log(n1 / n0)
            return math.exp(math.log(r0) + t * math.log(r1 / r0))
    return points[-1][1]


def _learner_model(
    algorithm: str, space: SearchSpace, config: Any
) -> tuple[tuple[float, float], tuple[float, float], tuple[float, float], int] | None:
    """(epochs range, minibatch range, batch range, learners) of an on-policy learner,
    None for a replaying one (DQN, SAC: training_intensity sets its pace)."""
    if algorithm not in ("PPO", "APPO", "IMPALA"):
        return None
    batch = _searched_range(
        space, "train_batch_size_per_learner", float(config.train_batch_size_per_learner)
    )
    epochs = _searched_range(space, "num_epochs", float(getattr(config, "num_epochs", 1)))
    minibatch_base = getattr(config, "minibatch_size", None) or batch[1]
    minibatch = _searched_range(space, "minibatch_size", float(minibatch_base))
    minibatch = (min(minibatch[0], batch[1]), min(minibatch[1], batch[1]))
    return epochs, minibatch, batch, max(int(config.num_learners), 1)


def estimate_throughput(exp: Experiment, space: SearchSpace, config: AlgorithmConfig) -> Throughput:
    """From the documented rates above (rough; say so wherever it is shown)."""
    res = exp.resources
    mode = vectorize_mode(exp)
    runners = res.env_runners.count
    cpus = res.env_runners.cpus_each if runners else res.cpus_main
    per_runner = _per_runner_rate(res.env_runners.envs_per_runner, mode) * min(cpus, 1.0)
    detail = [
        f"per runner: {res.env_runners.envs_per_runner} envs, {mode}, "
        f"{min(cpus, 1.0):g} of a core (RLlib's SingleAgentEnvRunner measured on CartPole here)"
    ]
    runner = getattr(getattr(config, "env_runner_cls", None), "__name__", "SingleAgentEnvRunner")
    floor = runner != "SingleAgentEnvRunner"
    if floor:
        detail.append(
            f"per runner: this experiment samples with {runner}, faster than "
            "that: the sampling figure is a floor (--probe measures it)"
        )
    model = _learner_model(exp.algorithm, space, config)
    envs = res.env_runners.envs_per_runner
    fast = runner == "FastEnvRunner" and mode == "vector_entry_point"
    per_core = _fast_runner_rate(envs, exp.env.id) if fast else _per_runner_rate(envs, mode)
    costs = None
    low = high = None
    if model is None:
        detail.append(
            f"learner: not estimated ({exp.algorithm} replays samples: "
            "training_intensity sets how much it learns per sampled step)"
        )
    else:
        (e_low, e_high), (m_low, m_high), _, learners = model
        gpu = res.gpus_per_learner > 0
        if gpu:
            per_sample, per_minibatch = GPU_LEARNER_S_PER_SAMPLE, GPU_LEARNER_S_PER_MINIBATCH
            source = (
                "RLlib's learner on an H200 node: the fastest of three measured, the others "
                "took up to 2.1x as long; one CPU core was faster on a 64x64 MLP"
            )
        else:
            per_sample, per_minibatch = CPU_LEARNER_S_PER_SAMPLE, CPU_LEARNER_S_PER_MINIBATCH
            source = "RLlib's default model, measured here"
        costs = (per_sample, per_minibatch)

        def rate(epochs: float, minibatch: float) -> float:
            return learners / (epochs * (per_sample + per_minibatch / minibatch))

        low, high = rate(e_high, m_low), rate(e_low, m_high)
        detail.append(
            f"learner: {learners} on {'GPU' if gpu else 'CPU'}, num_epochs "
            f"{_span(e_low, e_high)}, minibatch_size {_span(m_low, m_high)}; about "
            f"{per_minibatch * 1e3:g} ms per minibatch + {per_sample * 1e6:g} us per sample "
            f"per epoch ({source})"
        )
    return Throughput(
        runners,
        per_runner,
        low,
        high,
        measured=False,
        detail=detail,
        sampling_floor=floor,
        per_core=per_core,
        learner_costs=costs,
    )


def _span(low: float, high: float) -> str:
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def probe_throughput(
    exp: Experiment, space: SearchSpace, config: AlgorithmConfig, seconds: float = 2.0
) -> Throughput:
    """Measures here: one env runner's sampling and one learner update of this experiment
    (its env, envs per runner, vectorize mode, model and batch; a GPU learner if this
    machine has CUDA, else CPU), built locally in this process for a few seconds."""

    res = exp.resources
    gpu = res.gpus_per_learner > 0 and torch.cuda.is_available()
    runner_threads, learner_threads = _trial_threads(config)
    threads_before = torch.get_num_threads()
    config = (
        config.copy(copy_frozen=False)
        .env_runners(num_env_runners=0)
        .learners(num_learners=0, num_gpus_per_learner=1 if gpu else 0)
    )
    model = _learner_model(exp.algorithm, space, config)
    eager_torch.install()  # as in a trial: RLlib's seeding does not import torch's compiler
    algo: Any = config.build_algo()
    try:
        torch.set_num_threads(runner_threads)
        runner = algo.env_runner
        runner.sample(num_timesteps=256)  # warm-up: the first calls allocate buffers
        steps, start = 0, time.perf_counter()
        episodes: list[Any] = []
        while time.perf_counter() - start < seconds / 2:
            batch = runner.sample(num_timesteps=512)
            episodes += batch
            steps += sum(len(e) for e in batch)
        per_runner = steps / (time.perf_counter() - start)
        detail = [
            f"per runner: {res.env_runners.envs_per_runner} envs, "
            f"{vectorize_mode(exp)}, "
            f"{runner_threads} torch thread{_s(runner_threads)} on this machine"
        ]
        low = high = None
        costs = None
        call_per_sample = 0.0
        if model is None:
            detail.append(f"learner: not measured ({exp.algorithm} replays)")
        else:
            (e_low, e_high), (m_low, m_high), (_, batch_high), learners = model
            # The learner's batch as a trial's: episodes up to the largest searched batch.
            episodes, steps = _batch_of(episodes, int(batch_high))
            minibatch = int(min(max((m_low + m_high) / 2, 1), steps))
            update_s = _UpdateTimer(algo.learner_group.update, episodes, steps)
            torch.set_num_threads(learner_threads)
            trained = update_s.trained(minibatch)  # warm-up, and the batch its epochs go over
            call_s, epoch_s = _call_part(minibatch, update_s)
            per_sample_epoch = epoch_s / trained
            sizes = [int(min(max(m, 1), trained)) for m in (m_low, m_high)]
            costs = _two_point(
                trained,
                sizes[0],
                sizes[1],
                lambda size: max(update_s(size, PROBE_EPOCHS) - call_s, 0.0) / PROBE_EPOCHS,
            )
            call_per_sample = call_s / steps
            low = learners / (call_per_sample + e_high * per_sample_epoch)
            high = learners / (call_per_sample + e_low * per_sample_epoch)
            device = "GPU" if gpu else f"CPU, {learner_threads} torch thread{_s(learner_threads)}"
            detail.append(
                f"learner: one epoch over {trained} samples in minibatches of {minibatch} on "
                f"{device}: {per_sample_epoch * 1e6:.3g} us per sample; x {learners} learners, "
                f"num_epochs {_span(e_low, e_high)}"
            )
            detail.append(
                f"learner: about {costs[1] * 1e3:.3g} ms per minibatch + "
                f"{costs[0] * 1e6:.3g} us per sample per epoch (from minibatches of "
                f"{_span(sizes[0], sizes[1])}), and {call_s * 1e3:.3g} ms a train() before "
                "its epochs (the learner connectors over the batch)"
            )
            if res.gpus_per_learner > 0 and not gpu:
                detail.append("learner: this machine has no CUDA, so the CPU was measured")
        return Throughput(
            res.env_runners.count,
            per_runner,
            low,
            high,
            True,
            detail,
            per_core=per_runner,
            learner_costs=costs,
            learner_call_s_per_sample=call_per_sample,
        )
    finally:
        algo.stop()
        torch.set_num_threads(threads_before)


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _trial_threads(config: AlgorithmConfig) -> tuple[int, int]:
    """torch threads of (an env runner, the process a learner trains in) in a trial, as
    the probe must measure them: the workbench's setting where its defaults fix one, else
    Ray's rule for an actor (OMP_NUM_THREADS: its whole CPUs, at least one) applied to the
    bundles RLlib books (`ray.rllib.algorithms.utils._get_main_process_bundle`)."""

    fixed = getattr(config.callbacks_class, "torch_threads", None)
    if fixed is not None:
        return fixed, fixed
    booked = config.num_cpus_per_learner
    per_learner = (
        float(0 if config.num_gpus_per_learner else 1) if booked == "auto" else float(booked)
    )
    main = float(config.num_cpus_for_main_process)
    learner = max(per_learner, main) if config.num_learners == 0 else per_learner
    runner = config.num_cpus_per_env_runner if config.num_env_runners else main
    return max(math.floor(runner), 1), max(math.floor(learner), 1)


def _batch_of(episodes: list[Any], size: int) -> tuple[list[Any], int]:
    """The first episodes that hold ``size`` steps (all of them if they hold fewer)."""
    taken, steps = [], 0
    for episode in episodes:
        if steps >= size:
            break
        taken.append(episode)
        steps += len(episode)
    return taken, steps


class _UpdateTimer:
    """Seconds of a learner update of these episodes: the mean of five, each on its own
    copy. A shared core's speed moves by half for seconds at a time, and a trial's cost is
    its mean over both speeds, so a median of a few would pick one of them. The learner's
    connectors change the episodes they are given (PPO's add each episode one step, to
    bootstrap its value from), so updates on one list would each time a larger batch than
    the last."""

    def __init__(self, update: Any, episodes: list[Any], steps: int) -> None:
        self._update = update
        self._episodes = episodes
        self._timesteps = {NUM_ENV_STEPS_SAMPLED_LIFETIME: steps}

    def _once(self, size: int, epochs: int) -> tuple[float, list[Any]]:
        batch = copy.deepcopy(self._episodes)
        start = time.perf_counter()
        self._update(
            episodes=batch, minibatch_size=size, num_epochs=epochs, timesteps=self._timesteps
        )
        return time.perf_counter() - start, batch

    def __call__(self, size: int, epochs: int = 1) -> float:
        return statistics.fmean(self._once(size, epochs)[0] for _ in range(5))

    def trained(self, size: int) -> int:
        """One update (a warm-up), and the samples its epochs went over."""
        _, batch = self._once(size, 1)
        return sum(len(e) for e in batch)


# Epochs of the longer update the probe times: an epoch of a small model is a few tens of
# ms on a shared core, so the difference of one and three epochs left the split of an
# update into its call and its epochs to the noise (2:1 between probes of one experiment).
PROBE_EPOCHS = 8


def _call_part(size: int, update_s: Any) -> tuple[float, float]:
    """Seconds of one learner update beyond its epochs (the learner connectors, once a
    call) and of one epoch, from updates of one and of ``PROBE_EPOCHS`` epochs in
    minibatches of ``size``: an update of one epoch alone would count the connectors once
    an epoch."""
    one, many = update_s(size, 1), update_s(size, PROBE_EPOCHS)
    epoch = max((many - one) / (PROBE_EPOCHS - 1), 0.0)
    call = max(one - epoch, 0.0)
    return call, one - call


def _two_point(steps: int, small: int, large: int, epoch_s: Any) -> tuple[float, float]:
    """(s per sample, s per minibatch) of one learner epoch over ``steps`` samples, from
    epochs in minibatches of ``small`` and of ``large``."""
    n_small, n_large = math.ceil(steps / small), math.ceil(steps / large)
    t_small, t_large = epoch_s(small), epoch_s(large)
    if n_small == n_large:
        return t_small / steps, 0.0
    per_minibatch = max((t_small - t_large) / (n_small - n_large), 0.0)
    per_sample = max((t_large - per_minibatch * n_large) / steps, 0.0)
    return per_sample, per_minibatch
