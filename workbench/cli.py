"""The `workbench` command line: a thin face over functions that tests call directly.

Exit codes: 0 success, 2 bad input (argparse's convention, kept for our own checks).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from workbench import __version__
from workbench.environments import describe_environments


def _cmd_envs(args: argparse.Namespace) -> int:
    for line in describe_environments():
        print(line)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="workbench",
        description="Population-based training of RLlib agents on fast C++ environments.",
    )
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    envs = commands.add_parser("envs", help="list the sim_ext environments and their spaces")
    envs.set_defaults(handler=_cmd_envs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
