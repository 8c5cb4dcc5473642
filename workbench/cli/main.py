"""The `workbench` command line: a thin face over functions that tests call directly.

Every command parses its options, calls one function of the package and prints what it
returns (numbers, times and tables: `workbench.cli.format`).

Exit codes: 0 success, 1 the run failed, 2 bad input (nothing was started; for the
commands that read an MLflow store, also a store that cannot be read: one line).

Imports: each handler imports its command's package modules itself (the one place the
workbench imports inside functions), so that `workbench --help` and the light commands
start without Ray, torch, MLflow or matplotlib (keep `workbench --help` under ~0.3 s).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workbench import __version__
from workbench.cli.format import num, shown, table, when
from workbench.errors import ExperimentError, Interrupted
from workbench.experiment.environments import describe_environments
from workbench.names import RESOLVED_FILE, RETURN_METRIC, SPOOL_FILE
from workbench.tracking.store import open_store, read_failure, resolve_store


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
    from workbench.experiment.resolve import dry_run_lines, load_and_resolve

    resolved = load_and_resolve(args.file, args.set or [])
    if args.dry_run:
        print("\n".join(dry_run_lines(resolved)))
        return 0
    from workbench.run.launch import run

    print(resolved.defaults.summary())
    summary = run(resolved, address=args.address, dashboard=args.dashboard)
    print("\n".join(summary.lines()))
    return summary.exit_code


def _cmd_plan(args: argparse.Namespace) -> int:
    from workbench.experiment.resolve import load_and_resolve
    from workbench.plan.capacity import make_plan
    from workbench.plan.resources import cluster_for

    resolved = load_and_resolve(args.file, args.set or [], check_results=False)
    cluster = cluster_for(args.cluster or [], args.address, file=args.file)
    plan = make_plan(resolved, cluster, probe=args.probe)
    if args.json:
        print(json.dumps(plan.to_json(), indent=2))
    else:
        print("\n".join(plan.lines()))
    if not plan.fits:
        print("\n".join(str(p) for p in plan.problems), file=sys.stderr)
        return ExperimentError.exit_code
    return 0


def _cmd_resume(args: argparse.Namespace) -> int:
    from workbench.run.results_folder import find_results_dir, nothing_to_resume

    results_dir = find_results_dir(args.target)  # before the heavy imports: a typo fails fast
    from workbench.experiment.resolve import load_saved
    from workbench.run.launch import resume

    resolved = load_saved(results_dir / RESOLVED_FILE)
    done = nothing_to_resume(
        results_dir, resolved.experiment.name, restart_errored=args.restart_errored
    )
    if done is not None:
        print(done)
        return _write_spool(resolved)
    summary = resume(resolved, restart_errored=args.restart_errored, address=args.address)
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


def _store(args: argparse.Namespace) -> tuple[str, Any]:
    """--store as (tracking URI, read-only MLflow client), the store checked first."""
    return open_store(args.store)


def _cmd_runs(args: argparse.Namespace) -> int:
    from workbench.analysis.populations import find_population, leaderboard, populations

    uri, client = _store(args)
    if args.experiment is None:
        found = populations(client, with_trials=True)
        if args.json:
            print(json.dumps([p.to_json() for p in found], indent=2))
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
                    num(best.best_return if best else None),
                    best.name if best else "-",
                    when(pop.start_ms),
                    pop.run_id,
                ]
            )
        print(f"Populations in {uri}:")
        headers = ["experiment", "population", "status", "trials", "best return", "best trial"]
        print(table([*headers, "started", "run id"], rows))
        return 0
    pop = find_population(client, args.experiment, uri)
    if args.json:
        print(json.dumps(pop.to_json(), indent=2))
        return 0
    board = leaderboard(pop)
    hps = sorted({k for t in board for k in t.hyperparameters()})
    rows = [
        [
            str(rank),
            t.name,
            t.status,
            str(t.iteration),
            str(t.env_steps),
            num(t.best_return),
            num(t.last_return),
            num(t.eval_return),
            shown(t.cloned_from),
            *(shown(t.hyperparameters().get(k)) for k in hps),
        ]
        for rank, t in enumerate(board, 1)
    ]
    print(f"Population {pop.name} ({pop.experiment}, {pop.status}, run {pop.run_id}):")
    headers = ["#", "trial", "status", "iter", "env steps", "best return", "last return"]
    print(table([*headers, "eval return", "cloned from", *hps], rows))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from workbench.analysis.populations import trial_detail

    uri, client = _store(args)
    detail = trial_detail(client, args.run, args.population, uri)
    if args.json:
        print(json.dumps(detail.to_json(), indent=2, default=str))
        return 0
    trial = detail.trial
    print(
        f"Trial {trial.name} ({trial.trial_id}) of population {detail.population.name}: "
        f"{trial.status}"
    )
    print(f"  run id {trial.run_id}; started {when(trial.start_ms)}, ended {when(trial.end_ms)}")
    if trial.error is not None:
        print("  error: " + trial.error.strip().splitlines()[-1])
    print("Initial hyperparameters (params):")
    for key, value in sorted(trial.params.items()):
        print(f"  {key} = {value}")
    print("Final metrics:")
    for key in sorted(trial.metrics):
        if not key.startswith("hp/"):
            print(f"  {key} = {num(trial.metrics[key], 6)}")
    print(f"  best {RETURN_METRIC} = {num(trial.best_return, 6)}")
    print("Hyperparameter schedule (step, iteration: values where they changed):")
    for step, iteration, values in detail.schedule:
        changed = ", ".join(f"{k}={num(v)}" for k, v in values.items())
        print(f"  step {step:>4}, iteration {iteration:>4}: {changed}")
    print("Ancestry (the training its final policy went through):")
    for seg in detail.segments:
        print(f"  {seg.trial_name}: iterations {seg.first_iteration}-{seg.last_iteration}")
    return 0


def _cmd_lineage(args: argparse.Namespace) -> int:
    from workbench.analysis.populations import population_lineage

    uri, client = _store(args)
    lineage = population_lineage(client, args.experiment, uri)
    pop = lineage.population
    if args.json:
        print(json.dumps(lineage.to_json(), indent=2, default=str))
    else:
        print(f"Lineage of population {pop.name} ({len(lineage.records)} exploits):")
        print(lineage.tree())
    if args.png:
        from workbench.analysis.plots import lineage_tree

        path = lineage_tree(
            lineage.trials,
            lineage.records,
            args.png,
            best=lineage.best_trial_id,
            title=pop.name,
        )
        print(f"Lineage tree written to {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from workbench.analysis.diagnosis import diagnose_target
    from workbench.analysis.timeline import capture_population

    capture = None
    if args.timeline:
        capture = capture_population(
            args.target,
            Path(args.timeline),
            args.timeline_seconds,
            address=args.address,
            store=args.store,
            population_ref=args.population,
        )
        for line in capture.lines():
            print(line, file=sys.stderr if args.json else sys.stdout)
    found = diagnose_target(args.target, store=args.store, population_ref=args.population)
    pop = found.population
    if args.png:
        from workbench.analysis.plots import time_split

        path = time_split(
            found.shares,
            args.png,
            title=f"{pop.name}: where each iteration's time goes",
            subtitles=found.verdicts,
        )
        print(f"Time split written to {path}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        timeline = str(capture.path) if capture else None
        print(json.dumps({**found.to_json(), "timeline": timeline}, indent=2))
        return 0
    print(f"Where the time goes in population {pop.name} ({pop.experiment}, {pop.status}):")
    if not found.has_figures:
        print(
            "  no iteration has timing figures yet (workbench/* metrics: they come with "
            "every result of a trial run by this version of the workbench)"
        )
    for report in found.reports:
        print("\n".join(report.lines()))
    if found.population_report is not None:
        print("\n".join(found.population_report.lines()))
    print(
        "Figures: seconds per iteration recovered from RLlib's EMA timers (coeff 0.01: "
        "x_n = (E_n - 0.99 E_(n-1)) / 0.01, exact with one training_step per iteration), "
        "summed over the iterations used; shares of time_this_iter_s. Runners needed = the "
        "learner's consumption rate / one runner's sampling rate. See docs/diagnosis.md."
    )
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


def _cmd_eval(args: argparse.Namespace) -> int:
    from workbench.policy.locate import evaluate_reference

    done = evaluate_reference(
        args.run,
        store=args.store,
        population=args.population,
        env_id=args.env,
        env_config=args.env_config,
        episodes=args.episodes,
        deterministic=not args.stochastic,
        seed=args.seed,
        log=not args.no_log,
        trust=args.trust,
    )
    if args.json:
        print(json.dumps(done.to_json(), indent=2))
        return 0
    source, checkpoint, result = done.source, done.checkpoint, done.result
    print(f"Evaluated {source.label}")
    if source.label != str(checkpoint.path):
        print(f"  checkpoint {checkpoint.path}")
    print(f"  saved at iteration {checkpoint.training_iteration}")
    print(f"  {result.summary()}")
    for note in [*result.notes, done.logged]:
        print(f"  {note}")
    return 0


def _cmd_export_schedule(args: argparse.Namespace) -> int:
    from workbench.analysis.schedule import write_schedule

    output = Path(args.output)
    if output.exists():
        raise ExperimentError.single(str(output), "-o", "exists; give a new file name")
    uri, client = _store(args)
    written = write_schedule(client, uri, output, args.experiment, args.trial)
    exported = written.exported
    print(
        f"Schedule of {exported.trial} (population {exported.population}) written to "
        f"{output}: {len(exported.steps)} steps over {exported.iterations} iterations"
    )
    print(
        "Ancestry: "
        + ", ".join(
            f"{s.trial_name} {s.first_iteration}-{s.last_iteration}" for s in exported.segments
        )
    )
    for step in exported.steps:
        values = ", ".join(
            f"{k}={num(v) if isinstance(v, int | float) else v}" for k, v in step["values"].items()
        )
        print(f"  iteration {step['iteration']:>4}: {values}")
    print(f"Replay it with `workbench run {output}` (results in {written.results_dir})")
    return 0


def _cmd_export_policy(args: argparse.Namespace) -> int:
    from workbench.policy.export import export_reference

    exported = export_reference(
        args.run,
        Path(args.output),
        store=args.store,
        population=args.population,
        env_id=args.env,
        trust=args.trust,
    )
    print("\n".join(exported.lines()))
    return 0


def _cmd_ui(args: argparse.Namespace) -> int:
    from workbench.analysis.ui import serve_forever

    return serve_forever(resolve_store(args.store), "127.0.0.1", args.port)


def _add_store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="PATH|URI",
        help="MLflow store: a results folder, an mlflow.db file or a tracking URI "
        "(default: MLFLOW_TRACKING_URI, else results/mlflow.db)",
    )
    # A store that fails while the command reads it is one line (main), not a traceback.
    parser.set_defaults(reads_store=True)


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
        "resume",
        help="continue a stopped or failed population (same runs, same config); of a "
        "finished one, write the MLflow results spooled while the store did not answer",
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

    trust = {
        "action": "store_true",
        "help": "read a checkpoint the workbench did not write (it has no "
        "workbench_checkpoint.json) RLlib's way, by unpickling: only one you trust, as "
        "unpickling runs whatever code its files hold",
    }
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
    evaluate.add_argument("--trust", **trust)  # type: ignore[arg-type]
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
    export_policy.add_argument("--trust", **trust)  # type: ignore[arg-type]
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


if __name__ == "__main__":
    sys.exit(main())
