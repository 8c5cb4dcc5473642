"""The commands that read populations back from the MLflow store: runs (the populations,
or one population's leaderboard), show (one trial), lineage, diagnose (where the time
goes), compare (populations side by side) and ui (MLflow's UI over the store), and their
subcommands' options.

Each handler imports its command's package modules itself (`workbench.cli.main`):
MLflow and matplotlib only when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workbench.cli.common import fit_width, population_ref, print_json, store_of
from workbench.cli.format import (
    FIRST_GROUPS,
    aligned,
    mean_std,
    metric_groups,
    num,
    param_text,
    shown,
    table,
    when,
    wrapped,
)
from workbench.cli.options import DIRECTORY, POPULATION_ARG, Commands, path_arg
from workbench.tracking.store import resolve_store


def _cmd_runs(args: argparse.Namespace) -> int:
    from workbench.analysis.leaderboards import leaderboard, leaderboard_csv, populations_csv
    from workbench.analysis.populations import find_population, populations

    uri, client = store_of(args)
    ref = population_ref(args)
    if ref is None:
        found = populations(client, with_trials=True)
        if args.json:
            print_json([p.to_json() for p in found])
            return 0
        if args.csv:
            print(populations_csv(found), end="")
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
        print("\n".join(wrapped([f"Populations in {uri}:"], fit_width(args))))
        # The result: the population's best policy, evaluated (its member is the best
        # trial; without a result, the member with the best training score).
        headers = ["population", "experiment", "status", "trials", "result", "best trial"]
        headers.append("best score")
        more = ["started", "run id"] if args.wide else ["started"]  # run ids: --json, --wide
        print(table([*headers, *more], rows, width=fit_width(args)))
        return 0
    pop = find_population(client, ref, uri)
    if args.json:
        print_json(pop.to_json())
        return 0
    if args.csv:
        print(leaderboard_csv(pop), end="")
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
    print("\n".join(wrapped([title, pop.result_line()], fit_width(args))))
    # The score ranks (the mean return of the last K episodes); the return beside it is
    # the last iteration's own mean, and eval the last evaluation, mean ± std (n episodes).
    headers = ["#", "trial", "status", "iter", "env steps", "best score", "score", "return"]
    print(table([*headers, "eval", "cloned from", *hps], rows, width=fit_width(args), keep=2))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from workbench.analysis.histories import trial_detail
    from workbench.analysis.leaderboards import metric_value

    uri, client = store_of(args)
    detail = trial_detail(client, args.run, args.population, uri)
    if args.json:
        print_json(detail.to_json())
        return 0
    width = fit_width(args)
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
    from workbench.analysis.histories import population_lineage

    uri, client = store_of(args)
    lineage = population_lineage(client, population_ref(args), uri)
    pop = lineage.population
    if args.json:
        print_json(lineage.to_json())
    else:
        print(f"Lineage of population {pop.name} ({len(lineage.records)} exploits):")
        print("\n".join(wrapped(lineage.tree().splitlines(), fit_width(args))))
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

    curves = compare(args.populations, args.store)
    path = plot_comparison(curves, args.output, x_axis=args.x_axis, members=args.members)
    if args.json:
        print_json([c.to_json() for c in curves])
    else:
        headers, rows = comparison_rows(curves)
        stores = sorted({c.store for c in curves})
        print(f"Populations in {stores[0]}:" if len(stores) == 1 else "Populations:")
        print(table(headers, rows, width=fit_width(args)))
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
        print_json({**found.to_json(), "timeline": timeline})
        return 0
    width = fit_width(args)
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


def _cmd_ui(args: argparse.Namespace) -> int:
    from workbench.analysis.ui import serve_forever

    return serve_forever(resolve_store(args.store), "127.0.0.1", args.port)


def add_population_commands(commands: Commands) -> None:
    """The subcommands runs, show, lineage and diagnose: the populations in the store,
    one population, one trial."""
    add = commands.add

    runs = add(
        "runs",
        "the populations in the MLflow store, or one population's leaderboard",
        [
            "workbench runs",
            "workbench runs cartpole_pbt_20260130-141502",
            "workbench runs --population cartpole_pbt --json",
            "workbench runs cartpole_pbt --csv > leaderboard.csv",
        ],
        handler=_cmd_runs,
        shared=["population", "store", "json", "wide"],
    )
    runs.add_argument("experiment", **POPULATION_ARG)
    runs.add_argument(
        "--csv",
        action="store_true",
        help="print the leaderboard (or the populations) as CSV, hyperparameters as hp/<name>",
    )

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
    lineage.add_argument("experiment", **POPULATION_ARG)
    path_arg(lineage.add_argument("--png", metavar="FILE", help="also draw the tree to this PNG"))

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
    path_arg(
        diagnose.add_argument(
            "target",
            nargs="?",
            metavar="RESULTS_DIR|POPULATION|RUN",
            help="a results folder, an MLflow experiment / population name / parent run id, "
            "or one trial (run id or name) (default: the newest population)",
        ),
        DIRECTORY,
    )
    path_arg(
        diagnose.add_argument("--png", metavar="FILE", help="draw the time split over iterations")
    )
    path_arg(
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


def add_store_commands(commands: Commands) -> None:
    """The subcommands compare and ui (`workbench --help` lists them after the policy
    commands)."""
    add = commands.add

    compare = add(
        "compare",
        "populations side by side: best-score curves against env steps, final evaluations",
        [
            "workbench compare cartpole_pbt_20260130-141502 cartpole_asha_optuna_20260130-150210",
            "workbench compare POP_A POP_B POP_C -o pbt_vs_asha.png --json",
            "workbench compare cartpole_pbt cartpole_pbt@cluster-results/ --x-axis wall-clock",
            "workbench compare POP_A POP_B --members",
        ],
        handler=_cmd_compare,
        shared=["store", "json", "wide"],
    )
    compare.add_argument(
        "populations",
        nargs="+",
        metavar="POPULATION",
        help="populations by name, parent run id, or MLflow experiment (its newest); "
        "POPULATION@STORE reads one from another store (a results folder, an mlflow.db "
        "file or a tracking URI) than --store",
    )
    compare.add_argument(
        "--x-axis",
        choices=["env-steps", "wall-clock"],  # analysis.compare.AXES, not imported to parse
        default="env-steps",
        help="the curves against the env steps each policy was trained on (default), or "
        "against wall-clock seconds since each population started",
    )
    compare.add_argument(
        "--members",
        action="store_true",
        help="also draw each member's own best-score curve, thin, behind its population's",
    )
    path_arg(
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
    ui.add_argument(
        "--port", type=int, help="port (default: MLflow's 5000 if free, else a free one)"
    )
