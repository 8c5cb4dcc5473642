"""The integration tier: tests that start a local Ray and train (tests/conftest.py marks
them ray and slow)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ray

import tests.support.probes as probes


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray of 2 CPUs for the module's tests."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # The probe learner lives in the tests package, which Ray workers cannot import.
    ray.cloudpickle.register_pickle_by_value(probes)
    yield
    ray.shutdown()
