"""The `workbench` command line: a thin face over functions that tests call directly.

Exit codes: 0 success, 1 the run failed, 2 bad input (nothing was started).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from workbench import __version__
from workbench.environments import describe_environments
from workbench.errors import ExperimentError


def _cmd_envs(args: argparse.Namespace) -> int:
    for line in describe_environments():
        print(line)
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from workbench.schema import json_schema

    text = json.dumps(json_schema(), indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
        print(f"JSON Schema written to {args.output}")
    else:
        print(text)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from workbench.resolve import load_and_resolve

    failed = False
    for file in args.files:
        try:
            resolved = load_and_resolve(file, check_results=False)
        except ExperimentError as err:
            print(err, file=sys.stderr)
            failed = True
            continue
        exp = resolved.experiment
        print(
            f"{file}: ok ({exp.algorithm} on {exp.env.id}, {exp.scheduler.type} over "
            f"{len(resolved.search_space)} hyperparameters, population {exp.population})"
        )
    return ExperimentError.exit_code if failed else 0


def _cmd_run(args: argparse.Namespace) -> int:
    from workbench.resolve import describe, load_and_resolve

    resolved = load_and_resolve(args.file, args.set or [])
    if args.dry_run:
        print(yaml.safe_dump(describe(resolved), sort_keys=False).rstrip())
        exp = resolved.experiment
        grid = 1
        for spec in resolved.search_space.values():
            if spec.kind == "grid":
                grid *= len(spec.grid or [])
        print(
            f"\nWould start {exp.population * grid} trials of {exp.algorithm} on {exp.env.id} "
            f"({exp.population} samples x {grid} grid points), "
            f"{exp.max_concurrent or 'as many as fit'} at a time, "
            f"results in {resolved.results_dir}"
        )
        return 0
    from workbench.launch import run

    summary = run(resolved, address=args.address)
    print("\n".join(summary.lines()))
    return 1 if summary.errors and summary.errors == len(summary.trials) else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="workbench",
        description="Population-based training of RLlib agents on fast C++ environments.",
    )
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    envs = commands.add_parser("envs", help="list the sim_ext environments and their spaces")
    envs.set_defaults(handler=_cmd_envs)

    schema = commands.add_parser("schema", help="print the JSON Schema of experiment files")
    schema.add_argument("-o", "--output", help="write it to this file")
    schema.set_defaults(handler=_cmd_schema)

    validate = commands.add_parser("validate", help="check experiment files (nothing runs)")
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.set_defaults(handler=_cmd_validate)

    run = commands.add_parser("run", help="run an experiment's population search")
    run.add_argument("file", metavar="FILE")
    run.add_argument(
        "--set",
        action="append",
        metavar="KEY.PATH=VALUE",
        help="override a field (repeatable), e.g. --set stop.iterations=20",
    )
    run.add_argument(
        "--dry-run", action="store_true", help="print the resolved config and the trials; no Ray"
    )
    run.add_argument("--address", help="join this Ray cluster (default: RAY_ADDRESS or local)")
    run.set_defaults(handler=_cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except ExperimentError as err:
        print(err, file=sys.stderr)
        return ExperimentError.exit_code


if __name__ == "__main__":
    sys.exit(main())
