"""The `workbench` command line: a thin face over functions that tests call directly.

Exit codes: 0 success, 1 the run failed, 2 bad input (nothing was started).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from workbench import __version__
from workbench.errors import ExperimentError
from workbench.experiment.environments import describe_environments

if TYPE_CHECKING:
    from workbench.analysis.populations import Population, TrialRun
    from workbench.analysis.timeline import Capture


def _cmd_envs(args: argparse.Namespace) -> int:
    for line in describe_environments():
        print(line)
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from workbench.experiment.schema import json_schema

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
            f"{len(resolved.search_space)} hyperparameters, population {exp.population})"
        )
    return ExperimentError.exit_code if failed else 0


def _cmd_run(args: argparse.Namespace) -> int:
    from workbench.experiment.resolve import describe, load_and_resolve

    resolved = load_and_resolve(args.file, args.set or [])
    if args.dry_run:
        print(yaml.safe_dump(describe(resolved), sort_keys=False).rstrip())
        print(f"# {resolved.defaults.summary()}")
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
    from workbench.run.launch import run

    print(resolved.defaults.summary())
    summary = run(resolved, address=args.address, dashboard=args.dashboard)
    print("\n".join(summary.lines()))
    return _exit_code(summary)


def _cmd_plan(args: argparse.Namespace) -> int:
    from workbench.experiment.resolve import load_and_resolve
    from workbench.plan.capacity import make_plan
    from workbench.plan.resources import live_cluster, parse_cluster, this_machine

    resolved = load_and_resolve(args.file, args.set or [], check_results=False)
    if args.cluster:
        try:
            cluster = parse_cluster(args.cluster)
        except ValueError as err:
            raise ExperimentError.single(args.file, "--cluster", str(err)) from None
    elif args.address or os.environ.get("RAY_ADDRESS"):
        import ray

        ray.init(address=args.address or os.environ["RAY_ADDRESS"], log_to_driver=False)
        cluster = live_cluster(args.address)
    else:
        cluster = this_machine()
    plan = make_plan(resolved, cluster, probe=args.probe)
    if args.json:
        print(json.dumps(plan.to_json(), indent=2))
    else:
        print("\n".join(plan.lines()))
    if not plan.fits:
        print("\n".join(str(p) for p in plan.problems), file=sys.stderr)
        return ExperimentError.exit_code
    return 0


def _exit_code(summary: object) -> int:
    """0 done, 1 every trial failed, 130 interrupted (as a shell reports Ctrl-C)."""
    from workbench.run.summary import RunSummary

    assert isinstance(summary, RunSummary)
    if summary.interrupted:
        return 130
    return 1 if summary.errors and summary.errors == len(summary.trials) else 0


def _cmd_resume(args: argparse.Namespace) -> int:
    from workbench.names import RESOLVED_FILE
    from workbench.run.results_folder import find_results_dir, population_statuses

    results_dir = find_results_dir(args.target)  # before the heavy imports: a typo fails fast
    from workbench.experiment.resolve import load_saved
    from workbench.run.launch import resume

    resolved = load_saved(results_dir / RESOLVED_FILE)
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
    from workbench.tracking.store import client_for, resolve_store

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


def _shown(value: object) -> str:
    if value is None:
        return "-"
    return _num(value) if isinstance(value, float) else str(value)


def _when(ms: int | None) -> str:
    import datetime as dt

    if not ms:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def _cmd_runs(args: argparse.Namespace) -> int:
    from workbench.analysis.populations import find_population, leaderboard, populations, trial_runs

    uri, client = _store(args)
    if args.experiment is None:
        found = populations(client)
        for pop in found:
            pop.trials = trial_runs(client, pop)
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
    pop = find_population(client, args.experiment, uri)
    board = leaderboard(pop)
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
            _num(t.metrics.get("eval/return_mean")),
            t.tags.get("workbench.cloned_from", "-"),
            *(_shown(t.hyperparameters().get(k)) for k in hps),
        ]
        for rank, t in enumerate(board, 1)
    ]
    print(f"Population {pop.name} ({pop.experiment}, {pop.status}, run {pop.run_id}):")
    headers = ["#", "trial", "status", "iter", "env steps", "best return", "last return"]
    print(_table([*headers, "eval return", "cloned from", *hps], rows))
    return 0


def _population_json(pop: object) -> dict[str, object]:
    from workbench.analysis.populations import Population, leaderboard

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
                "eval_return": t.metrics.get("eval/return_mean"),
                "hyperparameters": t.hyperparameters(),
            }
            for t in leaderboard(pop)
        ],
    }


def _cmd_show(args: argparse.Namespace) -> int:
    from workbench.analysis.populations import (
        find_population,
        find_trial,
        lineage_records,
        step_schedule,
        trial_ancestry,
    )
    from workbench.names import RETURN_METRIC

    uri, client = _store(args)
    trial = find_trial(client, args.run, args.population, uri)
    parent = client.get_run(trial.tags["mlflow.parentRunId"])  # type: ignore[attr-defined]
    pop = find_population(client, parent.info.run_id, uri)
    records = lineage_records(client, pop)
    segments, stitched = trial_ancestry(client, pop, records, trial)
    schedule = step_schedule(client, trial)
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
    from workbench.analysis.lineage import render_tree
    from workbench.analysis.populations import find_population, lineage_records

    uri, client = _store(args)
    pop = find_population(client, args.experiment, uri)
    records = lineage_records(client, pop)
    best = pop.best()
    trials = {t.trial_id: (t.name, t.iteration) for t in pop.trials}
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=2, default=str))
    else:
        print(f"Lineage of population {pop.name} ({len(records)} exploits):")
        print(render_tree(trials, records, best.trial_id if best else None))
    if args.png:
        from workbench.analysis.plots import lineage_tree

        path = lineage_tree(
            trials, records, args.png, best=best.trial_id if best else None, title=pop.name
        )
        print(f"Lineage tree written to {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _diagnosis_target(args: argparse.Namespace) -> tuple[str, Any, Population, list[TrialRun]]:
    """(store URI, client, population, trials) for `workbench diagnose`'s TARGET: a
    results folder, an experiment/population name or parent run id, or one trial."""
    from workbench.analysis.populations import find_population, find_trial, populations, trial_runs
    from workbench.names import RESOLVED_FILE
    from workbench.tracking.store import client_for, resolve_store

    target = args.target
    folder = Path(target) if target is not None else None
    is_folder = folder is not None and (folder / RESOLVED_FILE).is_file()
    uri = resolve_store(args.store if args.store or not is_folder else str(folder))
    client = client_for(uri)
    if is_folder:
        assert folder is not None
        wanted = str(folder.resolve())
        found = [p for p in populations(client) if p.results_dir == wanted]
        pop = found[0] if found else find_population(client, folder.name, uri)
        if found:
            pop.trials = trial_runs(client, pop)
        return uri, client, pop, list(pop.trials)
    try:
        pop = find_population(client, target, uri)
        return uri, client, pop, list(pop.trials)
    except ExperimentError as not_population:
        try:
            trial = find_trial(client, target, args.population, uri)
        except ExperimentError:
            raise ExperimentError.single(
                uri,
                "",
                f"{target!r} is neither a results folder, a population, an experiment nor a "
                f"trial in the store ({not_population.problems[0].message})",
            ) from None
        parent = client.get_run(trial.tags["mlflow.parentRunId"])  # type: ignore[attr-defined]
        pop = find_population(client, parent.info.run_id, uri)
        return uri, client, pop, [trial]


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from workbench.analysis.diagnosis import diagnose
    from workbench.analysis.populations import metric_histories
    from workbench.trial.time_split import PREFIX, TimeSplit, steady, total

    capture = None
    if args.timeline:
        capture = _capture_timeline(args)
        for line in capture.lines():
            print(line, file=sys.stderr if args.json else sys.stdout)
    uri, client, pop, trials = _diagnosis_target(args)
    prefix = PREFIX + "/"
    reports = []
    shares: dict[str, list[tuple[float, float, float, float, float]]] = {}
    steady_splits = []
    for trial in trials:
        history = metric_histories(client, trial, prefix)
        splits = [TimeSplit.from_metrics(m) for m in history.values()]
        used, left_out = steady(splits)
        steady_splits.extend(used)
        report = diagnose(f"Trial {trial.name}", total(used), left_out)
        reports.append(report)
        shares[trial.name] = [
            (
                float(step),
                s.sampling_fraction,
                s.learner_fraction,
                s.sync_fraction,
                s.rest_fraction,
            )
            for step, s in zip(history, splits, strict=True)
            if s.iteration_s > 0
        ]
    population = None
    if len(trials) > 1:
        population = diagnose(
            f"Population {pop.name} ({len(trials)} trials together)",
            total(steady_splits),
        )
        counts: dict[str, int] = {}
        for report in reports:
            counts[report.verdict] = counts.get(report.verdict, 0) + 1
        population.evidence.insert(
            0, "trials: " + ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
        )
    if args.png:
        from workbench.analysis.plots import time_split

        path = time_split(
            shares,
            args.png,
            title=f"{pop.name}: where each iteration's time goes",
            subtitles={t.name: r.verdict for t, r in zip(trials, reports, strict=True)},
        )
        print(f"Time split written to {path}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(
            json.dumps(
                {
                    "store": uri,
                    "population": pop.name,
                    "run_id": pop.run_id,
                    "trials": [r.to_json() for r in reports],
                    "population_diagnosis": population.to_json() if population else None,
                    "timeline": str(capture.path) if capture else None,
                },
                indent=2,
            )
        )
        return 0
    print(f"Where the time goes in population {pop.name} ({pop.experiment}, {pop.status}):")
    if not any(r.split.iterations for r in reports):
        print(
            "  no iteration has timing figures yet (workbench/* metrics: they come with "
            "every result of a trial run by this version of the workbench)"
        )
    for report in reports:
        print("\n".join(report.lines()))
    if population is not None:
        print("\n".join(population.lines()))
    print(
        "Figures: seconds per iteration recovered from RLlib's EMA timers (coeff 0.01: "
        "x_n = (E_n - 0.99 E_(n-1)) / 0.01, exact with one training_step per iteration), "
        "summed over the iterations used; shares of time_this_iter_s. Runners needed = the "
        "learner's consumption rate / one runner's sampling rate. See docs/diagnosis.md."
    )
    return 0


def _capture_timeline(args: argparse.Namespace) -> Capture:
    from workbench.analysis.timeline import NothingRunning, capture, session_address
    from workbench.names import RESOLVED_FILE

    address = args.address
    if address is None:
        folder = Path(args.target) if args.target else None
        if folder is None or not (folder / RESOLVED_FILE).is_file():
            # An experiment or run name: its population's results folder, from MLflow.
            uri, _client, pop, _trials = _diagnosis_target(args)
            folder = Path(pop.results_dir) if pop.results_dir else None
            if folder is None:
                raise NothingRunning.single(
                    uri, "--timeline", f"population {pop.name} records no results folder"
                )
        address = session_address(folder)
    return capture(address, Path(args.timeline), args.timeline_seconds)


def _key_values(items: list[str] | None, option: str, source: str) -> dict[str, object]:
    """``KEY=VALUE`` options (the value read as YAML: 3, 1e-3, true, text)."""
    out: dict[str, object] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ExperimentError.single(
                source, option, f"{item!r} is not KEY=VALUE (for example substeps=2)"
            )
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError:
            out[key.strip()] = text
    return out


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


def _cmd_eval(args: argparse.Namespace) -> int:
    from workbench.policy.checkpoint import check_env, read_checkpoint
    from workbench.policy.evaluate import evaluate_checkpoint
    from workbench.policy.locate import locate, log_evaluation

    source = locate(args.run, store=args.store, population=args.population)
    checkpoint = read_checkpoint(source.checkpoint)
    check_env(checkpoint, args.env, args.run)
    overrides = _key_values(args.env_config, "--env-config", args.run)
    result = evaluate_checkpoint(
        checkpoint,
        episodes=args.episodes,
        deterministic=not args.stochastic,
        seed=args.seed,
        env_config=overrides,
    )
    logged = "not logged to MLflow (" + ("--no-log)" if args.no_log else "no trial run found)")
    if source.run_id and source.uri and not args.no_log:
        from workbench.tracking.store import client_for

        log_evaluation(client_for(source.uri), source.run_id, result)
        logged = f"logged to MLflow run {source.run_id} as eval/* ({source.uri})"
    if args.json:
        print(
            json.dumps(
                {
                    "checkpoint": str(checkpoint.path),
                    "training_iteration": checkpoint.training_iteration,
                    "env_id": result.env_id,
                    "env_config": result.env_config,
                    "deterministic": result.deterministic,
                    "seed": result.seed,
                    **result.stats(),
                    "returns": result.returns,
                    "lengths": result.lengths,
                    "run_id": result.run_id,
                },
                indent=2,
            )
        )
        return 0
    print(f"Evaluated {source.label}")
    if source.label != str(checkpoint.path):
        print(f"  checkpoint {checkpoint.path}")
    print(f"  saved at iteration {checkpoint.training_iteration}")
    print(f"  {result.summary()}")
    for note in [*result.notes, logged]:
        print(f"  {note}")
    return 0


def _cmd_export_schedule(args: argparse.Namespace) -> int:
    from workbench.analysis.schedule import export_schedule
    from workbench.experiment.resolve import load_and_resolve

    output = Path(args.output)
    if output.exists():
        raise ExperimentError.single(str(output), "-o", "exists; give a new file name")
    uri, client = _store(args)
    exported = export_schedule(client, uri, args.experiment, args.trial)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(exported.text())
    try:
        resolved = load_and_resolve(output, check_results=False)
    except ExperimentError:
        output.unlink()
        raise
    steps = exported.data["scheduler"]["schedule"]
    print(
        f"Schedule of {exported.trial} (population {exported.population}) written to "
        f"{output}: {len(steps)} steps over {exported.data['stop']['iterations']} iterations"
    )
    print(
        "Ancestry: "
        + ", ".join(
            f"{s.trial_name} {s.first_iteration}-{s.last_iteration}" for s in exported.segments
        )
    )
    for step in steps:
        shown = ", ".join(
            f"{k}={_num(v) if isinstance(v, int | float) else v}" for k, v in step["values"].items()
        )
        print(f"  iteration {step['iteration']:>4}: {shown}")
    print(f"Replay it with `workbench run {output}` (results in {resolved.results_dir})")
    return 0


def _cmd_export_policy(args: argparse.Namespace) -> int:
    from workbench.policy.checkpoint import check_env, read_checkpoint
    from workbench.policy.export import export_policy
    from workbench.policy.locate import locate

    source = locate(args.run, store=args.store, population=args.population)
    checkpoint = read_checkpoint(source.checkpoint)
    check_env(checkpoint, args.env, args.run)
    exported = export_policy(checkpoint, Path(args.output))
    print("\n".join(exported.lines()))
    return 0


def _cmd_ui(args: argparse.Namespace) -> int:
    from workbench.analysis.ui import serve_forever
    from workbench.tracking.store import resolve_store

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
    run.add_argument(
        "--dashboard",
        action="store_true",
        help="start Ray's dashboard on 127.0.0.1 and print its address (needs the "
        "'dashboard' extra: ray[default])",
    )
    run.set_defaults(handler=_cmd_run)

    plan = commands.add_parser(
        "plan",
        help="one trial's placement group, how many trials fit on a cluster, how long the "
        "population queues (nothing runs)",
    )
    plan.add_argument("file", metavar="FILE")
    plan.add_argument(
        "--set", action="append", metavar="KEY.PATH=VALUE", help="override a field (repeatable)"
    )
    where = plan.add_mutually_exclusive_group()
    where.add_argument("--address", help="a running Ray cluster (default: RAY_ADDRESS)")
    where.add_argument(
        "--cluster",
        action="append",
        metavar="cpus=N,gpus=M[,nodes=K]",
        help="the cluster as numbers, one node shape per option (default: this machine)",
    )
    plan.add_argument(
        "--probe",
        action="store_true",
        help="measure sampling and learning rates here for a few seconds (default: estimate)",
    )
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.set_defaults(handler=_cmd_plan)

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

    diagnose = commands.add_parser(
        "diagnose",
        help="where the time goes: sampling, learning, weight sync; the bottleneck per trial "
        "and for the population, and what to change",
    )
    diagnose.add_argument(
        "target",
        nargs="?",
        metavar="RESULTS_DIR|EXPERIMENT|RUN",
        help="a results folder, an MLflow experiment / population name / parent run id, or "
        "one trial (run id or name) (default: the newest population)",
    )
    diagnose.add_argument(
        "--population", help="population or experiment of a trial name (default: newest)"
    )
    diagnose.add_argument("--png", metavar="FILE", help="draw the time split over iterations")
    diagnose.add_argument(
        "--timeline",
        metavar="FILE",
        help="also write a Chrome-trace timeline (ray.timeline) of a short window of the "
        "population while it runs",
    )
    diagnose.add_argument(
        "--timeline-seconds",
        type=float,
        default=10.0,
        metavar="S",
        help="the window --timeline records (default 10)",
    )
    diagnose.add_argument(
        "--address",
        help="--timeline: the Ray cluster the population joined (default: its local Ray, "
        "from the results folder)",
    )
    _add_store(diagnose)
    diagnose.add_argument("--json", action="store_true", help="machine-readable output")
    diagnose.set_defaults(handler=_cmd_diagnose)

    policy_ref = {
        "metavar": "RUN|CHECKPOINT",
        "help": "an MLflow trial run (run id, or trial name such as PPO_00003: its newest "
        "checkpoint), a checkpoint folder, or a trial folder (its newest checkpoint)",
    }
    evaluate = commands.add_parser(
        "eval", help="roll out a trained policy (no Tune) and log eval/* to its MLflow run"
    )
    evaluate.add_argument("run", **policy_ref)  # type: ignore[arg-type]
    evaluate.add_argument(
        "--episodes", type=_positive_int, default=10, help="episodes (default 10)"
    )
    evaluate.add_argument(
        "--stochastic",
        action="store_true",
        help="sample the policy's actions (default: deterministic, argmax / mean; DQN "
        "acts greedily either way)",
    )
    evaluate.add_argument(
        "--seed", type=int, default=0, help="episode k starts from seed + k (default 0)"
    )
    evaluate.add_argument(
        "--env", help="refuse unless the checkpoint was trained on this env id (a check)"
    )
    evaluate.add_argument(
        "--env-config",
        action="append",
        metavar="KEY=VALUE",
        help="change one of the env's settings (repeatable), e.g. --env-config substeps=2",
    )
    evaluate.add_argument(
        "--population", help="population or experiment of a trial name (default: newest)"
    )
    _add_store(evaluate)
    evaluate.add_argument("--no-log", action="store_true", help="do not log to MLflow")
    evaluate.add_argument("--json", action="store_true", help="machine-readable output")
    evaluate.set_defaults(handler=_cmd_eval)

    export_schedule = commands.add_parser(
        "export-schedule",
        help="write an experiment file that replays a PBT trial's hyperparameter schedule",
    )
    export_schedule.add_argument(
        "experiment",
        metavar="EXPERIMENT",
        nargs="?",
        help="MLflow experiment, population name or parent run id (default: the newest)",
    )
    export_schedule.add_argument(
        "--trial", help="trial name, trial id or run id (default: the best trial)"
    )
    export_schedule.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the experiment file to write"
    )
    _add_store(export_schedule)
    export_schedule.set_defaults(handler=_cmd_export_schedule)

    export_policy = commands.add_parser(
        "export-policy",
        help="write a policy as torch files (torch.export, TorchScript) loadable without Ray",
    )
    export_policy.add_argument("run", **policy_ref)  # type: ignore[arg-type]
    export_policy.add_argument(
        "-o", "--output", required=True, metavar="DIR", help="a new folder for the files"
    )
    export_policy.add_argument(
        "--env", help="refuse unless the checkpoint was trained on this env id (a check)"
    )
    export_policy.add_argument(
        "--population", help="population or experiment of a trial name (default: newest)"
    )
    _add_store(export_policy)
    export_policy.set_defaults(handler=_cmd_export_policy)

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
