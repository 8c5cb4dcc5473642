"""The search space checked: its file read, every searched block against the algorithm's
hyperparameters and their values, the search and scheduler it must suit, and a replayed
schedule's values."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from workbench.errors import ExperimentError, Problem, did_you_mean, one_of
from workbench.experiment.algorithms import hyperparameter_hint
from workbench.experiment.bounds import BOUNDS, value_problem
from workbench.experiment.schema import Experiment, ReplaySection
from workbench.experiment.search_space import (
    KINDS,
    ParamSpec,
    SearchSpace,
    parse_search_space,
    search_space_dirs,
)
from workbench.experiment.yaml_input import read_yaml


def read_search_space(
    experiment: Experiment, file: Path, problems: list[Problem]
) -> tuple[SearchSpace, Path | None]:
    """The searched blocks: the file's (looked up in search_space_dirs), with the params
    section's over them, and the file read (None: none named or not found)."""
    section = experiment.search_space
    space: SearchSpace = {}
    found: Path | None = None
    if section.file is not None:
        candidates = (
            [Path(section.file)]
            if Path(section.file).is_absolute()
            else [d / section.file for d in search_space_dirs(file)]
        )
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            problems.append(
                Problem(
                    str(file),
                    "search_space.file",
                    f"{section.file!r} not found; looked in "
                    + ", ".join(str(c.parent) for c in candidates),
                )
            )
        else:
            try:
                raw = read_yaml(found)
            except ExperimentError as err:
                problems.extend(err.problems)
                raw = None
            if raw is not None and not isinstance(raw, dict):
                problems.append(Problem(str(found), "", "must map hyperparameter names to blocks"))
            elif raw:
                try:
                    space = parse_search_space(raw)
                except ValidationError as err:
                    for e in err.errors():
                        loc = ".".join(str(p) for p in e["loc"])
                        if e["type"] == "extra_forbidden":
                            key = str(e["loc"][-1])
                            problems.append(
                                Problem(
                                    str(found),
                                    loc,
                                    f"unknown key {key!r}"
                                    f"{did_you_mean(key, KINDS)}; valid: {one_of(KINDS)}",
                                )
                            )
                            continue
                        text = e["msg"].removeprefix("Value error, ")
                        shown = "" if isinstance(e.get("input"), dict) else f"{e.get('input')!r}: "
                        problems.append(Problem(str(found), loc, f"{shown}{text}"))
    space.update(section.params)
    return space, found


def check_searched(
    experiment: Experiment,
    space: SearchSpace,
    space_file: Path | None,
    valid_params: frozenset[str],
    where: str,
    problems: list[Problem],
) -> None:
    """Every searched name is a hyperparameter of the algorithm, not also fixed in
    training, and its block draws only values that hyperparameter can take."""
    algo = experiment.algorithm
    for name in space:
        if name not in valid_params:
            origin = (
                f"search_space.params.{name}"
                if name in experiment.search_space.params
                else (f"search_space.file ({space_file}): {name}")
            )
            problems.append(
                Problem(
                    where,
                    origin,
                    f"{algo} has no hyperparameter {name!r} to search"
                    f"{hyperparameter_hint(name, valid_params)}",
                )
            )
        elif name in experiment.training:
            problems.append(
                Problem(
                    where,
                    f"training.{name}",
                    "is both fixed here and searched in search_space; keep one",
                )
            )
        else:
            origin = (
                f"search_space.params.{name}"
                if name in experiment.search_space.params
                else f"search_space.file ({space_file}): {name}"
            )
            problems += [Problem(where, origin, why) for why in block_problems(name, space[name])]


