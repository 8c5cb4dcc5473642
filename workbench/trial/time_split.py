"""Where the time goes: each iteration of a trial split into sampling, learning, weight
sync and the rest, and what that says about the bottleneck.

Everything here is a pure function of flattened RLlib results (``"timers/..."`` keys) or
of the ``workbench/*`` metrics they become; `workbench.trial.callbacks` computes one
`TimeSplit` per ``train()`` on the trial's actor and adds it to the result, and
``workbench diagnose`` reads the same figures back from MLflow.

**RLlib's timers are exponential moving averages.** ``timers/env_runner_sampling_timer``,
``timers/learner_update_timer`` and ``timers/synch_weights`` are EMAs with coefficient
0.01 over every call since the trial (or its checkpoint) started: after a slow first
iteration they stay high for about a hundred iterations, so an EMA divided by
``time_this_iter_s`` can exceed 1. The EMA recursion ``E_n = 0.99 E_{n-1} + 0.01 x_n``
is inverted instead: ``x_n = (E_n - 0.99 E_{n-1}) / 0.01``, this iteration's own seconds,
exact when the timer ran once in the iteration (PPO: one ``training_step`` per
iteration), a mean weighted within 0.99^k of uniform when it ran k times with different
durations. ``E_{n-1}`` is the previous result's value, or the value the checkpoint
restored (a PBT clone), or none (a fresh trial: the first call sets the EMA).

**Asynchronous algorithms** (APPO, IMPALA) sample and learn at the same time: the main
process's ``timers/sample`` only collects what runners finished, and the learner works in
its own thread. For them the verdict rests on how busy the learner is: at least the share
of the iteration the main process spent blocked in ``learner_update_timer`` handing it a
batch (its queue is bounded: a local learner that is still busy makes the caller wait), and
at least its thread's ``learner_thread_update_timer`` against
``learner_thread_in_queue_wait_timer`` (both RLlib EMAs, lagging as above); and on env
steps dropped because remote learners were full. The diagnosis reports their policy lag:
``learners/<module>/diff_num_grad_updates_vs_sampler_policy``, the learner's weights
version (``learners/<module>/weights_seq_no``) minus the version each sample was stamped
with by its env runner (``weights_seq_no``), averaged over the iteration's last batch.
(The top-level ``env_runners/weights_seq_no`` is a mean over runners and samples reduced
differently from the learner's, so their difference is not a lag: it goes negative.)"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from workbench.trial.candidates import CANDIDATE_TIME_METRIC

EMA_COEFF = 0.01  # RLlib's default for log_time (MetricsLogger, EmaStats)


PREFIX = "workbench"  # the result key the breakdown goes under (MLflow: workbench/*)


ITERATION = "time_this_iter_s"
EVALUATION_TIME = CANDIDATE_TIME_METRIC


CALLS = "num_training_step_calls_per_iteration"


SAMPLING_TIMER = "timers/env_runner_sampling_timer"  # synchronous algorithms (PPO, DQN, ...)


ASYNC_SAMPLE_TIMER = "timers/sample"  # APPO/IMPALA: collecting what runners finished


LEARNER_TIMER = "timers/learner_update_timer"


SYNC_TIMER = "timers/synch_weights"


SYNC_COUNT = "num_weight_broadcasts"  # APPO/IMPALA: weight broadcasts this iteration


SAMPLED_ITER = "env_runners/num_env_steps_sampled"


SAMPLED = "env_runners/num_env_steps_sampled_lifetime"


TRAINED = "learners/__all_modules__/num_env_steps_trained_lifetime"


DROPPED = "learner_group/learner_group_ts_dropped_lifetime"


THREAD_UPDATE = "learners/__all_modules__/learner_thread_update_timer"


THREAD_WAIT = "learners/__all_modules__/learner_thread_in_queue_wait_timer"


LAG_SUFFIX = "/diff_num_grad_updates_vs_sampler_policy"


# What the hook remembers between results (and reads from a restored checkpoint).
TIMERS = (SAMPLING_TIMER, ASYNC_SAMPLE_TIMER, LEARNER_TIMER, SYNC_TIMER)


COUNTERS = (SAMPLED, TRAINED, DROPPED)


TRACKED = TIMERS + COUNTERS


# Verdict thresholds (shares of an iteration's wall time).
BOUND = 0.5  # sampling or learning takes at least half of a synchronous iteration


SYNC_BOUND = 0.25  # weight sync is pure overhead: a quarter is already the thing to fix


LEARNER_BUSY = 0.9  # async: the learner works at least this share of the time: it is the limit


LEARNER_IDLE = 0.5  # async: the learner waits at least half the time: sampling is the limit


REST_NOTE = 0.5  # more than this outside the three timers: said in the evidence


VERDICTS = ("unknown", "balanced", "sampling-bound", "learner-bound", "sync-bound")


def _number(value: Any) -> float:
    """A result value as a float (NaN when missing or not a number)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return math.nan
    return float(value)


