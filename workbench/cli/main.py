"""The `workbench` command line: a thin face over functions that tests call directly.

Every command parses its options, calls one function of the package and prints what it
returns (numbers, times and tables: `workbench.cli.format`).

Exit codes: 0 success, 1 the run failed, 2 bad input (nothing was started; for the
commands that read an MLflow store, also a store that cannot be read: one line), 141 the
reader of stdout went away (`| head`: no traceback).

The modules, by command family:
- `main`: `main` (the exit codes above) and `_parse`;
- `parser`: the `workbench` parser, its commands in the order `--help` lists them, and
  `completion`;
- `options`: how a command is declared and the options several commands share;
- `experiment_commands`: envs, schema, validate, run, plan, resume;
- `view_commands`: runs, show, lineage, diagnose, compare, ui;
- `policy_commands`: eval, export-schedule, export-policy;
- `common`: what the handlers of several families share; `format`: how they print.

One CLI: the options several commands share (--store, --json, --population, --wide) are
spelled once (`options`, argparse parents); every command has a description and examples
(`Commands.add`); an option a command does not know is told with that command's usage
(`_parse`); `workbench completion SHELL` prints shtab's script for this parser. Tables and
prose fit the terminal's width (`workbench.cli.format`), --wide prints them whole.

Imports: each handler imports its command's package modules itself (the one place the
workbench imports inside functions), so that `workbench --help` and the light commands
start without Ray, torch, MLflow or matplotlib (keep `workbench --help` under ~0.3 s).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import sys
from collections.abc import Sequence

from workbench.cli.parser import _build, build_parser
from workbench.errors import ExperimentError, Interrupted
from workbench.tracking.store import read_failure

__all__ = ["CLOSED_PIPE_EXIT", "_build", "_parse", "build_parser", "entry", "main"]

# A reader that closed the pipe early (`| head`): the status of a process SIGPIPE ended.
CLOSED_PIPE_EXIT = 141


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments; an option the command does not know is told with that command's
    usage (argparse's top-level parser would print its own)."""
    parser, subparsers = _build()
    if not (sys.argv[1:] if argv is None else list(argv)):
        parser.print_help()  # a bare `workbench`: the commands, not an error
        parser.exit(0)
    args, extra = parser.parse_known_args(argv)
    if extra:
        subparsers[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    positional, option = getattr(args, "experiment", None), getattr(args, "population", None)
    if positional is not None and option is not None and positional != option:
        subparsers[args.command].error(
            f"--population {option} and the POPULATION argument {positional} disagree; give one"
        )
    return args


def _closed_pipe() -> int:
    """stdout's reader went away (`workbench runs --json | head`): like any Unix filter,
    stop quietly. Python would report the same error again when it flushes stdout at
    exit: stdout points to /dev/null from here on."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return CLOSED_PIPE_EXIT


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    try:
        return int(args.handler(args))
    except BrokenPipeError:
        return _closed_pipe()
    except ExperimentError as err:
        print(err, file=sys.stderr)
        return ExperimentError.exit_code
    except Interrupted as err:
        print(f"workbench: {err}", file=sys.stderr)
        return Interrupted.exit_code
    except KeyboardInterrupt:
        # Outside Tune's loop (starting up, evaluating): nothing half-written to tidy.
        print("workbench: interrupted", file=sys.stderr)
        return Interrupted.exit_code
    except Exception as err:
        failure = read_failure(err, args.store) if getattr(args, "reads_store", False) else None
        if failure is None:
            raise
        print(failure, file=sys.stderr)
        return ExperimentError.exit_code


def entry() -> None:
    """The `workbench` command (pyproject's [project.scripts], `python -m workbench.cli`):
    `main`, then an exit that skips tearing the interpreter down.

    A command that imported torch, Ray, MLflow and SQLAlchemy spends 2-3 s of CPU after
    its work is done freeing their modules one object at a time (measured in
    docs/testing.md). Python's own exit still runs up to that step: the threads are
    joined and every atexit hook the command's libraries registered runs (Ray's
    shutdown, MLflow's, weakref finalizers) before `_end_process`, registered ahead of
    them (atexit runs the last registered first), ends the process with the command's
    exit code. A command that fails with a traceback exits the usual way."""
    ending: list[int] = []
    atexit.register(_end_process, ending)
    code = main()
    ending.append(code)
    sys.exit(code)


def _end_process(ending: list[int]) -> None:
    if not ending:
        return  # an uncaught exception: Python's own exit, code and all
    # Ray's shutdown (an atexit hook that ran before this one) has signalled the local Ray
    # this command started; the command returns once its processes are gone.
    session = sys.modules.get("workbench.run.ray_session")
    if session is not None:
        session.stop_ray_started_here()
    # logging registered its hook when it was imported, before this one: it would run later.
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        # A reader that went away, a stream closed: nothing more can reach them.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(ending[0])  # not Ray: the standard library's documented exit without cleanup


if __name__ == "__main__":
    entry()
