"""The commands that take a trained policy or schedule out of a population: eval (roll
out a policy, with --video), export-schedule (a trial's hyperparameter schedule as an
experiment file) and export-policy (torch files and an MLflow model), and their
subcommands' options.

Each handler imports its command's package modules itself (`workbench.cli.main`): Ray
and torch only when the command runs.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from workbench.cli.common import population_ref, print_json, store_of
from workbench.cli.format import counted, num
from workbench.cli.options import DIRECTORY, POPULATION_ARG, Commands, path_arg, positive_int
from workbench.errors import ExperimentError


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
        print_json(data)
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
    uri, client = store_of(args)
    written = write_schedule(client, uri, output, population_ref(args), args.trial)
    exported = written.exported
    if args.json:
        print_json(
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
        f"{output}: {counted(len(exported.steps), 'step')} over "
        f"{counted(exported.iterations, 'iteration')}"
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
        print_json(dataclasses.asdict(exported))
        return 0
    print("\n".join(exported.lines()))
    return 0


def add_commands(commands: Commands) -> None:
    """The subcommands eval, export-schedule and export-policy."""
    add = commands.add

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
    path_arg(evaluate.add_argument("run", **policy_ref), DIRECTORY)  # type: ignore[arg-type]
    evaluate.add_argument("--episodes", type=positive_int, default=10, help="episodes (default 10)")
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
    path_arg(
        evaluate.add_argument(
            "--video",
            metavar="FILE",
            help="also render episodes of the policy to FILE (.mp4 or .gif), with the env's "
            "rgb_array render; episode k starts from seed + k, as the evaluation's",
        )
    )
    evaluate.add_argument(
        "--video-episodes",
        type=positive_int,
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
    export_schedule.add_argument("experiment", **POPULATION_ARG)
    export_schedule.add_argument(
        "--trial", help="trial name, trial id or run id (default: the best trial)"
    )
    path_arg(
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
    path_arg(export_policy.add_argument("run", **policy_ref), DIRECTORY)  # type: ignore[arg-type]
    path_arg(
        export_policy.add_argument(
            "-o", "--output", required=True, metavar="DIR", help="a new folder for the files"
        ),
        DIRECTORY,
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
