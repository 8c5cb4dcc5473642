"""The workbench's PB2: Tune's, with the fixes its PBT has (``pbt.PopulationMixins``) and
an explore step that keeps the members apart (``pb2_explore``).

Apart from ``pbt`` because Tune's PB2 imports scikit-learn's Gaussian process (about
0.7 s of a driver's start): only a PB2 experiment pays for it. Results folders pickled
before name the class ``workbench.tune_ext.pbt.WorkbenchPB2``; that module hands it on.
"""

from __future__ import annotations

from ray.tune.schedulers.pb2 import PB2

from workbench.tune_ext.pb2_explore import SpreadPB2Explore
from workbench.tune_ext.pbt import PopulationMixins
from workbench.tune_ext.pbt_state import ResumablePBT


class WorkbenchPB2(SpreadPB2Explore, PopulationMixins, PB2):
    _GLOBAL_FIELDS = (
        *ResumablePBT._GLOBAL_FIELDS,
        "data",
        "last_exploration_time",
        "current",
    )
