"""Shared test settings."""

from __future__ import annotations

import os

from hypothesis import settings

# CI runs the same examples every time (a red build must be reproducible);
# developers get fresh examples on each run.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
