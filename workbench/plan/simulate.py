"""A population run, result by result, on shared cores: what the plan's forecast
(``workbench.plan.population``) reads its wall time, its ``train()`` calls and the trials'
time in ``train()`` from.

Every piece of work is a job on the cores, and the cores are shared equally among the
running jobs (processor sharing: no job runs faster than its own time, and all slow down
alike when together they want more than the cores). A trial's processes start (each
importing torch and RLlib and building its part of the algorithm, dearer among more trial
processes a core: the first trials start together); then it loops:
``train()``, its result queues for the driver, which handles one result at a time on one
core of the same cores, then the trial's own work outside ``train()`` for that result (its
CPU, shared on the cores like a ``train()``'s, and a wait that takes none), and the next
``train()``. A trial that has its iterations ends and frees its slot for the next
pending trial. After the population's last result the run takes ``end_s`` more (Tune
stopping the last trials, ``fit()`` returning), which every trial still in its slot waits
out. Under a budget for the whole population (``stop.population_env_steps``, here
in ``train()`` calls), the run ends when the driver has handled the result that spends it:
every trial stops at once, and the ``train()`` calls then in flight yield no result.

Under PBT or PB2, a trial decides every ``interval`` of its own iterations (the rules of
``workbench.tune_ext.pbt``): if it ranks in the lower quantile, it restarts from the
checkpoint of a trial of the upper quantile that scores strictly better and whose last
decision lies at least an interval past the trial's own last start, taking that
iteration count and that trial's hyperparameters, explored as PBT perturbs them where
the plan knows the values that set a ``train()``'s cost (else the donor's cost). As in
Ray's PBT, only the trials not yet finished rank: a trial that has its iterations leaves
the donors, and its last result decides nothing (Tune stops it first). The
model cannot know the scores: it ranks trials by how far they have trained at their last
decisions, as a population that is learning does, plus a noise of ``score_noise``
iterations drawn afresh at each decision (the evaluations' noise and the members' unequal
learning): with it, a trial can rank below one behind it and clone back to it. How far a
trial has trained counts each ``train()`` at what it learns: with ``learn_exponent`` e, a
call of c CPU seconds counts (c / the draws' mean) ** e iterations, so that a member whose
draw does more learning work a batch (more epochs, smaller minibatches) can lead one that
has iterated further (e = 0: every call counts one). A learning curve levels off where the
task is solved (CartPole's returns stop at 500): past ``score_ceiling`` iterations of
progress a score rises no further, and the members there rank by the noise alone, so that
one far ahead clones back to one behind as often as forward. A clone takes its donor's
progress. Those clones are the iterations a PBT population skips or repeats, and how its
cost drifts toward the trials that run fastest. A rule that clones only over a clear gain
(a significance test on the evaluations, a minimum gain, or sparing a member still
improving) lets through a share of those decisions only (``clone_share``): the gain a
trial ahead shows is often within the evaluations' noise.

Each trial draws its ``train()`` cost from the searched hyperparameters; the forecast
averages runs over several orders of those draws (which trial starts where is Ray's
choice). A crowd of trial processes on the cores makes each ``train()`` dearer and each
wait between results longer; both are set by the processes of the trials under way when
the call or the wait begins, so a population that stops member by member runs its last
iterations on emptier cores, and one that stops at once under a budget stays crowded to
its end."""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Exploits:
    """PBT's or PB2's decision rule (the experiment's scheduler section)."""

    interval: int
    quantile: float
    burn_in: int = 0
    # Whether a donor must also be clearly better (exploit_test, exploit_min_gain,
    # spare_improving): then a decision with a donor ahead clones at ``clone_share``.
    tested: bool = False


