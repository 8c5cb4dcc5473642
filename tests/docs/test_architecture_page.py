"""docs/architecture.md stays true: every module of the package is on it, in the wing it
lies in, the wings in the order of the import-linter contract, and nothing it names is
gone."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "architecture.md").read_text()


def _table() -> list[tuple[str, str]]:
    """(wing, module) per row of the page's table; a blank wing cell repeats the last."""
    rows, wing = [], ""
    for line in PAGE.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[1].startswith("`"):
            continue
        wing = cells[0].strip("`") or wing
        rows.append((wing, cells[1].strip("`")))
    return rows


def test_every_module_is_on_the_page_in_its_wing_and_nothing_else() -> None:
    on_page = set()
    for wing, module in _table():
        folder = "" if wing.startswith("(") else f"{wing}/"
        on_page.add(f"{folder}{module}")
    in_tree = {
        str(p.relative_to(ROOT / "workbench"))
        for p in (ROOT / "workbench").rglob("*.py")
        if p.name != "__init__.py"
    }
    assert on_page == in_tree, (
        f"missing from docs/architecture.md: {sorted(in_tree - on_page)}; "
        f"on the page but gone: {sorted(on_page - in_tree)}"
    )


def test_the_wings_are_in_the_order_of_the_layers_contract() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (layers,) = [
        c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"
    ]
    wings = [
        part.strip().removeprefix("workbench.")
        for layer in layers
        for part in layer.split("|")
        # The wings are folders; the base layer's single modules are listed as (base).
        if part.strip().count(".") == 1
        and (ROOT / "workbench" / part.strip()[len("workbench.") :]).is_dir()
    ]
    on_page = list(dict.fromkeys(w for w, _ in _table() if not w.startswith("(")))
    assert on_page == wings
    assert re.search(r"lint-imports", PAGE)
