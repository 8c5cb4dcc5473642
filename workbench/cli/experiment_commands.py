"""The commands that read experiment files and start or continue populations: envs,
schema, validate, run (with --dry-run), plan and resume, and their subcommands' options.

Each handler imports its command's package modules itself (`workbench.cli.main`): Ray
only once a run starts.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Annotated, Any

from workbench.cli.common import fit_width, print_json
from workbench.cli.format import counted, shown, table, terminal_width, wrapped
from workbench.cli.options import DIRECTORY, VERBOSE, Commands, path_arg
from workbench.errors import ExperimentError
from workbench.names import RESOLVED_FILE, SPOOL_FILE


def _cmd_envs(args: argparse.Namespace) -> int:
    from workbench.experiment.environments import describe_environments

    lines = describe_environments()
    pattern = re.compile(r"(\S+)\s+obs (.+?)\s+actions (.+?)\s+time limit (\S+)")
    rows = [list(m.groups()) for line in lines if (m := pattern.fullmatch(line))]
    if len(rows) < len(lines):  # not the columns this expects: as they are
        print("\n".join(lines))
        return 0
    # Every sim_ext space is float32: said once, above the table, not in each cell.
    if all("float32" in r[1] and "float64" not in r[1] + r[2] for r in rows):
        print("sim_ext environments (their Box spaces float32):")
        rows = [[r[0], *(c.replace(" float32", "") for c in r[1:3]), r[3]] for r in rows]
    print(table(["env", "observations", "actions", "time limit"], rows, width=fit_width(args)))
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from workbench.experiment.loading import json_schema

    text = json.dumps(json_schema(), indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
        print(f"JSON Schema written to {args.output}")
    else:
        print(text)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from workbench.experiment.resolve import load_and_resolve

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
            f"{counted(len(resolved.search_space), 'hyperparameter')}, population {exp.population})"
        )
    return ExperimentError.exit_code if failed else 0


def named(resolved: Any, name: str | None, *, reserve: bool = True) -> Any:
    """The resolved experiment as a new population: named ``name`` (--name: it must not
    hold a run yet), else after the experiment and the time it starts (`population_name`,
    which takes the name at once unless ``reserve`` is False). Its MLflow experiment stays
    the file's name (unless tracking.experiment says otherwise), so every population of a
    file is found under one experiment."""
    from pydantic import TypeAdapter, ValidationError

    from workbench.experiment.resolve import check_results_dir
    from workbench.experiment.schema import Experiment
    from workbench.run.results_folder import population_name

    exp = resolved.experiment
    storage = resolved.results_dir.parent
    where = str(resolved.file)
    if name is None:
        name = population_name(storage, exp.name, reserve=reserve)
    else:
        try:
            TypeAdapter(Annotated[str, Experiment.model_fields["name"]]).validate_python(name)
        except ValidationError as err:
            message = err.errors()[0]["msg"]
            raise ExperimentError.single(where, "--name", f"{name!r}: {message}") from None
        problems: list[Any] = []
        check_results_dir(storage / name, exp, where, problems)
        if problems:
            raise ExperimentError(problems)
    tracking = exp.tracking
    if tracking.experiment is None:
        tracking = tracking.model_copy(update={"experiment": exp.name})
    resolved.experiment = exp.model_copy(update={"name": name, "tracking": tracking})
    resolved.results_dir = storage / name
    return resolved


def _cmd_run(args: argparse.Namespace) -> int:
    from workbench.experiment.resolve import load_and_resolve

    resolved = load_and_resolve(args.file, args.set or [], check_results=False)
    new_storage = not resolved.results_dir.parent.exists()
    resolved = named(resolved, args.name, reserve=not args.dry_run)
    if args.dry_run:
        print("\n".join(_dry_run_lines(resolved, yaml_too=args.yaml, wide=args.wide)))
        return 0
    from workbench.run.launch import run
    from workbench.run.results_folder import unreserve

    print(resolved.defaults.summary())
    try:
        summary = run(
            resolved, address=args.address, dashboard=args.dashboard, verbose=args.verbose
        )
    except BaseException:
        if args.name is None:  # refused before it wrote anything: the name is free again
            unreserve(resolved.results_dir, storage_was_new=new_storage)
        raise
    print("\n".join(summary.lines()))
    return summary.exit_code


def _dry_run_lines(resolved: Any, *, yaml_too: bool, wide: bool) -> list[str]:
    """`run --dry-run`: the population it would start and its trials with their sampled
    values (drawn as the run draws them); the resolved experiment as YAML with --yaml."""
    import yaml

    from workbench.experiment.resolve import describe
    from workbench.experiment.search_checks import grid_points
    from workbench.run.dry_run import planned_trials

    exp = resolved.experiment
    out = []
    if yaml_too:
        out += [yaml.safe_dump(describe(resolved), sort_keys=False).rstrip(), ""]
    trials = planned_trials(resolved)
    grid = grid_points(resolved.search_space)
    total = exp.population * grid
    out += [
        f"Population {exp.name} (MLflow experiment {exp.tracking.experiment}): nothing "
        "started (--dry-run)",
        f"  results in {resolved.results_dir}",
        f"  {resolved.defaults.summary()}",
        f"Would start {counted(total, 'trial')} of {exp.algorithm} on {exp.env.id}"
        f"{f' ({exp.population} samples x {grid} grid points)' if grid > 1 else ''}, "
        f"{exp.max_concurrent or 'as many as fit'} at a time, under {exp.scheduler.type}:",
    ]
    names = list(resolved.search_space)
    rows = [[name, *(shown(values.get(n)) for n in names)] for name, values in trials]
    out.append(table(["trial", *names], rows, width=None if wide else terminal_width()))
    if len(trials) < total:
        # A model-based searcher (Optuna's TPE) suggests the rest from finished trials.
        out.append(
            f"(the first {len(trials)}; {exp.search.type} suggests the other "
            f"{total - len(trials)} from the results of finished trials)"
        )
    if not yaml_too:
        out.append("(--yaml also prints the resolved experiment)")
    return out


def _cmd_plan(args: argparse.Namespace) -> int:
    from workbench.experiment.resolve import load_and_resolve
    from workbench.plan.capacity import make_plan
    from workbench.plan.resources import cluster_for

    resolved = load_and_resolve(args.file, args.set or [], check_results=False)
    cluster = cluster_for(args.cluster or [], args.address, file=args.file)
    plan = make_plan(resolved, cluster, probe=args.probe)
    if args.json:
        print_json(plan.to_json())
    else:
        print("\n".join(wrapped(plan.lines(), fit_width(args))))
    if not plan.fits:
        print("\n".join(str(p) for p in plan.problems), file=sys.stderr)
        return ExperimentError.exit_code
    return 0


def _cmd_resume(args: argparse.Namespace) -> int:
    from workbench.run.budget import finished_note, overridden_stop_keys, trials_to_reopen
    from workbench.run.results_folder import (
        find_results_dir,
        nothing_to_resume,
        population_statuses,
    )

    results_dir = find_results_dir(args.target)  # before the heavy imports: a typo fails fast
    saved = results_dir / RESOLVED_FILE
    changed = overridden_stop_keys(args.set or [], str(saved))
    from workbench.experiment.resolve import load_saved

    resolved = load_saved(saved, args.set or [])
    statuses = population_statuses(results_dir)
    reopen = trials_to_reopen(results_dir, resolved.experiment.stop, changed, statuses, str(saved))
    done = (
        None
        if reopen
        else nothing_to_resume(
            results_dir, resolved.experiment.name, restart_errored=args.restart_errored
        )
    )
    if done is not None:
        if changed:
            raise ExperimentError.single(
                str(saved),
                sorted(changed)[0],
                f"nothing to resume under new stop rules: {done} --set extends only a "
                "budget that ended the population (stop.wall_time_s, "
                "stop.population_env_steps)",
            )
        print(done + finished_note(results_dir))
        return _write_spool(resolved)
    from workbench.run.launch import resume  # Ray, RLlib and MLflow: only to go on

    summary = resume(
        resolved,
        restart_errored=args.restart_errored,
        reopen=reopen,
        stop_changed=bool(changed),
        address=args.address,
        verbose=args.verbose,
    )
    print("\n".join(summary.lines()))
    return summary.exit_code


def _write_spool(resolved: Any) -> int:
    """A finished population's spooled MLflow writes (the store did not answer at its end),
    written now: no resume will (a resume writes them before it continues)."""
    if not resolved.experiment.tracking.enabled:
        return 0
    if not (resolved.results_dir / SPOOL_FILE).is_file():
        return 0
    from workbench.run.folder_lock import FolderLock
    from workbench.run.launch import tracking_target
    from workbench.tracking.spool import write_spool

    with FolderLock(resolved.results_dir, "resume"):
        written = write_spool(tracking_target(resolved))
    if written is None:
        return 0
    print(written.line())
    return 1 if written.left else 0


def add_commands(commands: Commands) -> None:
    """The subcommands envs, schema, validate, run, plan and resume."""
    add = commands.add

    add(
        "envs",
        "list the sim_ext environments with their spaces and time limits",
        ["workbench envs"],
        handler=_cmd_envs,
        shared=["wide"],
        description="Any Gymnasium id works as env.id too; these are the C++ ones.",
    )

    schema = add(
        "schema",
        "print the JSON Schema of experiment files (for an editor's completion and checks)",
        ["workbench schema -o workbench.schema.json"],
        handler=_cmd_schema,
        description="An experiment file whose first lines say\n"
        "  # yaml-language-server: $schema=../workbench.schema.json\n"
        "is checked and completed by editors with the YAML language server.",
    )
    path_arg(schema.add_argument("-o", "--output", metavar="FILE", help="write it to this file"))

    validate = add(
        "validate",
        "check experiment files the way `run` reads them; nothing runs",
        ["workbench validate experiments/*.yaml"],
        handler=_cmd_validate,
        description="Exit 2 with one line per problem (file, field, value, what is valid).",
    )
    path_arg(validate.add_argument("files", nargs="+", metavar="FILE"))

    run = add(
        "run",
        "run an experiment's population search",
        [
            "workbench run experiments/cartpole_pbt.yaml",
            "workbench run experiments/cartpole_pbt.yaml --name baseline --set stop.iterations=20",
            "workbench run experiments/cartpole_pbt.yaml --dry-run",
        ],
        handler=_cmd_run,
        shared=["wide"],
        description="Each run is a new population: its folder and MLflow run are named after "
        "the experiment and the time it started (cartpole_pbt_20260130-141502) unless --name "
        "says otherwise. `workbench resume NAME` continues one.",
    )
    path_arg(run.add_argument("file", metavar="FILE"))
    run.add_argument(
        "--set",
        action="append",
        metavar="KEY.PATH=VALUE",
        help="override a field (repeatable), e.g. --set stop.iterations=20",
    )
    run.add_argument(
        "--name",
        help="the population's name, for its results folder and MLflow run (default: the "
        "experiment's name and the time: NAME_YYYYMMDD-HHMMSS)",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="list the trials it would start, with their sampled values; nothing runs",
    )
    run.add_argument(
        "--yaml",
        action="store_true",
        help="with --dry-run: also print the resolved experiment as YAML",
    )
    run.add_argument("--address", help="join this Ray cluster (default: RAY_ADDRESS or local)")
    run.add_argument(
        "--dashboard",
        action="store_true",
        help="start Ray's dashboard on 127.0.0.1 and print its address (needs the "
        "'dashboard' extra: ray[default])",
    )
    run.add_argument("-v", "--verbose", action="store_true", help=VERBOSE)

    plan = add(
        "plan",
        "one trial's placement group, how many trials fit on a cluster and how long the "
        "population queues; nothing runs",
        [
            "workbench plan experiments/cartpole_pbt.yaml",
            "workbench plan experiments/cartpole_pbt.yaml --cluster cpus=16,gpus=1,nodes=4",
        ],
        handler=_cmd_plan,
        shared=["json", "wide"],
    )
    path_arg(plan.add_argument("file", metavar="FILE"))
    plan.add_argument(
        "--set", action="append", metavar="KEY.PATH=VALUE", help="override a field (repeatable)"
    )
    where = plan.add_mutually_exclusive_group()
    where.add_argument("--address", help="a running Ray cluster (default: RAY_ADDRESS)")
    where.add_argument(
        "--cluster",
        action="append",
        metavar="cpus=N,gpus=M[,nodes=K][,memory=SIZE]",
        help="the cluster as numbers, one node shape per option, memory e.g. 16GB "
        "(default: this machine)",
    )
    plan.add_argument(
        "--probe",
        action="store_true",
        help="measure sampling, learning and a trial process's start here (about 20 s; "
        "default: estimate)",
    )

    resume = add(
        "resume",
        "continue a stopped or failed population (same runs, same config)",
        [
            "workbench resume results/cartpole_pbt_20260130-141502",
            "workbench resume cartpole_pbt_20260130-141502 --restart-errored",
            "workbench resume cartpole_pbt --set stop.wall_time_s=1200",
        ],
        handler=_cmd_resume,
        description="Of a finished population, it writes the MLflow results spooled while "
        "the store did not answer. --set changes stop rules only: a larger stop.wall_time_s "
        "or stop.population_env_steps than the one that ended the population runs the "
        "trials it ended again, from their newest checkpoints.",
    )
    path_arg(resume.add_argument("target", metavar="RESULTS_DIR|NAME"), DIRECTORY)
    resume.add_argument(
        "--restart-errored",
        action="store_true",
        help="start errored trials from scratch (default: from their last checkpoint)",
    )
    resume.add_argument(
        "--set",
        action="append",
        metavar="stop.RULE=VALUE",
        help="change a stop rule (repeatable), e.g. --set stop.wall_time_s=1200 extends "
        "the wall-time budget, counted across sessions",
    )
    resume.add_argument("--address", help="join this Ray cluster (default: RAY_ADDRESS or local)")
    resume.add_argument("-v", "--verbose", action="store_true", help=VERBOSE)
