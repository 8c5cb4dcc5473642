"""The plan: one trial's placement group against a cluster, before anything starts.

Resources and bundles (read from RLlib), how many trials fit at once, whether the env
runners can feed the learner, and the pre-flight of `workbench run` against the live
cluster.
"""

from typing import Any

from workbench.moved import old_attribute


def __getattr__(name: str) -> Any:
    # Old pickles name classes of the module this package replaced (workbench.plan.X).
    return old_attribute(__name__, name)