def _finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 and _finite(a) and _finite(b) else math.nan


@dataclass(frozen=True)
class TrialFacts:
    """What the breakdown needs from the trial's config."""

    asynchronous: bool  # APPO/IMPALA: sampling and learning overlap
    env_runners: int  # remote env runners (0: the main process samples)

    @property
    def samplers(self) -> int:
        """Processes that sample: the remote runners, or the main process."""
        return max(self.env_runners, 1)


def facts_from_config(config: Any) -> TrialFacts:
    """TrialFacts from an RLlib AlgorithmConfig (duck-typed: no RLlib import here)."""
    from_names = {c.__name__ for c in type(config).__mro__}
    return TrialFacts(
        asynchronous="IMPALAConfig" in from_names,
        env_runners=int(getattr(config, "num_env_runners", 0) or 0),
    )


def snapshot(flat: Mapping[str, Any]) -> dict[str, float]:
    """The tracked timers (EMAs) and lifetime counters of a flattened result."""
    out = {}
    for key in TRACKED:
        value = _number(flat.get(key))
        if _finite(value):
            out[key] = value
    return out


def recover_timer(
    ema_now: float, ema_before: float, calls: int, coeff: float = EMA_COEFF
) -> tuple[float, bool]:
    """Seconds spent in a timer during one iteration, from its EMA before and after.

    ``calls``: how often the timer ran in the iteration (RLlib's
    ``num_training_step_calls_per_iteration``). Returns (seconds, exact): exact when the
    timer ran once, or when it ran several times with equal durations. ``ema_before``
    NaN: the EMA had no value yet (the first call sets it), so each call took ``ema_now``.
    """
    if not _finite(ema_now) or calls < 1:
        return 0.0, True
    if not _finite(ema_before):
        return calls * max(ema_now, 0.0), calls == 1
    kept = (1.0 - coeff) ** calls  # the weight E_{n-1} keeps after `calls` pushes
    per_call = (ema_now - kept * ema_before) / (1.0 - kept)
    return calls * max(per_call, 0.0), calls == 1


def policy_lag(flat: Mapping[str, Any]) -> float:
    """Gradient updates between the weights that sampled a batch and the learner's when it
    trained on it: the largest over the modules (NaN when RLlib reports none)."""
    lag = math.nan
    for key, value in flat.items():
        if key.startswith("learners/") and key.endswith(LAG_SUFFIX):
            number = _number(value)
            if _finite(number):
                lag = number if math.isnan(lag) else max(lag, number)
    return lag


