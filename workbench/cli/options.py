"""How a command is declared, and what several commands share in their options.

`Commands.add` gives each subcommand its one-line help, a description and examples, and
the option sets several commands share (--store, --json, --population, --wide: each
spelled and explained once, as argparse parents). `path_arg` marks an argument as a file
or folder for the shell completion; POPULATION, --verbose's text and `positive_int` are
shared by commands of more than one family.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence
from typing import Any

# What shtab completes for a path (its shell functions for files and folders).
FILE = {
    "bash": "_shtab_compgen_files",
    "zsh": "_files",
    "tcsh": "f",
    "fish": "__fish_complete_path",
}
DIRECTORY = {
    "bash": "_shtab_compgen_dirs",
    "zsh": "_files -/",
    "tcsh": "d",
    "fish": "__fish_complete_directories",
}


def path_arg(action: argparse.Action, kind: dict[str, str] = FILE) -> argparse.Action:
    """Marks an argument as a path for the shell completion (shtab reads `complete`)."""
    action.complete = kind  # type: ignore[attr-defined]
    return action


VERBOSE = (
    "show Ray's, Tune's and MLflow's own logging on the console as well (it always goes to "
    "the results folder's workbench.log)"
)

# POPULATION as an argument of its own: the commands that take --population too.
POPULATION_ARG: dict[str, Any] = {
    "nargs": "?",
    "metavar": "POPULATION",
    "help": "the same as --population",
}


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


def _option_sets() -> dict[str, argparse.ArgumentParser]:
    """The options several commands share, each spelled and explained once (argparse
    parents): --store, --json, --population and --wide."""
    store = argparse.ArgumentParser(add_help=False)
    path_arg(
        store.add_argument(
            "--store",
            metavar="PATH|URI",
            help="MLflow store: a results folder, an mlflow.db file or a tracking URI "
            "(default: MLFLOW_TRACKING_URI, else results/mlflow.db, or mlflow.db or "
            "../mlflow.db from inside results/ or a population folder)",
        )
    )
    # A store that fails while the command reads it is one line (main), not a traceback.
    store.set_defaults(reads_store=True)
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument(
        "--json", action="store_true", help="machine-readable output: JSON on stdout"
    )
    population = argparse.ArgumentParser(add_help=False)
    population.add_argument(
        "--population",
        metavar="POPULATION",
        help="the population: its name, its MLflow experiment (the newest population there) "
        "or its parent run id (default: the newest population in the store)",
    )
    wide = argparse.ArgumentParser(add_help=False)
    wide.add_argument(
        "--wide",
        action="store_true",
        help="everything, however wide (default: tables wrap to the terminal's width, "
        "COLUMNS, else 100 columns, and long lists are cut)",
    )
    return {"store": store, "json": as_json, "population": population, "wide": wide}


class _HelpFormatter(argparse.HelpFormatter):
    """Descriptions wrapped line by line to the terminal; indented lines (examples,
    file contents) kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for line in text.splitlines():
            if not line.strip() or line.startswith(" "):
                out.append(indent + line)
            else:
                out += textwrap.wrap(
                    line, width, initial_indent=indent, subsequent_indent=indent
                ) or [indent]
        return "\n".join(out)


class Commands:
    """Adds the subcommands: each with its one-line help, a description and examples."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.group = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
        self.options = _option_sets()
        self.parsers: dict[str, argparse.ArgumentParser] = {}

    def add(
        self,
        name: str,
        help: str,
        examples: Sequence[str],
        *,
        handler: Any,
        description: str = "",
        shared: Sequence[str] = (),
    ) -> argparse.ArgumentParser:
        lines = "\n".join(f"  {e}" for e in examples)
        parser = self.group.add_parser(
            name,
            help=help,
            description=(help[0].upper() + help[1:] + ".")
            + (f"\n\n{description}" if description else ""),
            epilog=f"examples:\n{lines}",
            formatter_class=_HelpFormatter,
            parents=[self.options[s] for s in shared],
        )
        parser.set_defaults(handler=handler)
        self.parsers[name] = parser
        return parser
