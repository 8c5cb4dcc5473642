"""Tuner.fit under the workbench's stop signals: Ctrl-C and SIGTERM save the population's
state for `workbench resume` instead of leaving a traceback and RUNNING MLflow runs."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from workbench.errors import Interrupted
from workbench.tune_ext.result_files import without_tune_loggers


class StopSignals:
    """Ctrl-C (SIGINT, to the whole foreground group) and SIGTERM during Tuner.fit.

    Tune's own SIGINT handler stops at the first Ctrl-C and then puts Python's back, so
    the next one raises KeyboardInterrupt wherever the driver happens to be: inside
    Tune's final save, a garbage-collection callback, Ray's atexit hooks. Each left a
    traceback and some MLflow runs RUNNING. The workbench handles both signals instead
    (Tune's SIGINT handler is off: TUNE_DISABLE_SIGINT_HANDLER): the first asks Tune to
    stop through SIGUSR1, the signal Tune keeps for that (its state is saved, the runs
    end KILLED and `workbench resume` goes on); any later one is only noted, for the rest
    of the driver's life. Kubernetes stops pods with SIGTERM: the same path.

    Before Tune's loop has started there is nothing to save: the first signal then
    raises KeyboardInterrupt, and `fit` marks what the tracker opened KILLED."""

    def __init__(self) -> None:
        self.count = 0
        self.installed = False

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGUSR1"):
            self._previous = {
                sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)
            }
            self.installed = True
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.count > 1:
            return  # already stopping: a traceback now would only lose the saved state
        if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, signal.SIG_IGN, None):
            raise KeyboardInterrupt  # Tune's loop has not started: nothing to save yet
        print(
            "workbench: stopping; saving the population's state (resume it with "
            "`workbench resume`)",
            file=sys.stderr,
        )
        os.kill(os.getpid(), signal.SIGUSR1)

    def __exit__(self, *exc: object) -> None:
        # Once stopping, later signals stay noted only, until the process ends.
        if self.installed and not self.count:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)


def fit(tuner: Any, session: Any, results_dir: Path) -> tuple[Any, float, bool]:
    """Tuner.fit under the workbench's stop signals (StopSignals). Returns the results,
    the wall time and whether a stop signal came; Interrupted when stopped before Tune's
    loop began."""
    start = time.monotonic()
    with StopSignals() as signals:
        try:
            with session.table.showing(), without_tune_loggers():
                results = tuner.fit()
            return results, time.monotonic() - start, signals.count > 0
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            if session.tracker is not None:
                session.tracker.abandon()
            raise Interrupted(
                "Interrupted before the population started; its MLflow runs are marked "
                f"KILLED. `workbench resume {results_dir}` starts it where it was."
            ) from None