@dataclass(frozen=True)
class Costs:
    """One trial's costs in seconds (the module's docstring)."""

    processes: int
    # Own time of a process's start alone (all of a trial's start at once); with c trial
    # processes a core under way it costs (1 + start_per_process * c) that, as a train()
    # costs more on crowded cores.
    start_s: float
    rest_s: float  # a result's wait outside train() that the cores do not set (I/O, Ray)
    driver_s: float  # the driver's work a result
    # With c trial processes a core under way: a train() costs (1 + train_per_process *
    # min(c, crowd_saturation)) its own, and a result waits rest_s + rest_s_per_process *
    # c ** crowd_exponent. Past ``crowd_saturation`` processes a core a train() costs no
    # more (measured: where each core is already time-shared, more processes on it evict
    # no more of a process's cache than it loses at each turn).
    train_per_process: float = 0.0
    crowd_saturation: float = math.inf
    rest_s_per_process: float = 0.0
    crowd_exponent: float = 1.0
    start_per_process: float = 0.0
    # Wall s from the population's last result to the run's end (Tune stopping the last
    # trials, fit() returning): every trial still in its slot waits it out.
    end_s: float = 0.0
    # The trial's own CPU work for each result outside train() (handing the result over,
    # saving the checkpoint Tune asks for): a job on the shared cores like train(), so its
    # wall grows with the crowd as a train()'s does.
    result_cpu_s: float = 0.0

    def dearer(self, crowd: float) -> float:
        return 1.0 + self.train_per_process * min(crowd, self.crowd_saturation)

    def start(self, crowd: float) -> float:
        return self.start_s * (1.0 + self.start_per_process * crowd)

    def wait_s(self, crowd: float) -> float:
        return max(
            0.0, self.rest_s + self.rest_s_per_process * math.pow(crowd, self.crowd_exponent)
        )


@dataclass(frozen=True)
class Outcome:
    wall_s: float
    results: float  # train() calls
    train_s: float  # the trials' seconds in train()
    before_s: float  # the trials' seconds from their slot's start to their first train()
    # The trials' seconds from their last result to their slot's end (the run's end, or
    # the next trial's start on it): those that finish first waiting for the slowest.
    after_s: float
    driver_busy: float  # the driver's share of the wall
    cores_busy: float  # the cores' share of the wall used
    clones: int = 0  # PBT's restarts from a donor
    clones_back: int = 0  # those to a donor's checkpoint behind the trial's iteration


# PBT's explore of a cloned trial's values that set its train()'s cost: from the donor's
# values, the new values and their train()'s (CPU s, own s).
Explore = Callable[[Hashable, random.Random], tuple[Hashable, tuple[float, float]]]


@dataclass
class _Trial:
    cost: tuple[float, float]  # (CPU s, own s) of one train()
    point: Hashable = None  # the values that set that cost (None: not known)
    done: int = 0  # training_iteration
    start: int = 0  # iteration of its last restart from a clone
    decided: int | None = None  # iteration of its last decision
    score: float = 0.0  # its score then: what it had learned, plus the noise
    learned: float = 0.0  # its train() calls, each counted at what it learns
    learned_then: float = 0.0  # that at its last decision
    calls: int = 0
    train_s: float = 0.0
    slot_at: float | None = None  # when its slot was free for it (None: never launched)
    first_at: float | None = None  # when its first train() began
    last_at: float | None = None  # when its last train() that gave a result ended
    left_at: float | None = None  # when the next trial took its slot (None: the run's end)


# What ends when a job does: (what, the trial, when the job began).
_Event = tuple[str, int, float]


