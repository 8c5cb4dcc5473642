"""What the handlers of several command families share: the width to fit, JSON on
stdout, the MLflow store of --store, and the population a command names."""

from __future__ import annotations

import argparse
import json
from typing import Any

from workbench.cli.format import terminal_width
from workbench.tracking.store import open_store


def fit_width(args: argparse.Namespace) -> int | None:
    """The columns to fit (None: --wide, as wide as it takes)."""
    return None if getattr(args, "wide", False) else terminal_width()


def print_json(data: Any) -> None:
    """JSON on stdout: paths and other objects as their text."""
    print(json.dumps(data, indent=2, default=str))


def store_of(args: argparse.Namespace) -> tuple[str, Any]:
    """--store as (tracking URI, read-only MLflow client), the store checked first."""
    return open_store(args.store)


def population_ref(args: argparse.Namespace) -> str | None:
    """The population of a command that takes it as POPULATION or --population (`main._parse`
    refused the two disagreeing)."""
    option: str | None = args.population
    return option if option is not None else args.experiment  # type: ignore[no-any-return]