def check_search(
    experiment: Experiment, space: SearchSpace, where: str, problems: list[Problem]
) -> None:
    scheduler = experiment.scheduler
    grids = [n for n, s in space.items() if s.kind == "grid"]
    # ASHA and Optuna compare or model the members' values: with none searched, every
    # member trains the same values and only the seeds differ (a seed study is FIFO's).
    for what, uses in (
        ("ASHA", scheduler.type == "asha"),
        ("Optuna's search", experiment.search.type == "optuna"),
    ):
        if uses and not space:
            problems.append(
                Problem(
                    where,
                    "search_space",
                    f"{what} needs at least one searched hyperparameter; none given, so every "
                    "member would train the same values (only the seeds differ); valid: "
                    "search_space.params or search_space.file, or scheduler.type fifo for a "
                    "study of seeds",
                )
            )
    if scheduler.type in ("pbt", "pb2"):
        if not space:
            problems.append(
                Problem(
                    where,
                    "search_space",
                    f"{scheduler.type.upper()} needs at "
                    "least one searched hyperparameter to mutate; none given",
                )
            )
        replaced = experiment.population * scheduler.quantile_fraction
        if replaced < 1:
            problems.append(
                Problem(
                    where,
                    "population",
                    f"{experiment.population} trials x "
                    f"quantile_fraction {scheduler.quantile_fraction} = {replaced:g} < 1: "
                    "no trial would ever be exploited; raise population or quantile_fraction",
                )
            )
    if scheduler.type == "pb2":
        categorical = [n for n, s in space.items() if s.categorical]
        if categorical:
            problems.append(
                Problem(
                    where,
                    "search_space",
                    f"PB2 explores numeric bounds only; "
                    f"{', '.join(categorical)} {'is' if len(categorical) == 1 else 'are'} "
                    "categorical (choice/grid): use PBT, or a numeric block",
                )
            )
    if experiment.search.type == "optuna" and grids:
        problems.append(
            Problem(
                where,
                "search.type",
                f"Optuna cannot enumerate grid blocks "
                f"({', '.join(grids)}); use choice, or search.type 'grid'",
            )
        )
    if experiment.search.type == "grid":
        not_grid = [n for n, s in space.items() if s.kind != "grid"]
        if not space or not_grid:
            problems.append(
                Problem(
                    where,
                    "search.type",
                    "'grid' tries every combination of grid blocks; "
                    + (
                        f"{', '.join(not_grid)} {'is' if len(not_grid) == 1 else 'are'} not "
                        "grid (use search.type 'random' to mix)"
                        if not_grid
                        else "none given"
                    ),
                )
            )


def check_replay(
    experiment: Experiment,
    space: SearchSpace,
    valid_params: frozenset[str],
    where: str,
    problems: list[Problem],
) -> list[str]:
    """A replayed schedule sets training parameters nothing else sets; returns their names."""
    scheduler = experiment.scheduler
    if not isinstance(scheduler, ReplaySection):
        return []
    names = list(scheduler.schedule[0].values)
    for name in names:
        field = f"scheduler.schedule.0.values.{name}"
        if name not in valid_params:
            problems.append(
                Problem(
                    where,
                    field,
                    f"{experiment.algorithm} has no hyperparameter {name!r} to replay"
                    f"{hyperparameter_hint(name, valid_params)}",
                )
            )
        elif name in experiment.training:
            problems.append(
                Problem(where, field, "is both fixed in training and replayed; keep one")
            )
        elif name in space:
            problems.append(
                Problem(where, field, "is both searched (search_space) and replayed; keep one")
            )
    for index, step in enumerate(scheduler.schedule):
        for name, value in step.values.items():
            if (why := value_problem(name, value)) is not None:
                problems.append(Problem(where, f"scheduler.schedule.{index}.values.{name}", why))
    return names


def grid_points(space: SearchSpace) -> int:
    """How many configurations the grid blocks make together (1 without grids)."""
    points = 1
    for spec in space.values():
        if spec.kind == "grid":
            points *= len(spec.grid or [])
    return points


def block_problems(name: str, spec: ParamSpec) -> list[str]:
    """Why a search-space block can produce values hyperparameter ``name`` cannot take."""
    bound = BOUNDS.get(name)
    if spec.categorical:
        values = list(getattr(spec, spec.kind))
        return [f"{spec.kind} value {why}" for v in values if (why := value_problem(name, v))]
    low, high = spec.bounds  # type: ignore[misc]
    out = [
        f"{spec.kind} {edge} {why}"
        for edge, value in (("low", low), ("high", high))
        if (why := value_problem(name, value))
    ]
    if bound is not None and bound.integer and spec.kind in ("uniform", "loguniform"):
        out.append(
            f"{name} is an integer and {spec.kind} draws real numbers; use randint, "
            "quniform with an integer q, or choice"
        )
    return out
