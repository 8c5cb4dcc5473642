"""Search spaces: one block per hyperparameter, three uses.

A block such as ``lr: {loguniform: [1.0e-5, 1.0e-2]}`` yields
- the initial distribution (a Tune domain, or a grid),
- the PBT mutation (the same domain, or the list of choices to shift along),
- the PB2 bounds ([low, high]),
and the bounds that every PBT perturbation is clamped back into (Tune multiplies
by 0.8/1.2 and does not clamp: lr=0.012 escaped a 1e-2 ceiling).

Bounds are inclusive everywhere (``randint: [5, 20]`` can give 5 and 20).
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter, model_validator

Kind = Literal["uniform", "loguniform", "quniform", "qloguniform", "randint", "choice", "grid"]
KINDS: tuple[str, ...] = Kind.__args__  # type: ignore[attr-defined]


class ParamSpec(BaseModel):
    """One hyperparameter's block: exactly one of the keys below.

    uniform: [low, high]; loguniform: [low, high] (0 < low < high);
    quniform: [low, high, q]; qloguniform: [low, high, q]; randint: [low, high] (integers);
    choice: [a, b, ...]; grid: [a, b, ...] (every value is tried, Tune's grid_search).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    uniform: tuple[float, float] | None = None
    loguniform: tuple[float, float] | None = None
    quniform: tuple[float, float, float] | None = None
    qloguniform: tuple[float, float, float] | None = None
    randint: tuple[int, int] | None = None
    choice: list[Any] | None = None
    grid: list[Any] | None = None

    @model_validator(mode="after")
    def _exactly_one_and_sane(self) -> ParamSpec:
        given = [k for k in KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of {', '.join(KINDS)}; got {', '.join(given) or 'none'}"
            )
        kind = given[0]
        value = getattr(self, kind)
        if kind in ("choice", "grid"):
            if not value:
                raise ValueError(f"{kind} needs at least one value")
            return self
        low, high = value[0], value[1]
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError(f"{kind} bounds must be finite, got [{low}, {high}]")
        if not low < high:
            raise ValueError(f"{kind} needs low < high, got [{low}, {high}]")
        if kind in ("loguniform", "qloguniform") and low <= 0:
            raise ValueError(f"{kind} needs 0 < low < high, got [{low}, {high}]")
        if kind in ("quniform", "qloguniform"):
            if not value[2] > 0:
                raise ValueError(f"{kind} needs a step q > 0, got {value[2]}")
            first, last = self._grid()
            if first > last:
                raise ValueError(
                    f"{kind} [{low}, {high}] holds no multiple of q = {value[2]}; widen it or "
                    "change q"
                )
        return self

    def _grid(self) -> tuple[int, int]:
        """The first and last multiples of q (as indices) inside [low, high]."""
        low, high, q = getattr(self, self.kind)
        return math.ceil(low / q - 1e-9), math.floor(high / q + 1e-9)

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, k) is not None)

    @property
    def categorical(self) -> bool:
        return self.kind in ("choice", "grid")

    @property
    def bounds(self) -> tuple[float, float] | None:
        """[low, high] of a numeric block, None for categorical ones."""
        if self.categorical:
            return None
        value = getattr(self, self.kind)
        return float(value[0]), float(value[1])

    def domain(self) -> Any:
        """The initial distribution, as Tune takes it in a param_space."""
        from ray import tune  # here: checking an experiment does not import Tune (1 s)

        kind, v = self.kind, getattr(self, self.kind)
        if kind == "uniform":
            return tune.uniform(v[0], v[1])
        if kind == "loguniform":
            return tune.loguniform(v[0], v[1])
        if kind in ("quniform", "qloguniform"):
            first, last = self._grid()  # Tune wants bounds on the grid of q
            make = tune.quniform if kind == "quniform" else tune.qloguniform
            return make(first * v[2], last * v[2], v[2])
        if kind == "randint":
            return tune.randint(v[0], v[1] + 1)  # Tune's upper bound is exclusive
        if kind == "choice":
            return tune.choice(list(v))
        return tune.grid_search(list(v))

    def mutation(self) -> Any:
        """What PBT perturbs with: a continuous domain, or a list to shift along."""
        if self.categorical:
            return list(getattr(self, self.kind))
        if self.kind == "randint":
            from ray import tune

            return tune.randint(self.randint[0], self.randint[1] + 1)  # type: ignore[index]
        return self.domain()

    def clamp(self, value: Any) -> Any:
        """The nearest value inside this block (a perturbed value put back in bounds)."""
        if self.categorical:
            return value
        low, high = self.bounds  # type: ignore[misc]
        if self.kind == "randint":
            return int(min(max(round(float(value)), low), high))
        clamped = min(max(float(value), low), high)
        q = self.quniform[2] if self.quniform else self.qloguniform[2] if self.qloguniform else None
        if q is not None:
            # Snap to the grid of q, staying inside [low, high] (indices: no float drift).
            first, last = self._grid()
            index = min(max(round(clamped / q), first), last)
            clamped = min(max(index * q, low), high)
        return clamped

    def perturb(
        self,
        value: Any,
        *,
        resample_probability: float,
        factors: tuple[float, ...],
        rng: random.Random | None = None,
    ) -> tuple[Any, str]:
        """PBT's explore step for one value: the new value and what was done (Tune's
        words). Python's ``random`` draws, as Tune's PBT does (seeded per experiment).

        - continuous: resampled from the block, or multiplied by one of ``factors``;
        - randint and quantized blocks: the same, but a multiplication that rounds back to
          the same value moves one integer (one step q) in its direction instead: Tune's
          own rounding keeps num_epochs=2 at 2 under x0.8 and x1.2 forever;
        - choice and grid (an ordered list): resampled from the list, or moved to a
          neighbour, at either end the only one (Tune shifts off the end and stays put
          half the time there); a value not in the list is resampled.
        Every result is clamped back into the block. ``rng``: draw from it instead (the
        plan's simulated populations), the resampling too.
        """
        draw = rng or random
        if self.categorical:
            values = list(getattr(self, self.kind))
            if value not in values or draw.random() < resample_probability:
                return draw.choice(values), "resample"
            if len(values) == 1:
                return value, "shift (noop)"
            index = values.index(value)
            step = draw.choice([-1, 1])
            if not 0 <= index + step < len(values):
                step = -step  # the only neighbour at an end
            return values[index + step], f"shift {'left' if step < 0 else 'right'}"
        if draw.random() < resample_probability:
            state = None if rng is None else rng.randrange(2**32)
            return self.clamp(self.domain().sample(None, random_state=state)), "resample"
        factor = draw.choice(factors)
        moved = self.clamp(float(value) * factor)
        if self.kind == "randint" or self.quniform or self.qloguniform:
            unit = 1.0 if self.kind == "randint" else getattr(self, self.kind)[2]
            if moved == self.clamp(value) and factor != 1:
                moved = self.clamp(float(value) + (unit if factor > 1 else -unit))
        return moved, f"* {factor}"

    def describe(self) -> str:
        return f"{self.kind} {list(getattr(self, self.kind))}"


