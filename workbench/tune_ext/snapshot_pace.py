"""How soon a trial checkpoint reaches the experiment snapshot that a resume reads.

Tune writes the experiment snapshot at most every ~10 s, so a driver killed in between
leaves a snapshot whose trials go back to older checkpoints than their last. The workbench
has Tune force a snapshot after a trial checkpoint instead (`ResumableScheduler`), but at
most one every `LAG_S` seconds: a checkpoint made sooner after the last snapshot is written
with the next step of Tune's loop past that bound, together with every checkpoint made in
the meantime. Tune's loop steps at least every 0.1 s, so a checkpoint is in the snapshot
within about `LAG_S` of being registered, and the end of a run (or Ctrl-C) still writes a
last snapshot at once (Tune forces that one).

Why a bound rather than a snapshot after every checkpoint: each snapshot holds every trial
(10 MB at 32 trials), is written by the driver's main thread, copied into the results folder
by a background thread that the next snapshot waits for, and read back by the checkpoint
pruning. The main experiment's population of 32 made about 1.4 checkpoints a second, and
at 16 trials the snapshot's writing, copying and reading back were 29% of the driver's busy
samples, on the cores the trials share (docs/benchmarks/population-scale.md). Under the
bound a burst of checkpoints costs one snapshot.

What a resume loses is bounded by it: a trial resumes from the last checkpoint that was
registered at least `LAG_S` before the driver stopped, or from a later one. The checkpoint
pruning keeps every checkpoint a snapshot on disk names (workbench.tune_ext.checkpoints),
so the checkpoint a lagging snapshot names is still there.

This reads and wraps Tune's experiment checkpoint manager (Ray 2.60 internals: its force
flag and the time of its last save; see workbench.tune_ext.ray_surface).
"""

from __future__ import annotations

import time
from typing import Any

# The longest a trial checkpoint waits for the snapshot that names it (seconds). 0: a
# snapshot after every checkpoint, as before (the population benchmark's anchor arm).
LAG_S = 2.0

_PACED = "_workbench_paced_s"


def pace(manager: Any, lag_s: float) -> None:
    """Tune's experiment checkpoint manager ``manager`` (one per controller) writes the
    snapshot a trial checkpoint forces at most ``lag_s`` after the last one, not at once
    (the module's docstring). Idempotent; ``lag_s`` <= 0 leaves it as Tune made it."""
    if lag_s <= 0 or getattr(manager, _PACED, None) is not None:
        return
    tunes = manager.sync_up_experiment_state

    def sync_up_experiment_state(save_fn: Any, force: bool = False, wait: bool = False) -> None:
        held = (
            not force
            and manager._should_force_sync_up
            and time.monotonic() - manager._last_save_time < lag_s
        )
        if held:
            # Tune's own period (10 s or more) is not due either: it saved under lag_s ago.
            return None
        return tunes(save_fn, force=force, wait=wait)  # type: ignore[no-any-return]

    manager.sync_up_experiment_state = sync_up_experiment_state
    setattr(manager, _PACED, lag_s)
