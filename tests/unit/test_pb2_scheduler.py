"""PB2's scheduler lives apart from PBT's (workbench.tune_ext.pb2_scheduler): a driver of a
PBT, ASHA or FIFO experiment does not import scikit-learn, and a tuner pickled when the
class was in ``workbench.tune_ext.pbt`` still finds it."""

from __future__ import annotations

import pickle
import subprocess
import sys

from workbench.tune_ext import pbt
from workbench.tune_ext.pb2_scheduler import WorkbenchPB2


def test_building_a_pbt_scheduler_imports_no_scikit_learn() -> None:
    code = (
        "import sys\n"
        "from workbench.run import schedulers\n"
        "assert 'workbench.tune_ext.pbt' in sys.modules\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_a_pickle_naming_pb2_in_pbts_module_loads_the_class() -> None:
    # What pickle writes for a class: its module and name (protocol 2's global opcode).
    old_path = b"\x80\x02cworkbench.tune_ext.pbt\nWorkbenchPB2\nq\x00."
    assert pickle.loads(old_path) is WorkbenchPB2
    assert pbt.WorkbenchPB2 is WorkbenchPB2
    assert pickle.loads(pickle.dumps(WorkbenchPB2)) is WorkbenchPB2
