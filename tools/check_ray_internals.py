"""Ray's internals stay in the modules that may use them (``make lint`` runs this).

The workbench pins one Ray release and patches or reads some of its private parts. When
Ray changes, only the modules in ``ALLOWED`` need proving again; this check fails when
any other module of the package

* imports a private Ray module or name (``ray._private...``, ``ray.train._internal``,
  ``from ray.tune.x import _name``);
* reads a private attribute of another object (``obj._name``, ``getattr(obj, "_name")``;
  ``self`` and ``cls`` are the object's own). Another library's private read says so on
  its line with the marker ``# not Ray:`` and why;
* in a class, reads a private attribute that neither the class nor its bases in the same
  module define (a mixin's ``self._trial_state``), or, in a class derived from a Ray
  class, overrides or reads one that Ray's class has (``def _exploit``).

``workbench/tune_ext/ray_surface.py`` lists what the allowed modules rely on, and a test
checks it against the installed Ray. docs/ray-fixes.md says why each module is allowed.

Usage: ``python tools/check_ray_internals.py [PACKAGE_DIR]`` (default: ``workbench``);
exit 1 with one line per finding, 0 when clean.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Relative to the package folder: a folder (every module under it) or a module.
ALLOWED: tuple[str, ...] = (
    # The wing that holds Tune's subclasses, patches and private reads.
    "tune_ext/",
    # RLlib and Tune replacements that run inside a trial (below tune_ext in the layers).
    "trial/fast_runner.py",
    "trial/lean_learner.py",
    "trial/lean_common.py",
    "trial/eager_torch.py",
    "trial/ppo_loss.py",
    "trial/clip_schedule.py",
    "trial/weight_sync.py",
    "trial/lean_dqn.py",
    "trial/observation_filter.py",
    "trial/callbacks.py",
    "trial/trainable.py",
)
OWN = frozenset({"self", "cls"})
NOT_RAY = "# not Ray:"


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    what: str
    name: str  # the private module or attribute

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _marked(lines: list[str], node: ast.expr) -> bool:
    last = node.end_lineno or node.lineno
    return any(NOT_RAY in line for line in lines[node.lineno - 1 : last])


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def allowed(relative: str, rules: tuple[str, ...] = ALLOWED) -> bool:
    return any(
        relative.startswith(rule) if rule.endswith("/") else relative == rule for rule in rules
    )


def _ray_imports(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted Ray object it was imported as."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ray":
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ray":
                    names[alias.asname or alias.name.split(".")[0]] = alias.name.split(".")[0]
    return names


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def resolve(dotted: str) -> object | None:
    """The object a dotted Ray name stands for, or None when it cannot be imported."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _ray_bases(node: ast.ClassDef, ray_names: dict[str, str]) -> list[str]:
    bases = []
    for base in node.bases:
        dotted = _dotted(base)
        if dotted is None:
            continue
        head, _, rest = dotted.partition(".")
        if head in ray_names:
            bases.append(ray_names[head] + (f".{rest}" if rest else ""))
    return bases


def _own_names(node: ast.ClassDef) -> set[str]:
    """Private names the class defines itself: methods, class attributes, ``self._x =``."""
    own: set[str] = set()
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            own.add(item.name)
        elif (
            isinstance(item, ast.AnnAssign)
            and isinstance(item.target, ast.Name)
            and item.value is not None  # a bare annotation types another class's attribute
        ):
            own.add(item.target.id)
        elif isinstance(item, ast.Assign):
            own.update(t.id for t in item.targets if isinstance(t, ast.Name))
    for sub in ast.walk(node):
        targets: list[ast.expr] = []
        if isinstance(sub, ast.Assign):
            targets = list(sub.targets)
        elif isinstance(sub, ast.AnnAssign | ast.AugAssign):
            targets = [sub.target]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                own.add(target.attr)
    return own


def _class_findings(
    node: ast.ClassDef, ray_names: dict[str, str], classes: dict[str, ast.ClassDef], path: str
) -> Iterator[Finding]:
    """A class reads the private attributes it defines itself (or its bases in the same
    module do); in a class derived from a Ray class, none that Ray's class has."""
    resolved = [b for b in (resolve(name) for name in _ray_bases(node, ray_names)) if b is not None]
    own: set[str] = set()
    todo, seen = [node], set()
    while todo:
        cls = todo.pop()
        if cls.name in seen:
            continue
        seen.add(cls.name)
        own |= _own_names(cls)
        todo += [classes[b.id] for b in cls.bases if isinstance(b, ast.Name) and b.id in classes]

    def rays(name: str) -> bool:
        return any(hasattr(base, name) for base in resolved)

    for item in node.body:
        if (
            isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            and is_private(item.name)
            and rays(item.name)
        ):
            yield Finding(path, item.lineno, f"overrides Ray's private {item.name}", item.name)
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Attribute)
            and isinstance(sub.value, ast.Name)
            and sub.value.id == "self"
            and is_private(sub.attr)
            and (sub.attr not in own or rays(sub.attr))
        ):
            yield Finding(
                path, sub.lineno, f"reads the private self.{sub.attr} it did not define", sub.attr
            )


def module_findings(source: str, path: str) -> Iterator[Finding]:
    """What one module outside ``ALLOWED`` must not do (see the module's docstring)."""
    tree = ast.parse(source, path)
    lines = source.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ray":
            if any(is_private(part) for part in node.module.split(".")):
                yield Finding(
                    path, node.lineno, f"imports the private Ray module {node.module}", node.module
                )
            for alias in node.names:
                if is_private(alias.name):
                    yield Finding(
                        path,
                        node.lineno,
                        f"imports the private {alias.name} of {node.module}",
                        f"{node.module}.{alias.name}",
                    )
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "ray" and any(is_private(p) for p in parts):
                    yield Finding(
                        path,
                        node.lineno,
                        f"imports the private Ray module {alias.name}",
                        alias.name,
                    )
        elif (
            isinstance(node, ast.Attribute)
            and is_private(node.attr)
            and not (isinstance(node.value, ast.Name) and node.value.id in OWN)
            and not _marked(lines, node)
        ):
            yield Finding(path, node.lineno, f"reads the private attribute .{node.attr}", node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and is_private(node.args[1].value)
            and not (isinstance(node.args[0], ast.Name) and node.args[0].id in OWN)
            and not _marked(lines, node)
        ):
            name = node.args[1].value
            yield Finding(path, node.lineno, f"{node.func.id}() of the private {name}", name)
    ray_names = _ray_imports(tree)
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    for node in classes.values():
        yield from _class_findings(node, ray_names, classes, path)


def check(package: Path, rules: tuple[str, ...] = ALLOWED) -> list[Finding]:
    findings: list[Finding] = []
    for module in sorted(package.rglob("*.py")):
        relative = module.relative_to(package).as_posix()
        if allowed(relative, rules):
            continue
        shown = (package.name / Path(relative)).as_posix()
        findings.extend(module_findings(module.read_text(), shown))
    return findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", default="workbench", type=Path)
    args = parser.parse_args(argv)
    findings = check(args.package)
    for finding in findings:
        print(finding)
    if findings:
        print(
            f"{len(findings)} use(s) of Ray's internals outside the modules allowed them "
            "(tools/check_ray_internals.py ALLOWED): move them into workbench/tune_ext",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