@dataclass
class TimeSplit:
    """Summable figures of one iteration or of many (a trial, a population), and what
    follows from them. Seconds are wall-clock seconds of the trial's main process."""

    asynchronous: bool = False
    env_runners: int = 0  # remote runners (0: the main process samples)
    iterations: int = 0
    exact_iterations: int = 0  # iterations whose timers were recovered exactly
    iteration_s: float = 0.0  # time_this_iter_s, less evaluation_s
    # A member's short evaluation in the iteration (workbench.trial.candidates): not
    # training, so not part of the shares.
    evaluation_s: float = 0.0
    sampling_s: float = 0.0
    learner_s: float = 0.0  # the learner update call (async: only handing data over)
    sync_s: float = 0.0  # weights to the env runners
    runner_s: float = 0.0  # sampling seconds summed over the processes that sample
    learner_busy_s: float = 0.0  # seconds the learner computed (async: its thread)
    env_steps_sampled: float = 0.0
    env_steps_trained: float = 0.0  # sync: the sampled steps the update learned from
    env_steps_dropped: float = 0.0  # async: steps the learner had no room for
    lag_updates_sum: float = 0.0
    lag_updates_max: float = math.nan
    lag_iterations: int = 0
    busy_known: bool = True  # async: the learner thread's timers were reported

    # --- combining -------------------------------------------------------------------------
    def __add__(self, other: TimeSplit) -> TimeSplit:
        if self.iterations == 0:
            return replace(other)
        if other.iterations == 0:
            return replace(self)
        out = replace(self)
        for f in fields(self):
            name = f.name
            if name in ("asynchronous", "env_runners", "busy_known"):
                continue
            if name == "lag_updates_max":
                a, b = self.lag_updates_max, other.lag_updates_max
                out.lag_updates_max = b if math.isnan(a) else a if math.isnan(b) else max(a, b)
            else:
                setattr(out, name, getattr(self, name) + getattr(other, name))
        out.busy_known = self.busy_known and other.busy_known
        return out

    # --- shares of the iteration ---------------------------------------------------------
    @property
    def rest_s(self) -> float:
        return max(0.0, self.iteration_s - self.sampling_s - self.learner_s - self.sync_s)

    def fraction(self, seconds: float) -> float:
        return _ratio(seconds, self.iteration_s)

    @property
    def sampling_fraction(self) -> float:
        return self.fraction(self.sampling_s)

    @property
    def learner_fraction(self) -> float:
        return self.fraction(self.learner_s)

    @property
    def sync_fraction(self) -> float:
        return self.fraction(self.sync_s)

    @property
    def rest_fraction(self) -> float:
        return self.fraction(self.rest_s)

    @property
    def learner_busy_fraction(self) -> float:
        """Share of the wall time the learner computed (sync: its update's share)."""
        return self.fraction(self.learner_busy_s) if self.busy_known else math.nan

    # --- rates ---------------------------------------------------------------------------
    @property
    def samplers(self) -> int:
        return max(self.env_runners, 1)

    @property
    def sampled_per_s(self) -> float:
        """Env steps sampled per second of wall time, all runners together."""
        return _ratio(self.env_steps_sampled, self.iteration_s)

    @property
    def sampled_per_s_per_runner(self) -> float:
        """Env steps one runner samples per second while it samples."""
        return _ratio(self.env_steps_sampled, self.runner_s)

    @property
    def trained_per_s(self) -> float:
        """Env steps the learner takes in per second while it computes."""
        if not self.busy_known:
            return math.nan
        return _ratio(self.env_steps_trained, self.learner_busy_s)

    @property
    def runners_needed(self) -> float:
        """Learner consumption rate / per-runner sampling rate: the runners whose samples
        keep the learner busy (sync: that sample a batch in the time it takes to learn)."""
        return _ratio(self.trained_per_s, self.sampled_per_s_per_runner)

    # --- Amdahl (synchronous algorithms) ----------------------------------------------------
    @property
    def serial_fraction(self) -> float:
        """The share more runners cannot shrink: learning, weight sync and the rest."""
        return 1.0 - self.sampling_fraction if not self.asynchronous else math.nan

    @property
    def amdahl_max_speedup(self) -> float:
        """1 / serial share: the best any number of runners could do."""
        return _ratio(1.0, self.serial_fraction)

    def speedup_with(self, runners: float) -> float:
        """Iteration speed-up if sampling were spread over `runners` instead of today's
        (ideal scaling of the sampling share, the rest unchanged)."""
        p = self.sampling_fraction
        if self.asynchronous or not _finite(p) or runners <= 0:
            return math.nan
        return 1.0 / ((1.0 - p) + p * self.samplers / runners)

    # --- lag -----------------------------------------------------------------------------
    @property
    def policy_lag_updates(self) -> float:
        return _ratio(self.lag_updates_sum, float(self.lag_iterations))

    # --- verdict -------------------------------------------------------------------------
    @property
    def verdict(self) -> str:
        if self.iterations == 0 or self.iteration_s <= 0:
            return "unknown"
        sample, learn, sync = self.sampling_fraction, self.learner_fraction, self.sync_fraction
        if sync >= SYNC_BOUND and sync >= sample and sync >= learn:
            return "sync-bound"
        if self.asynchronous:
            busy = self.learner_busy_fraction
            if self.env_steps_dropped > 0 or (_finite(busy) and busy >= LEARNER_BUSY):
                return "learner-bound"
            if not _finite(busy):
                return "unknown"
            return "sampling-bound" if busy <= LEARNER_IDLE else "balanced"
        if self.sampling_s + self.learner_s + self.sync_s <= 0:
            return "unknown"
        if sample >= BOUND and sample >= learn:
            return "sampling-bound"
        if learn >= BOUND:
            return "learner-bound"
        return "balanced"

    # --- as metrics ----------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """One iteration's figures under the names ``workbench/<name>`` takes in MLflow
        (NaN ones left out: MLflow would draw them as gaps anyway)."""
        raw = {
            "asynchronous": float(self.asynchronous),
            "env_runners": float(self.env_runners),
            "timers_exact": float(self.exact_iterations == self.iterations),
            "iteration_s": self.iteration_s,
            "evaluation_s": self.evaluation_s,
            "sampling_s": self.sampling_s,
            "learner_s": self.learner_s,
            "sync_s": self.sync_s,
            "rest_s": self.rest_s,
            "runner_s": self.runner_s,
            "learner_busy_s": self.learner_busy_s if self.busy_known else math.nan,
            "env_steps_sampled": self.env_steps_sampled,
            "env_steps_trained": self.env_steps_trained,
            "env_steps_dropped": self.env_steps_dropped,
            "sampling_fraction": self.sampling_fraction,
            "learner_fraction": self.learner_fraction,
            "sync_fraction": self.sync_fraction,
            "rest_fraction": self.rest_fraction,
            "learner_busy_fraction": self.learner_busy_fraction,
            "env_steps_sampled_per_s": self.sampled_per_s,
            "env_steps_sampled_per_s_per_runner": self.sampled_per_s_per_runner,
            "env_steps_trained_per_s": self.trained_per_s,
            "runners_needed": self.runners_needed,
            "amdahl_max_speedup": self.amdahl_max_speedup,
            "policy_lag_updates": self.policy_lag_updates,
            "verdict": float(VERDICTS.index(self.verdict)),
        }
        return {k: v for k, v in raw.items() if _finite(v)}

    @classmethod
    def from_metrics(cls, m: Mapping[str, float]) -> TimeSplit:
        """One iteration back from its ``workbench/*`` metrics (prefix stripped)."""

        def get(name: str, default: float = 0.0) -> float:
            value = m.get(name, default)
            return value if _finite(value) else default

        lag_updates = m.get("policy_lag_updates", math.nan)
        return cls(
            asynchronous=bool(get("asynchronous")),
            env_runners=int(get("env_runners")),
            iterations=1,
            exact_iterations=int(get("timers_exact", 1.0)),
            iteration_s=get("iteration_s"),
            evaluation_s=get("evaluation_s"),
            sampling_s=get("sampling_s"),
            learner_s=get("learner_s"),
            sync_s=get("sync_s"),
            runner_s=get("runner_s"),
            learner_busy_s=get("learner_busy_s"),
            env_steps_sampled=get("env_steps_sampled"),
            env_steps_trained=get("env_steps_trained"),
            env_steps_dropped=get("env_steps_dropped"),
            lag_updates_sum=get("policy_lag_updates"),
            lag_updates_max=lag_updates if _finite(lag_updates) else math.nan,
            lag_iterations=int(_finite(lag_updates)),
            busy_known=_finite(m.get("learner_busy_s", math.nan)),
        )


def iteration_split(
    flat: Mapping[str, Any], before: Mapping[str, float], facts: TrialFacts
) -> TimeSplit:
    """One ``train()``'s split, from its flattened result and the tracked values of the
    result before it (`snapshot`; {} for a trial's first)."""

    def value(key: str) -> float:
        return _number(flat.get(key))

    def delta(key: str) -> float:
        now = value(key)
        if not _finite(now):
            return 0.0
        return max(0.0, now - before.get(key, 0.0))

    calls_reported = value(CALLS)
    calls = int(calls_reported) if _finite(calls_reported) and calls_reported >= 1 else 1
    sample_key = ASYNC_SAMPLE_TIMER if facts.asynchronous else SAMPLING_TIMER
    sampling, exact_sample = recover_timer(
        value(sample_key), before.get(sample_key, math.nan), calls
    )
    learner, exact_learn = recover_timer(
        value(LEARNER_TIMER), before.get(LEARNER_TIMER, math.nan), calls
    )
    # APPO/IMPALA broadcast weights only every few training steps, and count them.
    sync_count = value(SYNC_COUNT)
    sync_calls = calls
    if facts.asynchronous:
        sync_calls = int(sync_count) if _finite(sync_count) else 0
    sync, exact_sync = recover_timer(
        value(SYNC_TIMER), before.get(SYNC_TIMER, math.nan), sync_calls
    )
    iteration_s = max(value(ITERATION), 0.0) if _finite(value(ITERATION)) else 0.0
    evaluation_s = value(EVALUATION_TIME)
    evaluation_s = min(max(evaluation_s, 0.0), iteration_s) if _finite(evaluation_s) else 0.0
    iteration_s -= evaluation_s

    exact = exact_sample and exact_learn and exact_sync
    timed = sampling + learner + sync
    if timed > iteration_s > 0:
        # Only an inexact recovery (several calls of unequal length, or a fresh EMA set
        # by a slow first call) can exceed the iteration: scale it back inside.
        scale = iteration_s / timed
        sampling, learner, sync = sampling * scale, learner * scale, sync * scale
        exact = False

    per_iteration = value(SAMPLED_ITER)
    sampled = per_iteration if _finite(per_iteration) else delta(SAMPLED)
    lag = policy_lag(flat)
    split = TimeSplit(
        asynchronous=facts.asynchronous,
        env_runners=facts.env_runners,
        iterations=1,
        exact_iterations=int(exact),
        iteration_s=iteration_s,
        evaluation_s=evaluation_s,
        sampling_s=sampling,
        learner_s=learner,
        sync_s=sync,
        env_steps_sampled=sampled,
        lag_updates_sum=lag if _finite(lag) else 0.0,
        lag_updates_max=lag,
        lag_iterations=int(_finite(lag)),
    )
    if facts.asynchronous:
        update, wait = value(THREAD_UPDATE), value(THREAD_WAIT)
        thread_busy = _ratio(update, update + (wait if _finite(wait) else 0.0))
        # The main process waits in learner_group.update() while a local learner's queue is
        # full: the learner is busy at least that long (remote learners never block it).
        blocked = _ratio(learner, iteration_s)
        known = [b for b in (thread_busy, blocked) if _finite(b) and b > 0]
        busy = min(1.0, max(known)) if known else math.nan
        split.busy_known = _finite(busy)
        split.learner_busy_s = busy * iteration_s if split.busy_known else 0.0
        split.env_steps_trained = delta(TRAINED)
        split.env_steps_dropped = delta(DROPPED)
        # Remote runners sample the whole time; the main process only while in sample().
        split.runner_s = iteration_s * facts.env_runners if facts.env_runners else sampling
    else:
        split.learner_busy_s = learner
        split.env_steps_trained = sampled
        split.runner_s = sampling * facts.samplers
    return split


def total(splits: Iterable[TimeSplit]) -> TimeSplit:
    out = TimeSplit()
    for split in splits:
        out = out + split
    return out


def steady(history: list[TimeSplit]) -> tuple[list[TimeSplit], int]:
    """The iterations a diagnosis uses: all but the first when there are three or more
    (its warm-up: first calls into torch, the first episodes' resets), and how many
    were left out."""
    if len(history) >= 3:
        return history[1:], 1
    return history, 0
