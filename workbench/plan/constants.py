"""The population forecast's constants: seconds measured or fitted on this project's machine
(``benchmarks/population_scale.py --calibrate``; docs/resources.md, "The population
forecast", and docs/benchmarks/population-scale.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Constants:
    """Seconds measured or fitted here by ``benchmarks/population_scale.py --calibrate`` on
    the 8 runs of 6 December 16:14 UTC (4, 8, 16 and 32 trials of the main experiment's
    space, and of it with ``num_epochs`` and ``minibatch_size`` fixed; 40 iterations each),
    each size and space priced by its own probe, the first whose learner updates each ran
    on their own copy of the episodes; the fit's largest error over the runs' results a
    second, share outside train() and share before the first result was 36%
    (docs/benchmarks/population-scale.md). A start and its growth with the crowd were
    measured later, on the 36 runs of 6 December 18:54 to 7 December 02:50 UTC that
    recorded their trial processes' starts; the rest is kept as fitted. Checked against the
    runs of 7 December since the driver writes the experiment snapshot within two seconds
    of a checkpoint (its CPU a result 52 ms rather than ``driver_s``): neither a refit nor
    the measured constants taken anew brought the forecast nearer those runs or the fresh
    round after them, so the constants stay as they were fitted together."""

    # A trial process's start, in CPU seconds, with no other trial processes running, and
    # a fresh process's start alone (what the probe measures: workbench/plan/
    # start_probe.py; the median over the runs that measured it). Where the probe measured
    # the start, a trial's is priced ``start_s / start_alone_s`` times that, so that it
    # moves with the machine. Among c trial processes a core (of the cores Ray's own
    # processes leave them: ``cores_left``) it costs ``1 + start_per_process * c`` times
    # that, as a train() costs more on crowded cores (1.4 times at 32 trials on 2 cores).
    # Measured: each run's median start over its probe's, a line in the processes per core
    # (``scale_calibration.measured_start``).
    start_s: float = 3.650
    start_alone_s: float = 3.473
    start_per_process: float = 0.01969
    # Wall s from the population's last result to the run's end: Tune stopping the last
    # trials, their final saves, fit() returning; every trial still in its slot waits it
    # out. Measured: the median over 52 runs of 6-7 December of each run's shortest time
    # from a trial's last result to fit()'s return, less half a second (Tune stamps a
    # result in whole seconds, cut down).
    end_s: float = 1.8
    # A result's wait outside train() that takes no CPU of the trial's (Tune's loop, Ray's
    # calls): a fixed part, and a part that grows with the trial processes running per
    # core, ``result_s_per_process x crowd ** crowd_exponent`` (each hop of the result and
    # of the next call waits its turn among the processes on the cores). Fitted.
    result_s: float = 0.0
    result_s_per_process: float = 0.003
    crowd_exponent: float = 1.0
    # A train() costs more on crowded cores than the probe's, alone: this fraction more per
    # trial process running per core. Fitted: twice the probe's at 16 processes a core
    # (32 trials on 2 cores), as the trials' CPU a result less their starts measured.
    train_per_process: float = 0.06875
    # The driver's CPU per result (measured: its CPU over the results of the runs, the
    # benchmark's own sampling threads apart).
    driver_s: float = 0.07375
    # Ray's own processes on each node (its raylet, agents and idle workers): the share of
    # a core they keep busy, which the trials do not get (measured).
    ray_cores_per_node: float = 0.05304
    # How a decision's score ranks a trial: its progress (iterations) plus a normal noise
    # of ``score_noise`` iterations (the evaluations' noise, members learning at unequal
    # speeds); and under a rule that clones only over a clear gain (the shipped default:
    # a Welch test on the evaluations), the share of the decisions with a donor that
    # clone. Fitted together to the clones and the iterations they skipped net (5% off,
    # pooled over the sizes).
    clone_share: float = 0.65
    score_noise: float = 6.0
    # What a train() counts toward that progress: (its CPU / the draws' mean) ** this, so
    # that a member whose draw learns more a batch (more epochs, smaller minibatches) can
    # outrank one that has iterated further, and the cheaper ones clone back to it (0:
    # every call counts one iteration). Fitted with the noise and the share, to the clones,
    # those to a donor behind and the calls skipped net: 0 on the 19 runs of 7 December
    # (at 1, the wide space's runs at 16 and 32 repeat 15-40% more calls than they did).
    learn_exponent: float = 0.0
    # The progress, in iterations, past which a decision's score rises no further (the task
    # solved: the members there rank by the noise alone). Fitted with the noise, the share
    # and the learn exponent: none on the 6 runs of 7 December 16:07 (4 to 16 trials, both
    # spaces), where the runs clone twice as often over the wide space as with equal costs
    # and the model the other way round, which no ceiling brought nearer.
    score_ceiling: float = math.inf
    # The trial process's own CPU for each result outside train() (handing the result to
    # Tune, the checkpoint it asks for): shared on the cores as a train() is, so that its
    # wall grows with the crowd alike. Measured (the median over the runs of their time
    # between results against their time in train(); ``scale_calibration.result_cpu``).
    result_cpu_s: float = 0.04334


MEASURED = Constants()
