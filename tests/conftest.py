"""Shared test settings."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

# CI runs the same examples every time (a red build must be reproducible);
# developers get fresh examples on each run.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True, scope="module")
def _no_ray_left_running() -> Iterator[None]:
    """A module that leaves Ray initialized (workbench.launch.run starts one and, as a
    CLI would, leaves it to the process's end) must not hand it to the next module,
    whose own ray.init would then fail."""
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()