SearchSpace = dict[str, ParamSpec]


def parse_search_space(raw: Mapping[str, Any]) -> SearchSpace:
    """Validates a mapping of name -> block (pydantic errors carry the name in their loc)."""

    adapter: TypeAdapter[dict[str, ParamSpec]] = TypeAdapter(dict[str, ParamSpec])
    return adapter.validate_python(dict(raw))


def clamp_config(config: dict[str, Any], space: Mapping[str, ParamSpec]) -> dict[str, Any]:
    """PBT's custom_explore_fn: every searched key back inside its block's bounds."""
    for key, spec in space.items():
        if key in config:
            config[key] = spec.clamp(config[key])
    return config


def explore(
    config: dict[str, Any],
    space: Mapping[str, ParamSpec],
    *,
    resample_probability: float,
    factors: tuple[float, ...],
) -> tuple[dict[str, Any], dict[str, str]]:
    """PBT's explore step over a whole config (a copy): every searched key perturbed by
    its block (`ParamSpec.perturb`), the rest as they are; and what was done per key."""
    new = copy.deepcopy(config)
    operations: dict[str, str] = {}
    for key, spec in space.items():
        if key in new:
            new[key], operations[key] = spec.perturb(
                new[key], resample_probability=resample_probability, factors=factors
            )
    return new, operations


def search_space_dirs(experiment_file: Path | None) -> list[Path]:
    """Where `search_space.file` is looked up: next to the experiment, then the project's:
    the shipped spaces are workbench/search_spaces in an installed wheel and the top-level
    search_spaces/ of a clone (pyproject.toml maps one onto the other)."""
    dirs = []
    if experiment_file is not None:
        dirs.append(experiment_file.parent)
        dirs.append(experiment_file.parent.parent / "search_spaces")
    dirs.append(Path.cwd() / "search_spaces")
    package = Path(__file__).resolve().parents[1]
    dirs.append(package / "search_spaces")  # installed from the wheel
    dirs.append(package.parent / "search_spaces")  # a clone (editable install)
    unique: list[Path] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique
