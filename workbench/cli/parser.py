"""The `workbench` parser: the command families' subcommands in the order `workbench
--help` lists them, and `completion`, which prints shtab's script for this parser.

Building it imports no heavy library (each handler imports its own: `workbench.cli.main`).
"""

from __future__ import annotations

import argparse

from workbench import __version__
from workbench.cli import experiment_commands, policy_commands, view_commands
from workbench.cli.options import Commands

SHELLS = ("bash", "zsh", "fish", "tcsh")


def _cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    print(shtab.complete(build_parser(), shell=args.shell))
    return 0


def build_parser() -> argparse.ArgumentParser:
    return _build()[0]


def _build() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(
        prog="workbench",
        description="Population-based training of RLlib agents on fast C++ environments.",
        epilog="`workbench COMMAND --help` shows a command's options and examples; "
        "`workbench completion bash` prints a completion script for the shell.",
    )
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    commands = Commands(parser)
    # The families in the order `workbench --help` lists the commands.
    experiment_commands.add_commands(commands)
    view_commands.add_population_commands(commands)
    policy_commands.add_commands(commands)
    view_commands.add_store_commands(commands)
    completion = commands.add(
        "completion",
        "print a shell completion script (commands, options, file names)",
        [
            'eval "$(workbench completion bash)"     # in ~/.bashrc',
            "workbench completion zsh > ~/.zfunc/_workbench   # a folder on zsh's fpath",
        ],
        handler=_cmd_completion,
    )
    completion.add_argument("shell", choices=SHELLS)
    return parser, commands.parsers
