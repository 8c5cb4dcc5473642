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
    return _exit_code(summary)


def _exit_code(summary: object) -> int:
    """0 done, 1 every trial failed, 130 interrupted (as a shell reports Ctrl-C)."""
    from workbench.launch import RunSummary

    assert isinstance(summary, RunSummary)
    if summary.interrupted:
        return 130
    return 1 if summary.errors and summary.errors == len(summary.trials) else 0


def _cmd_resume(args: argparse.Namespace) -> int:
    from workbench.launch import (
        RESOLVED_FILE,
        find_results_dir,
        population_statuses,
        resume,
    )
    from workbench.resolve import load_and_resolve

    results_dir = find_results_dir(args.target)
    resolved = load_and_resolve(results_dir / RESOLVED_FILE, check_results=False)
    statuses = population_statuses(results_dir)
    errored = [t for t, s in statuses.items() if s == "ERROR"]
    if (
        statuses
        and all(s in ("TERMINATED", "ERROR") for s in statuses.values())
        and not (errored and args.restart_errored)
    ):
        print(
            f"Population {resolved.experiment.name} in {results_dir} has finished "
            f"({len(statuses)} trials, {len(errored)} errored); nothing to resume."
            + (" --restart-errored runs the errored ones again." if errored else "")
        )
        return 0
    summary = resume(resolved, restart_errored=args.restart_errored, address=args.address)
    print("\n".join(summary.lines()))
    return _exit_code(summary)


def _store(args: argparse.Namespace) -> tuple[str, object]:
    from workbench.inspection import client_for
    from workbench.ui import resolve_store

    uri = resolve_store(args.store)
    return uri, client_for(uri)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def _num(value: float | int | None, digits: int = 4) -> str:
    import math

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.{digits}g}"
    return str(int(value))


def _when(ms: int | None) -> str:
    import datetime as dt

    if not ms:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def _cmd_runs(args: argparse.Namespace) -> int:
    from workbench import inspection

    uri, client = _store(args)
    if args.experiment is None:
        found = inspection.populations(client)
        for pop in found:
            pop.trials = inspection.trial_runs(client, pop)
        if args.json:
            print(json.dumps([_population_json(p) for p in found], indent=2))
            return 0
        if not found:
            print(f"No populations in {uri} yet.")
            return 0
        rows = []
        for pop in found:
            best = pop.best()
            rows.append(
                [
                    pop.experiment,
                    pop.name,
                    pop.status,
                    str(len(pop.trials)),
                    _num(best.best_return if best else None),
                    best.name if best else "-",
                    _when(pop.start_ms),
                    pop.run_id,
                ]
            )
        print(f"Populations in {uri}:")
        headers = ["experiment", "population", "status", "trials", "best return", "best trial"]
        print(_table([*headers, "started", "run id"], rows))
        return 0
    pop = inspection.find_population(client, args.experiment, uri)
    board = inspection.leaderboard(pop)
    if args.json:
        print(json.dumps(_population_json(pop), indent=2))
        return 0
    hps = sorted({k for t in board for k in t.hyperparameters()})
    rows = [
        [
            str(rank),
            t.name,
            t.status,
            str(t.iteration),
            str(t.env_steps),
            _num(t.best_return),
            _num(t.last_return),
            t.tags.get("workbench.cloned_from", "-"),
            *(_num(v) if isinstance(v, float) else str(v) for v in t.hyperparameters().values()),
        ]
        for rank, t in enumerate(board, 1)
    ]
    print(f"Population {pop.name} ({pop.experiment}, {pop.status}, run {pop.run_id}):")
    headers = ["#", "trial", "status", "iter", "env steps", "best return", "last return"]
    print(_table([*headers, "cloned from", *hps], rows))
    return 0


def _population_json(pop: object) -> dict[str, object]:
    from workbench.inspection import Population, leaderboard

    assert isinstance(pop, Population)
    return {
        "run_id": pop.run_id,
        "name": pop.name,
        "experiment": pop.experiment,
        "status": pop.status,
        "start_ms": pop.start_ms,
        "end_ms": pop.end_ms,
        "results_dir": pop.results_dir,
        "trials": [
            {
                "run_id": t.run_id,
                "name": t.name,
                "trial_id": t.trial_id,
                "status": t.status,
                "iteration": t.iteration,
                "env_steps": t.env_steps,
                "best_return": None if t.best_return != t.best_return else t.best_return,
                "last_return": None if t.last_return != t.last_return else t.last_return,
                "cloned_from": t.tags.get("workbench.cloned_from"),
                "hyperparameters": t.hyperparameters(),
            }
            for t in leaderboard(pop)
        ],
    }