@dataclass
class _Cores:
    """The trials' jobs share what the driver leaves of the cores equally (each advances
    its own time at ``speed``); the driver's job runs at full speed: Ray starts its
    workers at niceness 15, and the driver and Ray's daemons take a core first."""

    cores: float
    now: float = 0.0
    virtual: float = 0.0
    width: float = 0.0
    work_s: float = 0.0
    heap: list[tuple[float, int, tuple[float, _Event]]] = field(default_factory=list)
    count: int = 0
    first: tuple[float, _Event] | None = None  # the driver's job: (when it ends, what)
    waits: list[tuple[float, int, _Event]] = field(default_factory=list)  # no CPU

    @property
    def speed(self) -> float:
        room = max(0.0, self.cores - (1.0 if self.first is not None else 0.0))
        return min(1.0, room / self.width) if self.width > 0 else 1.0

    def add(self, own_s: float, width: float, what: _Event) -> None:
        self.count += 1
        self.width += width
        heapq.heappush(self.heap, (self.virtual + own_s, self.count, (width, what)))

    def add_first(self, own_s: float, what: _Event) -> None:
        assert self.first is None
        self.first = (self.now + own_s, what)

    def wait(self, seconds: float, what: _Event) -> None:
        self.count += 1
        heapq.heappush(self.waits, (self.now + seconds, self.count, what))

    def busy(self) -> bool:
        return bool(self.heap or self.waits) or self.first is not None

    def next(self) -> _Event:
        speed = self.speed
        shared = (
            self.now + (self.heap[0][0] - self.virtual) / speed
            if self.heap and speed > 0
            else math.inf
        )
        if self.waits and self.waits[0][0] <= min(
            shared, self.first[0] if self.first is not None else math.inf
        ):
            ends, _, what = heapq.heappop(self.waits)
            self._advance(ends - self.now, speed)
            return what
        if self.first is not None and self.first[0] <= shared:
            ends, what = self.first
            self._advance(ends - self.now, speed)
            self.first = None
            return what
        finish, _, (width, what) = heapq.heappop(self.heap)
        self._advance(shared - self.now, speed)
        self.virtual = finish
        self.width = max(0.0, self.width - width)
        return what

    def _advance(self, seconds: float, speed: float) -> None:
        seconds = max(0.0, seconds)
        self.virtual += seconds * speed
        self.work_s += seconds * (speed * self.width + (1.0 if self.first is not None else 0.0))
        self.now += seconds


