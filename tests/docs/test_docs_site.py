"""The documentation site builds in MkDocs' strict mode, and its experiment-file reference
is generated from the schema: a broken link, a page missing from the navigation or a field
missing from the reference fails here."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "hooks" / "schema_reference.py"


def _build(config_dir: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of the mkdocs.yml in `config_dir`, with this interpreter."""
    return subprocess.run(
        [
            sys.executable,
            *("-m", "mkdocs", "build", "--strict"),
            *("--config-file", str(config_dir / "mkdocs.yml")),
            *("--site-dir", str(site)),
        ],
        cwd=config_dir,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # the theme's banner, not a warning
    )


def _hook() -> ModuleType:
    """The build's hook module, which names the schema's models (one place for that)."""
    spec = importlib.util.spec_from_file_location("schema_reference", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _copy_of_the_docs(tmp_path: Path) -> Path:
    copy = tmp_path / "project"
    copy.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", copy / "docs")
    return copy


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    result = _build(ROOT, site)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return site


def test_the_site_builds_in_strict_mode_with_every_page(site: Path) -> None:
    pages = sorted(p.relative_to(ROOT / "docs") for p in (ROOT / "docs").rglob("*.md"))
    assert Path("index.md") in pages and Path("benchmarks/index.md") in pages
    for page in pages:
        folder = page.parent if page.stem == "index" else page.with_suffix("")
        assert (site / folder / "index.html").is_file(), f"{page} was not built"


def test_the_experiment_file_page_holds_the_current_reference() -> None:
    # A reader of the repository sees the .md file, not the built site.
    hook = _hook()
    page = hook.PAGE.read_text()
    assert page == hook.with_reference(page), (
        "docs/experiment-file.md lags the schema: run .venv/bin/python "
        "docs/hooks/schema_reference.py"
    )
    assert page.count(hook.MARKER) == 1 and page.count(hook.END) == 1


def test_the_experiment_file_reference_lists_every_field_of_the_schema(site: Path) -> None:
    hook = _hook()
    html = (site / "experiment-file" / "index.html").read_text()
    assert hook.MARKER not in html
    # The top-level table: from its heading to the next one.
    top = re.search(r'id="top-level".*?(?=<h[1-3])', html, flags=re.S)
    assert top is not None, "no generated table for the top level"
    for name in hook.Experiment.model_fields:
        assert f"<td><code>{name}</code>" in top.group(0), f"field {name!r} missing"
    # Every section the file can hold has its table, with all of its fields.
    seen, todo = set(), [hook.Experiment]
    while todo:
        model = todo.pop()
        seen.add(model)
        for name, field in model.model_fields.items():
            assert f"<td><code>{name}</code>" in html, f"{model.__name__}.{name} missing"
            todo += [m for m, _ in hook._models_in(field.annotation, "") if m not in seen]
    assert len(seen) > 10  # sections, scheduler variants, nested blocks
    assert 'id="resources-env_runners"' in html and 'id="scheduler-pbt"' in html


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    copy = _copy_of_the_docs(tmp_path)
    page = copy / "docs" / "index.md"
    page.write_text(page.read_text() + "\nSee [a page that is not there](no-such-page.md).\n")
    result = _build(copy, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr


def test_a_page_left_out_of_the_navigation_fails_the_build(tmp_path: Path) -> None:
    copy = _copy_of_the_docs(tmp_path)
    (copy / "docs" / "orphan.md").write_text("# Nobody links here\n")
    result = _build(copy, tmp_path / "site")
    assert result.returncode != 0
    assert "orphan.md" in result.stderr
