"""The `workbench` command line: a thin face over functions that tests call directly.

Exit codes: 0 success, 1 the run failed, 2 bad input (nothing was started).
"""

from workbench.cli.main import entry, main

__all__ = ["entry", "main"]