def _cmd_show(args: argparse.Namespace) -> int:
    from workbench import inspection
    from workbench.schema import RETURN_METRIC

    uri, client = _store(args)
    trial = inspection.find_trial(client, args.run, args.population, uri)
    parent = client.get_run(trial.tags["mlflow.parentRunId"])  # type: ignore[attr-defined]
    pop = inspection.find_population(client, parent.info.run_id, uri)
    records = inspection.lineage_records(client, pop)
    segments, stitched = inspection.trial_ancestry(client, pop, records, trial)
    schedule = inspection.step_schedule(client, trial)
    if args.json:
        print(
            json.dumps(
                {
                    "run_id": trial.run_id,
                    "name": trial.name,
                    "trial_id": trial.trial_id,
                    "status": trial.status,
                    "population": pop.name,
                    "params": trial.params,
                    "metrics": trial.metrics,
                    "best_return": None
                    if trial.best_return != trial.best_return
                    else trial.best_return,
                    "error": trial.tags.get("workbench.error"),
                    "schedule": [{"step": s, "iteration": i, "values": v} for s, i, v in schedule],
                    "ancestry": [
                        {
                            "trial_id": seg.trial_id,
                            "name": seg.trial_name,
                            "first_iteration": seg.first_iteration,
                            "last_iteration": seg.last_iteration,
                        }
                        for seg in segments
                    ],
                    "stitched_schedule": stitched,
                },
                indent=2,
                default=str,
            )
        )
        return 0
    print(f"Trial {trial.name} ({trial.trial_id}) of population {pop.name}: {trial.status}")
    print(f"  run id {trial.run_id}; started {_when(trial.start_ms)}, ended {_when(trial.end_ms)}")
    if "workbench.error" in trial.tags:
        print("  error: " + trial.tags["workbench.error"].strip().splitlines()[-1])
    print("Initial hyperparameters (params):")
    for key, value in sorted(trial.params.items()):
        print(f"  {key} = {value}")
    print("Final metrics:")
    for key in sorted(trial.metrics):
        if not key.startswith("hp/"):
            print(f"  {key} = {_num(trial.metrics[key], 6)}")
    print(f"  best {RETURN_METRIC} = {_num(trial.best_return, 6)}")
    print("Hyperparameter schedule (step, iteration: values where they changed):")
    for step, iteration, values in schedule:
        shown = ", ".join(f"{k}={_num(v)}" for k, v in values.items())
        print(f"  step {step:>4}, iteration {iteration:>4}: {shown}")
    print("Ancestry (the training its final policy went through):")
    for seg in segments:
        print(f"  {seg.trial_name}: iterations {seg.first_iteration}-{seg.last_iteration}")
    return 0


def _cmd_lineage(args: argparse.Namespace) -> int:
    from workbench import inspection
    from workbench.lineage import render_tree

    uri, client = _store(args)
    pop = inspection.find_population(client, args.experiment, uri)
    records = inspection.lineage_records(client, pop)
    best = pop.best()
    trials = {t.trial_id: (t.name, t.iteration) for t in pop.trials}
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=2, default=str))
    else:
        print(f"Lineage of population {pop.name} ({len(records)} exploits):")
        print(render_tree(trials, records, best.trial_id if best else None))
    if args.png:
        from workbench.plots import lineage_tree

        path = lineage_tree(
            trials, records, args.png, best=best.trial_id if best else None, title=pop.name
        )
        print(f"Lineage tree written to {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _cmd_ui(args: argparse.Namespace) -> int:
    from workbench.ui import resolve_store, serve_forever

    return serve_forever(resolve_store(args.store), "127.0.0.1", args.port)


def _add_store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="PATH|URI",
        help="MLflow store: a results folder, an mlflow.db file or a tracking URI "
        "(default: MLFLOW_TRACKING_URI, else results/mlflow.db)",
    )


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

    resume = commands.add_parser(
        "resume", help="continue a stopped or failed population (same runs, same config)"
    )
    resume.add_argument("target", metavar="RESULTS_DIR|EXPERIMENT_NAME")
    resume.add_argument(
        "--restart-errored",
        action="store_true",
        help="start errored trials from scratch (default: from their last checkpoint)",
    )
    resume.add_argument("--address", help="join this Ray cluster (default: RAY_ADDRESS or local)")
    resume.set_defaults(handler=_cmd_resume)

    runs = commands.add_parser(
        "runs", help="populations in the MLflow store, or one population's leaderboard"
    )
    runs.add_argument(
        "experiment",
        nargs="?",
        metavar="EXPERIMENT",
        help="MLflow experiment, population name or parent run id (its newest population)",
    )
    _add_store(runs)
    runs.add_argument("--json", action="store_true", help="machine-readable output")
    runs.set_defaults(handler=_cmd_runs)

    show = commands.add_parser(
        "show", help="one trial: params, final metrics, hyperparameter schedule, ancestry"
    )
    show.add_argument("run", metavar="RUN", help="run id, or trial name (PPO_00003) / trial id")
    show.add_argument(
        "--population", help="population or experiment of a trial name (default: newest)"
    )
    _add_store(show)
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(handler=_cmd_show)

    lineage = commands.add_parser("lineage", help="who cloned whom in a PBT population")
    lineage.add_argument("experiment", metavar="EXPERIMENT", nargs="?")
    lineage.add_argument("--png", metavar="FILE", help="also draw the tree to this PNG")
    _add_store(lineage)
    lineage.add_argument("--json", action="store_true", help="machine-readable output")
    lineage.set_defaults(handler=_cmd_lineage)

    ui = commands.add_parser("ui", help="start the MLflow UI on 127.0.0.1 for the store")
    _add_store(ui)
    ui.add_argument("--port", type=int, help="port (default: a free one)")
    ui.set_defaults(handler=_cmd_ui)
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
