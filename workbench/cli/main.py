"""The `workbench` command line: a thin face over functions that tests call directly.

Every command parses its options, calls one function of the package and prints what it
returns (numbers, times and tables: `workbench.cli.format`).

Exit codes: 0 success, 1 the run failed, 2 bad input (nothing was started; for the
commands that read an MLflow store, also a store that cannot be read: one line), 141 the
reader of stdout went away (`| head`: no traceback).

One CLI: the options several commands share (--store, --json, --population, --wide) are
spelled once (`_option_sets`, argparse parents); every command has a description and
examples (`_Commands.add`); an option a command does not know is told with that command's
usage (`_parse`); `workbench completion SHELL` prints shtab's script for this parser.
Tables and prose fit the terminal's width (`workbench.cli.format`), --wide prints them whole.

Imports: each handler imports its command's package modules itself (the one place the
workbench imports inside functions), so that `workbench --help` and the light commands
start without Ray, torch, MLflow or matplotlib (keep `workbench --help` under ~0.3 s).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from workbench import __version__
from workbench.cli.format import (
    FIRST_GROUPS,
    aligned,
    mean_std,
    metric_groups,
    num,
    param_text,
    shown,
    table,
    terminal_width,
    when,
    wrapped,
)
from workbench.errors import ExperimentError, Interrupted
from workbench.names import RESOLVED_FILE, SPOOL_FILE
from workbench.tracking.store import open_store, read_failure, resolve_store

# A reader that closed the pipe early (`| head`): the status of a process SIGPIPE ended.
CLOSED_PIPE_EXIT = 141


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
    print(table(["env", "observations", "actions", "time limit"], rows, width=_width(args)))
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

    from workbench.experiment.resolve import describe, grid_points
    from workbench.run.dry_run import planned_trials

    exp = resolved.experiment
    out = []
    if yaml_too:
        out += [yaml.safe_dump(describe(resolved), sort_keys=False).rstrip(), ""]
    trials = planned_trials(resolved)
    grid = grid_points(resolved.search_space)
    out += [
        f"Population {exp.name} (MLflow experiment {exp.tracking.experiment}): nothing "
        "started (--dry-run)",
        f"  results in {resolved.results_dir}",
        f"  {resolved.defaults.summary()}",
        f"Would start {len(trials)} trials of {exp.algorithm} on {exp.env.id} "
        f"({exp.population} samples x {grid} grid points), "
        f"{exp.max_concurrent or 'as many as fit'} at a time, under {exp.scheduler.type}:",
    ]
    names = list(resolved.search_space)
    rows = [[name, *(shown(values.get(n)) for n in names)] for name, values in trials]
    out.append(table(["trial", *names], rows, width=None if wide else terminal_width()))
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
        _print_json(plan.to_json())
    else:
        print("\n".join(wrapped(plan.lines(), _width(args))))
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
    summary = resume(
        resolved,
        restart_errored=args.restart_errored,
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


def _width(args: argparse.Namespace) -> int | None:
    """The columns to fit (None: --wide, as wide as it takes)."""
    return None if getattr(args, "wide", False) else terminal_width()


def _print_json(data: Any) -> None:
    """JSON on stdout: paths and other objects as their text."""
    print(json.dumps(data, indent=2, default=str))


def _store(args: argparse.Namespace) -> tuple[str, Any]:
    """--store as (tracking URI, read-only MLflow client), the store checked first."""
    return open_store(args.store)


def _cmd_runs(args: argparse.Namespace) -> int:
    from workbench.analysis.populations import find_population, leaderboard, populations

    uri, client = _store(args)
    ref = _population_ref(args)
    if ref is None:
        found = populations(client, with_trials=True)
        if args.json:
            _print_json([p.to_json() for p in found])
            return 0
        if not found:
            print(f"No populations in {uri} yet.")
            return 0
        rows = []
        for pop in found:
            best = pop.best()
            rows.append(
                [
                    pop.name,
                    pop.experiment,
                    pop.status,
                    str(len(pop.trials)),
                    num(pop.result.return_mean if pop.result else None),
                    best.name if best else "-",
                    num(
                        max(
                            (t.best_return for t in pop.trials if t.best_return == t.best_return),
                            default=None,
                        )
                    ),
                    when(pop.start_ms) if args.wide else when(pop.start_ms, short=True),
                    *([pop.run_id] if args.wide else []),
                ]
            )
        print("\n".join(wrapped([f"Populations in {uri}:"], _width(args))))
        # The result: the population's best policy, evaluated (its member is the best
        # trial; without a result, the member with the best training score).
        headers = ["population", "experiment", "status", "trials", "result", "best trial"]
        headers.append("best score")
        more = ["started", "run id"] if args.wide else ["started"]  # run ids: --json, --wide
        print(table([*headers, *more], rows, width=_width(args)))
        return 0
    pop = find_population(client, ref, uri)
    if args.json:
        _print_json(pop.to_json())
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
            num(t.last_score),
            num(t.last_return),
            mean_std(t.evaluation),
            shown(t.cloned_from),
            *(shown(t.hyperparameters().get(k)) for k in hps),
        ]
        for rank, t in enumerate(board, 1)
    ]
    title = f"Population {pop.name} ({pop.experiment}, {pop.status}, run {pop.run_id}):"
    print("\n".join(wrapped([title, pop.result_line()], _width(args))))
    # The score ranks (the mean return of the last K episodes); the return beside it is
    # the last iteration's own mean, and eval the last evaluation, mean ± std (n episodes).
    headers = ["#", "trial", "status", "iter", "env steps", "best score", "score", "return"]
    print(table([*headers, "eval", "cloned from", *hps], rows, width=_width(args), keep=2))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from workbench.analysis.populations import metric_value, trial_detail

    uri, client = _store(args)
    detail = trial_detail(client, args.run, args.population, uri)
    if args.json:
        _print_json(detail.to_json())
        return 0
    width = _width(args)
    trial = detail.trial
    title = f"Trial {trial.name} ({trial.trial_id}) of population {detail.population.name}: "
    ran = f"  run id {trial.run_id}; started {when(trial.start_ms)}, ended {when(trial.end_ms)}"
    print("\n".join(wrapped([title + trial.status, ran], width)))
    print(f"  best {trial.score_metric} = {num(trial.best_return, 6)}")
    result = detail.population.result
    if result is not None and result.trial_id == trial.trial_id:
        print(f"  holds the population's result: {result.summary()}")
    if trial.error is not None:
        print("  error: " + trial.error.strip().splitlines()[-1])
    # params: the initial values (MLflow's params cannot change), and trial_id, said above.
    initial = {k: param_text(v) for k, v in trial.params.items() if k != "trial_id"}
    final = trial.hyperparameters()
    if initial or final:
        print("Hyperparameters (initial -> final where they changed):")
        rows = []
        for key in sorted(set(initial) | set(final)):
            first, last = initial.get(key, "-"), shown(final.get(key))
            rows.append(["  " + key, first if last in (first, "-") else f"{first} -> {last}"])
        print(aligned(rows, width))
    groups = metric_groups(trial.metrics)
    shown_groups = groups if args.wide else groups[:FIRST_GROUPS]
    print("Final metrics:")
    for group, keys in shown_groups:
        print(f"  {group}:")
        rows = [["    " + k, shown(metric_value(k, trial.metrics[k]))] for k in keys]
        print(aligned(rows, width))
    hidden = groups[len(shown_groups) :]
    if hidden:
        counts = ", ".join(f"{len(keys)} {group}" for group, keys in hidden)
        print(f"  ({counts}: --wide lists them)")
    print("Hyperparameter schedule (step, iteration: values where they changed):")
    lines = []
    for step, iteration, values in detail.schedule:
        changed = ", ".join(f"{k}={shown(v)}" for k, v in values.items())
        lines.append(f"  step {step:>4}, iteration {iteration:>4}: {changed}")
    print("\n".join(wrapped(lines, width)))
    print("Ancestry (the training its final policy went through):")
    for seg in detail.segments:
        print(f"  {seg.trial_name}: iterations {seg.first_iteration}-{seg.last_iteration}")
    return 0


def _cmd_lineage(args: argparse.Namespace) -> int:
    from workbench.analysis.populations import population_lineage

    uri, client = _store(args)
    lineage = population_lineage(client, _population_ref(args), uri)
    pop = lineage.population
    if args.json:
        _print_json(lineage.to_json())
    else:
        print(f"Lineage of population {pop.name} ({len(lineage.records)} exploits):")
        print("\n".join(wrapped(lineage.tree().splitlines(), _width(args))))
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


def _cmd_compare(args: argparse.Namespace) -> int:
    from workbench.analysis.compare import compare, comparison_rows, plot_comparison

    uri, client = _store(args)
    curves = compare(client, args.populations, uri)
    path = plot_comparison(curves, args.output)
    if args.json:
        _print_json([c.to_json() for c in curves])
    else:
        headers, rows = comparison_rows(curves)
        print(f"Populations in {uri}:")
        print(table(headers, rows, width=_width(args)))
    print(f"Curves and evaluations drawn to {path}", file=sys.stderr if args.json else sys.stdout)
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
        _print_json({**found.to_json(), "timeline": timeline})
        return 0
    width = _width(args)
    lines = [f"Where the time goes in population {pop.name} ({pop.experiment}, {pop.status}):"]
    if not found.has_figures:
        lines.append(
            "  no iteration has timing figures yet (workbench/* metrics: they come with "
            "every result of a trial run by this version of the workbench)"
        )
    together = found.population_report
    for report in found.reports:
        # A trial bound as the population is gets the population's recommendation, once.
        shared = together is not None and report.verdict == together.verdict and not args.wide
        trial_lines = report.lines()
        if shared and report.recommendation:
            trial_lines = trial_lines[: len(trial_lines) - len(report.recommendation)]
        lines += trial_lines
    if together is not None:
        lines += together.lines()
    lines.append(
        "Figures: seconds per iteration recovered from RLlib's EMA timers (coeff 0.01: "
        "x_n = (E_n - 0.99 E_(n-1)) / 0.01, exact with one training_step per iteration), "
        "summed over the iterations used; shares of time_this_iter_s. Runners needed = the "
        "learner's consumption rate / one runner's sampling rate. See docs/diagnosis.md."
    )
    print("\n".join(wrapped(lines, width)))
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


def _cmd_eval(args: argparse.Namespace) -> int:
    from workbench.policy.locate import evaluate_reference
    from workbench.policy.video import check_video_path, record_video

    if args.video:  # a wrong file name fails before the rollout
        check_video_path(Path(args.video), args.run or "--video")
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
    video = None
    if args.video:
        video = record_video(
            done.checkpoint,
            Path(args.video),
            episodes=args.video_episodes,
            deterministic=not args.stochastic,
            seed=args.seed,
            env_config=done.result.env_config,
            fps=args.fps,
            source=args.run or done.source.label,
        )
    if args.json:
        data = done.to_json()
        if video is not None:
            data["video"] = {**dataclasses.asdict(video), "path": str(video.path)}
        _print_json(data)
        return 0
    source, checkpoint, result = done.source, done.checkpoint, done.result
    print(f"Evaluated {source.label}")
    if source.label != str(checkpoint.path):
        print(f"  checkpoint {checkpoint.path}")
    print(f"  saved at iteration {checkpoint.training_iteration}")
    print(f"  {result.summary()}")
    for note in [*result.notes, done.logged]:
        print(f"  {note}")
    if video is not None:
        print(f"  {video.line()}")
    return 0


def _cmd_export_schedule(args: argparse.Namespace) -> int:
    from workbench.analysis.schedule import write_schedule

    output = Path(args.output)
    if output.exists():
        raise ExperimentError.single(str(output), "-o", "exists; give a new file name")
    uri, client = _store(args)
    written = write_schedule(client, uri, output, _population_ref(args), args.trial)
    exported = written.exported
    if args.json:
        _print_json(
            {
                "file": str(output),
                "population": exported.population,
                "trial": exported.trial,
                "iterations": exported.iterations,
                "steps": exported.steps,
                "ancestry": [dataclasses.asdict(s) for s in exported.segments],
                "storage": str(written.results_dir.parent),
            }
        )
        return 0
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
    print(
        f"Replay it with `workbench run {output}` (a new population in "
        f"{written.results_dir.parent}, named {written.results_dir.name}_<time>)"
    )
    return 0


def _cmd_export_policy(args: argparse.Namespace) -> int:
    from workbench.policy.mlflow_model import export_reference_to_mlflow

    exported = export_reference_to_mlflow(
        args.run,
        Path(args.output),
        store=args.store,
        population=args.population,
        env_id=args.env,
        trust=args.trust,
        log=not args.no_log,
        register=args.register,
    )
    if args.json:
        _print_json(dataclasses.asdict(exported))
        return 0
    print("\n".join(exported.lines()))
    return 0


def _cmd_ui(args: argparse.Namespace) -> int:
    from workbench.analysis.ui import serve_forever

    return serve_forever(resolve_store(args.store), "127.0.0.1", args.port)


# What shtab completes for a path (its shell functions for files and folders).
_FILE = {
    "bash": "_shtab_compgen_files",
    "zsh": "_files",
    "tcsh": "f",
    "fish": "__fish_complete_path",
}
_DIRECTORY = {
    "bash": "_shtab_compgen_dirs",
    "zsh": "_files -/",
    "tcsh": "d",
    "fish": "__fish_complete_directories",
}
SHELLS = ("bash", "zsh", "fish", "tcsh")


def _cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    print(shtab.complete(build_parser(), shell=args.shell))
    return 0


def _path(action: argparse.Action, kind: dict[str, str] = _FILE) -> argparse.Action:
    """Marks an argument as a path for the shell completion (shtab reads `complete`)."""
    action.complete = kind  # type: ignore[attr-defined]
    return action


_VERBOSE = (
    "show Ray's, Tune's and MLflow's own logging on the console as well (it always goes to "
    "the results folder's workbench.log)"
)


def _option_sets() -> dict[str, argparse.ArgumentParser]:
    """The options several commands share, each spelled and explained once (argparse
    parents): --store, --json, --population and --wide."""
    store = argparse.ArgumentParser(add_help=False)
    _path(
        store.add_argument(
            "--store",
            metavar="PATH|URI",
            help="MLflow store: a results folder, an mlflow.db file or a tracking URI "
            "(default: MLFLOW_TRACKING_URI, else results/mlflow.db)",
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


class _Commands:
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
    commands = _Commands(parser)
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
    _path(schema.add_argument("-o", "--output", metavar="FILE", help="write it to this file"))

    validate = add(
        "validate",
        "check experiment files the way `run` reads them; nothing runs",
        ["workbench validate experiments/*.yaml"],
        handler=_cmd_validate,
        description="Exit 2 with one line per problem (file, field, value, what is valid).",
    )
    _path(validate.add_argument("files", nargs="+", metavar="FILE"))

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
    _path(run.add_argument("file", metavar="FILE"))
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
    run.add_argument("-v", "--verbose", action="store_true", help=_VERBOSE)

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
    _path(plan.add_argument("file", metavar="FILE"))
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

    resume = add(
        "resume",
        "continue a stopped or failed population (same runs, same config)",
        [
            "workbench resume results/cartpole_pbt_20260130-141502",
            "workbench resume cartpole_pbt_20260130-141502 --restart-errored",
        ],
        handler=_cmd_resume,
        description="Of a finished population, it writes the MLflow results spooled while "
        "the store did not answer.",
    )
    _path(resume.add_argument("target", metavar="RESULTS_DIR|NAME"), _DIRECTORY)
    resume.add_argument(
        "--restart-errored",
        action="store_true",
        help="start errored trials from scratch (default: from their last checkpoint)",
    )
    resume.add_argument("--address", help="join this Ray cluster (default: RAY_ADDRESS or local)")
    resume.add_argument("-v", "--verbose", action="store_true", help=_VERBOSE)

    population_arg = {
        "nargs": "?",
        "metavar": "POPULATION",
        "help": "the same as --population",
    }
    runs = add(
        "runs",
        "the populations in the MLflow store, or one population's leaderboard",
        [
            "workbench runs",
            "workbench runs cartpole_pbt_20260130-141502",
            "workbench runs --population cartpole_pbt --json",
        ],
        handler=_cmd_runs,
        shared=["population", "store", "json", "wide"],
    )
    runs.add_argument("experiment", **population_arg)  # type: ignore[arg-type]

    show = add(
        "show",
        "one trial: its metrics, hyperparameter schedule and ancestry",
        ["workbench show PPO_00003", "workbench show PPO_00003 --population cartpole_pbt --json"],
        handler=_cmd_show,
        shared=["population", "store", "json", "wide"],
    )
    show.add_argument("run", metavar="RUN", help="run id, or trial name (PPO_00003) / trial id")

    lineage = add(
        "lineage",
        "who cloned whom in a PBT population",
        ["workbench lineage", "workbench lineage --population cartpole_pbt --png lineage.png"],
        handler=_cmd_lineage,
        shared=["population", "store", "json", "wide"],
    )
    lineage.add_argument("experiment", **population_arg)  # type: ignore[arg-type]
    _path(lineage.add_argument("--png", metavar="FILE", help="also draw the tree to this PNG"))

    diagnose = add(
        "diagnose",
        "where the time goes (sampling, learning, weight sync) and what to change",
        [
            "workbench diagnose",
            "workbench diagnose results/cartpole_pbt_20260130-141502 --png time.png",
            "workbench diagnose PPO_00002 --population cartpole_pbt",
        ],
        handler=_cmd_diagnose,
        description="The bottleneck per trial and for the population; a recommendation the "
        "trials share is said once.",
        shared=["population", "store", "json", "wide"],
    )
    _path(
        diagnose.add_argument(
            "target",
            nargs="?",
            metavar="RESULTS_DIR|POPULATION|RUN",
            help="a results folder, an MLflow experiment / population name / parent run id, "
            "or one trial (run id or name) (default: the newest population)",
        ),
        _DIRECTORY,
    )
    _path(
        diagnose.add_argument("--png", metavar="FILE", help="draw the time split over iterations")
    )
    _path(
        diagnose.add_argument(
            "--timeline",
            metavar="FILE",
            help="also write a Chrome-trace timeline (ray.timeline) of a short window of the "
            "population while it runs",
        )
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

    trust = {
        "action": "store_true",
        "help": "read a checkpoint the workbench did not write (it has no "
        "workbench_checkpoint.json) RLlib's way, by unpickling: only one you trust, as "
        "unpickling runs whatever code its files hold",
    }
    policy_ref = {
        "metavar": "RUN|CHECKPOINT|POPULATION",
        "nargs": "?",
        "help": "an MLflow trial run (run id, or trial name such as PPO_00003: that "
        "member's newest checkpoint), a checkpoint folder, a trial folder (its newest "
        "checkpoint), or a population (its result: the best policy any member produced, "
        "chosen by evaluation). Default: the result of --population, else of the newest "
        "population",
    }
    evaluate = add(
        "eval",
        "roll out a trained policy (no Tune) and log eval/* to its MLflow run",
        [
            "workbench eval    # the newest population's result",
            "workbench eval --population cartpole_pbt --episodes 100",
            "workbench eval PPO_00003 --episodes 20",
            "workbench eval results/cartpole_pbt_20260130-141502/PPO_00003 --no-log --json",
            "workbench eval PPO_00003 --video cartpole.mp4 --video-episodes 3",
        ],
        handler=_cmd_eval,
        shared=["population", "store", "json"],
    )
    _path(evaluate.add_argument("run", **policy_ref), _DIRECTORY)  # type: ignore[arg-type]
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
    evaluate.add_argument("--no-log", action="store_true", help="do not log to MLflow")
    evaluate.add_argument("--trust", **trust)  # type: ignore[arg-type]
    _path(
        evaluate.add_argument(
            "--video",
            metavar="FILE",
            help="also render episodes of the policy to FILE (.mp4 or .gif), with the env's "
            "rgb_array render; episode k starts from seed + k, as the evaluation's",
        )
    )
    evaluate.add_argument(
        "--video-episodes",
        type=_positive_int,
        default=1,
        metavar="N",
        help="episodes in the video (default 1)",
    )
    evaluate.add_argument(
        "--fps", type=float, help="the video's frame rate (default: the env's render_fps)"
    )

    export_schedule = add(
        "export-schedule",
        "write an experiment file that replays a PBT trial's hyperparameter schedule",
        [
            "workbench export-schedule -o replay.yaml",
            "workbench export-schedule --population cartpole_pbt --trial PPO_00002 -o replay.yaml",
        ],
        handler=_cmd_export_schedule,
        shared=["population", "store", "json"],
    )
    export_schedule.add_argument("experiment", **population_arg)  # type: ignore[arg-type]
    export_schedule.add_argument(
        "--trial", help="trial name, trial id or run id (default: the best trial)"
    )
    _path(
        export_schedule.add_argument(
            "-o", "--output", required=True, metavar="FILE", help="the experiment file to write"
        )
    )

    export_policy = add(
        "export-policy",
        "write a policy as torch files (torch.export, TorchScript) loadable without Ray",
        [
            "workbench export-policy PPO_00003 -o policy/",
            "workbench export-policy results/cartpole_pbt_20260130-141502/PPO_00003 -o policy/",
            "workbench export-policy PPO_00003 -o policy/ --register cartpole-ppo",
        ],
        handler=_cmd_export_policy,
        shared=["population", "store", "json"],
    )
    _path(export_policy.add_argument("run", **policy_ref), _DIRECTORY)  # type: ignore[arg-type]
    _path(
        export_policy.add_argument(
            "-o", "--output", required=True, metavar="DIR", help="a new folder for the files"
        ),
        _DIRECTORY,
    )
    export_policy.add_argument(
        "--env", help="refuse unless the checkpoint was trained on this env id (a check)"
    )
    export_policy.add_argument("--trust", **trust)  # type: ignore[arg-type]
    export_policy.add_argument(
        "--register",
        metavar="NAME",
        help="also register the policy's MLflow model as a new version of NAME in the "
        "store's model registry (models:/NAME/VERSION)",
    )
    export_policy.add_argument(
        "--no-log",
        action="store_true",
        help="do not log the policy as an MLflow model to its trial run (logged by default)",
    )

    compare = add(
        "compare",
        "populations side by side: best-score curves against env steps, final evaluations",
        [
            "workbench compare cartpole_pbt_20260130-141502 cartpole_asha_optuna_20260130-150210",
            "workbench compare POP_A POP_B POP_C -o pbt_vs_asha.png --json",
        ],
        handler=_cmd_compare,
        shared=["store", "json", "wide"],
    )
    compare.add_argument(
        "populations",
        nargs="+",
        metavar="POPULATION",
        help="populations by name, parent run id, or MLflow experiment (its newest)",
    )
    _path(
        compare.add_argument(
            "-o",
            "--output",
            default="comparison.png",
            metavar="FILE",
            help="the PNG to draw (default comparison.png)",
        )
    )

    ui = add(
        "ui",
        "start the MLflow UI on 127.0.0.1 for a store",
        ["workbench ui", "workbench ui --store results/ --port 5000"],
        handler=_cmd_ui,
        description="It runs until Ctrl-C; the store is only read.",
        shared=["store"],
    )
    ui.add_argument("--port", type=int, help="port (default: a free one)")

    completion = add(
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


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments; an option the command does not know is told with that command's
    usage (argparse's top-level parser would print its own)."""
    parser, subparsers = _build()
    args, extra = parser.parse_known_args(argv)
    if extra:
        subparsers[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    positional, option = getattr(args, "experiment", None), getattr(args, "population", None)
    if positional is not None and option is not None and positional != option:
        subparsers[args.command].error(
            f"--population {option} and the POPULATION argument {positional} disagree; give one"
        )
    return args


def _population_ref(args: argparse.Namespace) -> str | None:
    """The population of a command that takes it as POPULATION or --population (`_parse`
    refused the two disagreeing)."""
    option: str | None = args.population
    return option if option is not None else args.experiment  # type: ignore[no-any-return]


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


if __name__ == "__main__":
    sys.exit(main())