def simulate(
    costs: Costs,
    draws: list[tuple[float, float]],
    *,
    at_once: int,
    cores: float,
    iterations: int | None,
    exploits: Exploits | None,
    seed: int = 0,
    clone_share: float = 1.0,
    budget: int | None = None,
    score_noise: float = 0.0,
    points: list[Hashable] | None = None,
    explore: Explore | None = None,
    learn_exponent: float = 0.0,
    score_ceiling: float = math.inf,
) -> Outcome:
    """One run of ``len(draws)`` trials, ``at_once`` at a time, each drawing its train()
    cost in the order given, until each has ``iterations`` or the population has had
    ``budget`` train() calls; under a tested rule, ``clone_share`` of the decisions that
    find a donor clone; each decision's score off the trial's iteration by a normal noise
    of ``score_noise`` iterations, its progress each call counted at its CPU over the
    draws' mean to the ``learn_exponent`` and held at most ``score_ceiling``. ``points``:
    the values each draw's cost comes from; with ``explore``, a clone takes its donor's
    values explored (PBT's perturbation), and their cost, rather than the donor's cost."""
    if iterations is None and budget is None:
        raise ValueError("a run needs iterations per trial or a budget for the population")
    limit = math.inf if iterations is None else iterations
    share = clone_share if exploits is not None and exploits.tested else 1.0
    rng = random.Random(seed)
    trials = [
        _Trial(cost, points[k] if points is not None else None) for k, cost in enumerate(draws)
    ]
    pending = deque(range(len(trials)))
    cpu = _Cores(cores)
    live = 0  # trials under way: launched, not yet at their iterations
    driver: deque[int] = deque()  # the results the driver has, the first in hand
    ranked: list[tuple[float, int]] = []  # (score, trial) of the trials that have decided
    clones = back = 0  # restarts from a donor; those behind the trial
    mean_cpu = sum(c for c, _ in draws) / len(draws) if draws else 0.0

    def learns(cost: tuple[float, float]) -> float:
        """What one train() of this cost counts toward a trial's score, in iterations."""
        if learn_exponent == 0.0 or mean_cpu <= 0.0 or cost[0] <= 0.0:
            return 1.0
        return float((cost[0] / mean_cpu) ** learn_exponent)

    def crowd() -> float:
        """Trial processes a core, of the trials under way."""
        return costs.processes * live / max(cores, 1e-9)

    def launch(counted: bool = False) -> None:
        nonlocal live
        if not counted:
            live += 1
        i = pending.popleft()
        trials[i].slot_at = cpu.now
        cpu.add(costs.start(crowd()), costs.processes, ("train", i, 0.0))

    def train(i: int) -> None:
        t = trials[i]
        if t.first_at is None:
            t.first_at = cpu.now
        own = t.cost[1] * costs.dearer(crowd())
        cpu.add(own, t.cost[0] / t.cost[1] if t.cost[1] > 0 else 1.0, ("trained", i, cpu.now))

    def to_driver(i: int) -> None:
        driver.append(i)
        if len(driver) == 1:
            cpu.add_first(costs.driver_s, ("handled", i, cpu.now))

    def score(i: int, iteration: int, value: float) -> None:
        t = trials[i]
        if t.decided is not None:
            ranked.remove((t.score, i))
        t.decided, t.score, t.learned_then = iteration, value, t.learned
        bisect.insort(ranked, (value, i))

    def decide(i: int) -> None:
        assert exploits is not None
        t = trials[i]
        last = t.decided if t.decided is not None else t.start
        if t.done - last < exploits.interval or t.done <= exploits.burn_in:
            return
        noise = rng.gauss(0.0, score_noise) if score_noise > 0 else 0.0
        score(i, t.done, min(t.learned, score_ceiling) + noise)
        n = len(ranked)
        k = math.ceil(n * exploits.quantile)
        if k > n / 2:
            k = n // 2
        if k == 0 or (t.score, i) not in ranked[:k]:
            return
        donors = [
            j
            for value, j in ranked[-k:]
            if value > t.score and (trials[j].decided or 0) >= t.start + exploits.interval
        ]
        if not donors or (share < 1.0 and rng.random() >= share):
            return
        nonlocal clones, back
        clones += 1
        donor = trials[rng.choice(donors)]
        assert donor.decided is not None
        back += donor.decided < t.done
        t.done = t.start = donor.decided
        t.learned = donor.learned_then
        if explore is not None and donor.point is not None:
            t.point, t.cost = explore(donor.point, rng)
        else:
            t.point, t.cost = donor.point, donor.cost
        score(i, donor.decided, donor.score)

    def rest(i: int) -> None:
        if (wait := costs.wait_s(crowd())) > 0:
            cpu.wait(wait, ("train", i, 0.0))
        else:
            train(i)

    handled = 0
    # The first trials start together: each start among all of their processes.
    live = min(at_once, len(trials))
    for _ in range(live):
        launch(counted=True)
    while cpu.busy():
        kind, i, since = cpu.next()
        t = trials[i]
        if kind == "train":
            train(i)
        elif kind == "trained":
            t.done += 1
            t.learned += learns(t.cost)
            t.calls += 1
            t.train_s += cpu.now - since
            t.last_at = cpu.now
            to_driver(i)
        elif kind == "handled":
            handled += 1
            if budget is not None and handled >= budget:
                break
            driver.popleft()
            if driver:
                cpu.add_first(costs.driver_s, ("handled", driver[0], cpu.now))
            if t.done >= limit:
                # Tune stops a trial at its stop rule without asking the scheduler, and
                # PBT ranks only the trials not yet finished: it leaves the donors.
                if t.decided is not None:
                    ranked.remove((t.score, i))
                live -= 1
                if pending:
                    t.left_at = cpu.now
                    launch()
            else:
                if exploits is not None:
                    decide(i)
                if costs.result_cpu_s > 0:
                    cpu.add(costs.result_cpu_s, 1.0, ("rested", i, 0.0))
                else:
                    rest(i)
        elif kind == "rested":
            rest(i)
    wall = cpu.now + costs.end_s
    results = sum(t.calls for t in trials)
    launched = [t for t in trials if t.slot_at is not None]
    return Outcome(
        wall_s=wall,
        results=float(results),
        train_s=sum(t.train_s for t in trials),
        before_s=sum(
            (t.first_at if t.first_at is not None else wall) - (t.slot_at or 0.0) for t in launched
        ),
        after_s=sum(
            (t.left_at if t.left_at is not None else wall) - t.last_at
            for t in launched
            if t.last_at is not None
        ),
        # The driver runs at full speed: each result holds it driver_s.
        driver_busy=results * costs.driver_s / wall if wall else 0.0,
        cores_busy=cpu.work_s / (cores * wall) if wall else 0.0,
        clones=clones,
        clones_back=back,
    )
