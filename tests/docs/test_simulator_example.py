"""The "add your own simulator" example of docs/simulators.md compiles and works as
promised: its header plus the one registration line make a Gymnasium environment."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pybind11
import pytest
from gymnasium.utils.env_checker import check_env

from sim_ext.envs import SimEnv, SimVectorEnv

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "simulators.md"


def _example_blocks() -> tuple[str, str]:
    """The example's header and its registration line, as the page shows them."""
    blocks = re.findall(r"```cpp\n(.*?)```", PAGE.read_text(), flags=re.S)
    header = next(b for b in blocks if b.startswith("// sim_ext/csrc/envs/pointmass.h"))
    line = next(b for b in blocks if "bind_env<sim_ext::PointMass>" in b).strip()
    return header, line


@pytest.fixture(scope="module")
def pointmass_module(tmp_path_factory: pytest.TempPathFactory) -> object:
    header, registration = _example_blocks()
    build = tmp_path_factory.mktemp("pointmass")
    (build / "envs").mkdir()
    (build / "envs" / "pointmass.h").write_text(header)
    (build / "bindings.cpp").write_text(
        '#include "core/binding.h"\n#include "envs/pointmass.h"\n\n'
        f"PYBIND11_MODULE(_pointmass, m) {{\n  {registration}\n}}\n"
    )
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    target = build / f"_pointmass{suffix}"
    cmd = [
        "c++",
        "-std=c++17",
        "-O1",
        "-shared",
        "-fPIC",
        "-Wall",
        "-Werror",
        f"-I{build}",
        f"-I{ROOT / 'sim_ext' / 'csrc'}",
        f"-I{pybind11.get_include()}",
        f"-I{sysconfig.get_paths()['include']}",
        str(build / "bindings.cpp"),
        "-o",
        str(target),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    spec = importlib.util.spec_from_file_location("_pointmass", target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_pointmass"] = module
    spec.loader.exec_module(module)
    return module


def test_the_example_is_a_working_gymnasium_env(pointmass_module: object) -> None:
    core = pointmass_module.PointMass  # type: ignore[attr-defined]
    assert core.env_name == "PointMass-v0"
    single = type("PointMassEnv", (SimEnv,), {"core_class": core})(dt=0.1)
    check_env(single, skip_render_check=True)

    vector = type("PointMassVectorEnv", (SimVectorEnv,), {"core_class": core})(num_envs=64)
    obs, _ = vector.reset(seed=0)
    assert obs.shape == (64, 2)
    ended = 0
    for _ in range(400):
        # Push against position and velocity: the masses settle at the origin.
        push = np.clip(-obs[:, :1] - 2.0 * obs[:, 1:], -1.0, 1.0).astype(np.float32)
        obs, reward, terminated, _, _ = vector.step(np.ascontiguousarray(push))
        assert np.all(reward <= 0.0)
        ended += int(terminated.sum())
    assert ended >= 64

    with pytest.raises(ValueError, match="unknown env_config key 'mass'"):
        vector.__class__(num_envs=2, mass=3.0)
    with pytest.raises(ValueError, match="action\\[0\\] contains nan"):
        vector.step(np.full((64, 1), np.nan, dtype=np.float32))
