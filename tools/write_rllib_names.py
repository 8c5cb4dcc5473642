"""Writes ``workbench/experiment/rllib_names.py``: what validation needs to know of RLlib,
read off the installed RLlib, so that ``workbench validate`` checks an experiment without
importing RLlib, torch and Tune (about 3 s of a 4 s command).

For each algorithm: every keyword its ``config.training()`` accepts, where Tune's
param_space keeps the ones it renames, and its default train batch; and the fields of
RLlib's ``DefaultModelConfig``. ``tests/unit/test_rllib_names.py`` fails when the file no
longer matches the installed RLlib; run this again after upgrading Ray.

Usage: ``python tools/write_rllib_names.py [--check]`` (``--check``: exit 1 if the file
differs, write nothing).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "workbench" / "experiment" / "rllib_names.py"
# Keywords of training() that are not hyperparameters.
NOT_HYPERPARAMETERS = {"self", "kwargs"}
# AlgorithmConfig.to_dict() renames these attributes (Tune's param_space is its output).
TO_DICT_RENAMES = {"lambda_": "lambda", "input_": "input"}


def _q(text: str) -> str:
    """A string literal as ruff format writes it (double quotes)."""
    return json.dumps(text)


class _Probe:
    """A value no setter would invent: found again by identity."""


def _config_class(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


def _parameters(cls: Any) -> list[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        method = klass.__dict__.get("training")
        if method is not None:
            names.update(inspect.signature(method).parameters)
    return sorted(names - NOT_HYPERPARAMETERS)


def _tune_key(cls: Any, parameter: str) -> str:
    """Set a probe through training() and see which attribute holds it."""
    config = cls()
    probe = _Probe()
    try:
        config.training(**{parameter: probe})
    except Exception:  # a setter that checks or merges its value keeps its name
        return TO_DICT_RENAMES.get(parameter, parameter)
    for attr, value in vars(config).items():
        if value is probe:
            return TO_DICT_RENAMES.get(attr, str(attr))
    # The setter transformed the value (merged a dict, for instance): the same name.
    return TO_DICT_RENAMES.get(parameter, parameter)


def render() -> str:
    import ray
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    sys.path.insert(0, str(ROOT))
    from workbench.experiment.algorithms import ALGORITHMS

    lines = [
        '"""What validation knows of RLlib, written by tools/write_rllib_names.py from',
        f"RLlib {ray.__version__}: do not edit; run the tool again after upgrading Ray",
        '(tests/unit/test_rllib_names.py fails until then)."""',
        "",
        "from __future__ import annotations",
        "",
        f"RLLIB_VERSION = {_q(ray.__version__)}",
        "",
        "# algorithm -> every keyword its config.training() accepts",
        "TRAINING_PARAMETERS: dict[str, frozenset[str]] = {",
    ]
    renames: dict[str, dict[str, str]] = {}
    batches: dict[str, int] = {}
    for name, info in ALGORITHMS.items():
        cls = _config_class(info.module, info.config_class)
        parameters = _parameters(cls)
        lines.append(f"    {_q(name)}: frozenset(")
        lines.append("        {")
        lines.extend(f"            {_q(p)}," for p in parameters)
        lines.append("        }")
        lines.append("    ),")
        renames[name] = {p: key for p in parameters if (key := _tune_key(cls, p)) != p}
        config = cls()
        batches[name] = int(config.train_batch_size_per_learner or config.train_batch_size)
    lines.append("}")
    lines.append("")
    lines.append("# algorithm -> {parameter: its key in Tune's param_space} where they differ")
    lines.append("TUNE_KEYS: dict[str, dict[str, str]] = {")
    for name, keys in renames.items():
        if not keys:
            lines.append(f"    {_q(name)}: {{}},")
            continue
        lines.append(f"    {_q(name)}: {{")
        lines.extend(f"        {_q(p)}: {_q(k)}," for p, k in sorted(keys.items()))
        lines.append("    },")
    lines.append("}")
    lines.append("")
    lines.append("# algorithm -> its train batch per learner when the file sets none")
    lines.append("TRAIN_BATCH_DEFAULTS: dict[str, int] = {")
    lines.extend(f"    {_q(name)}: {batch}," for name, batch in batches.items())
    lines.append("}")
    lines.append("")
    lines.append("# the fields of RLlib's DefaultModelConfig (an experiment's model section)")
    lines.append("MODEL_FIELDS: tuple[str, ...] = (")
    lines.extend(f"    {_q(f.name)}," for f in fields(DefaultModelConfig))
    lines.append(")")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if TARGET.read_text() != text:
            print(f"{TARGET} is out of date: run tools/write_rllib_names.py")
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
