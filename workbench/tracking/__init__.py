"""Tracking: a population's MLflow runs, written so they stay correct under PBT,
restores and store outages.

Which store, which metrics, the background writer and the Tune callback. The tag and
file names it shares with the readers live in `workbench.names`.
"""

from typing import Any

from workbench.moved import old_attribute


def __getattr__(name: str) -> Any:
    # Old pickles name classes of the module this package replaced (workbench.tracking.X).
    return old_attribute(__name__, name)
