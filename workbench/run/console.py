"""Ray's, Tune's and MLflow's own logging, sent to the population's log file.

The console of a run is the workbench's: the live view (`workbench.run.progress`), the
plan and the summary. What the libraries log in the driver (Ray's token-auth warning and
"Started a local Ray instance", Tune's PBT exploit blocks and its "Cannot find metric"
lines, MLflow's "Creating initial MLflow database tables", Python warnings) goes to
``<results folder>/workbench.log`` instead, and with ``--verbose`` to the console too.

Every handler that writes to the terminal (a ``StreamHandler`` on stderr or stdout:
Ray's ``PlainRayHandler``, MLflow's, Optuna's, Python's last resort through the root
logger) is taken off while the run lasts and put back after it. Loggers set up later
(a library imported during the run) are taken over at the next ``take_over``: the
launcher calls it once the population's libraries are imported, before Tune starts.

Before the results folder exists (Ray starts before it is written) the records wait in
memory and go to the file once it is opened; a run refused before that shows them only
with ``--verbose``. Tune's own printing (its configuration box, TensorBoard hint and
status tables) is switched off where it starts (``RAY_AIR_NEW_OUTPUT=0`` and
``verbose=0``: `workbench.run.launch`).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import logging.handlers
import sys
import time
from pathlib import Path
from types import TracebackType

from workbench.names import LOG_FILE

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# What the libraries log (the loggers Ray, Tune, RLlib and MLflow write through),
# at INFO: the file is where to look when something went wrong.
_LIBRARY_LEVEL = logging.INFO


class _OwnFormat:
    """A handler whose format stays the workbench's: ``ray.init`` sets its own
    formatter on every handler of the "ray" logger (``setup_logger``), ours included
    when Ray starts after the take-over (a resume)."""

    def setFormatter(self, fmt: logging.Formatter | None) -> None:
        if getattr(self, "formatter", None) is None:
            self.formatter = fmt


class _LogFile(_OwnFormat, logging.FileHandler):
    pass


class _Stderr(_OwnFormat, logging.Handler):
    """--verbose: the records on whatever sys.stderr is when they are written (the live
    view puts them above its table)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


def _writes_to_terminal(handler: logging.Handler) -> bool:
    if isinstance(handler, logging.FileHandler):
        return False
    if not isinstance(handler, logging.StreamHandler):
        return False
    # pytest's log capture and other in-memory handlers stay.
    return not isinstance(getattr(handler, "stream", None), io.StringIO)


class LibraryLogs:
    """Takes the libraries' logging off the console for the life of a run (a context
    manager). ``open_file(results_dir)`` starts the log file; ``verbose`` keeps the
    records on the console as well."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose
        self.path: Path | None = None
        self._memory = logging.handlers.MemoryHandler(
            capacity=100_000, flushLevel=logging.CRITICAL + 1, target=None, flushOnClose=False
        )
        self._handlers: list[logging.Handler] = [self._memory]
        if verbose:
            self._handlers.append(_Stderr())
        formatter = logging.Formatter(_FORMAT)
        for handler in self._handlers:
            handler.setFormatter(formatter)
        # logger -> (its handlers, its propagate flag) before the take-over
        self._taken: dict[logging.Logger, tuple[list[logging.Handler], bool]] = {}
        self._ours: set[logging.Logger] = set()  # the taken loggers that write to ours
        self._captured_warnings = False
        self._own: logging.Handler | None = None  # the workbench's warnings on stderr
        self._own_level_set = False  # the workbench logger was NOTSET: INFO while we run

    def __enter__(self) -> LibraryLogs:
        # Whether warnings were captured already (the stdlib keeps no public flag).
        self._captured_warnings = not getattr(
            logging,
            "_warnings_showwarning",
            None,  # not Ray: the logging module's
        )
        logging.captureWarnings(True)
        self.take_over()
        # The workbench's own warnings (MLflow refused a write, a checkpoint could not be
        # deleted) stay on the console as well; --verbose shows them already.
        if not self.verbose:
            self._own = _Stderr(logging.WARNING)
            self._own.setFormatter(logging.Formatter("workbench: %(message)s"))
            logging.getLogger("workbench").addHandler(self._own)
        # The workbench's own notes (why PBT spared a trial, what a resume dropped) go to
        # the log file: the root logger would pass on only warnings.
        own = logging.getLogger("workbench")
        if own.level == logging.NOTSET:
            self._own_level_set = True
            own.setLevel(logging.INFO)
        return self

    def take_over(self, also_import: tuple[str, ...] = ()) -> None:
        """Takes over every logger that writes to the terminal now, the root logger and
        Python's warnings; again for one reconfigured since. ``also_import``: libraries
        the run will import, imported first (MLflow sets its handlers on import, which
        the tracker does in its writer thread)."""
        for module in also_import:
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
        root = logging.getLogger()
        loggers = [root] + [
            logger
            for logger in list(logging.Logger.manager.loggerDict.values())
            if isinstance(logger, logging.Logger)
        ]
        for logger in loggers:
            terminal = [h for h in logger.handlers if _writes_to_terminal(h)]
            ours = logger is root or logger.name == "py.warnings"
            if logger not in self._taken:
                if not terminal and not ours:
                    continue
                self._taken[logger] = (list(logger.handlers), logger.propagate)
                # The root logger passes its records on to nothing; the others to ours
                # directly, as they did to their own handlers.
                if ours or not logger.propagate:
                    self._ours.add(logger)
            for handler in terminal:
                logger.removeHandler(handler)
            if logger in self._ours:
                for handler in self._handlers:
                    if handler not in logger.handlers:
                        logger.addHandler(handler)
                logger.propagate = logger is root
        ray_logger = logging.getLogger("ray")
        if ray_logger.level in (logging.NOTSET, logging.WARNING):
            ray_logger.setLevel(_LIBRARY_LEVEL)

    def open_file(self, results_dir: Path, command: str) -> Path:
        """Starts ``results_dir/workbench.log`` (appended to: a resume adds its own part)
        with what was logged so far."""
        self.path = results_dir / LOG_FILE
        file_handler = _LogFile(self.path, mode="a", encoding="utf-8")
        file_handler.setFormatter(logging.Formatter(_FORMAT))
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with self.path.open("a", encoding="utf-8") as out:
            out.write(f"--- workbench {command}, {stamp}: Ray, Tune and MLflow's log ---\n")
        self._memory.setTarget(file_handler)
        self._memory.flush()
        index = self._handlers.index(self._memory)
        self._handlers[index] = file_handler
        for logger in self._ours:
            logger.removeHandler(self._memory)
            logger.addHandler(file_handler)
        self._memory.setTarget(None)
        return self.path

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        for logger, (handlers, propagate) in self._taken.items():
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
            for handler in handlers:
                logger.addHandler(handler)
            logger.propagate = propagate
        self._taken.clear()
        if self._own is not None:
            logging.getLogger("workbench").removeHandler(self._own)
        if self._own_level_set:
            logging.getLogger("workbench").setLevel(logging.NOTSET)
            self._own_level_set = False
        self._ours.clear()
        if self._captured_warnings:
            logging.captureWarnings(False)
        for handler in self._handlers:
            if handler is not self._memory:
                handler.close()
        self._memory.buffer.clear()


__all__ = ["LibraryLogs"]
