"""Experiment and search-space files as YAML: read safely, with errors that name the
file, the line and the column, and ``--set`` overrides applied to what was read."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from workbench.errors import ExperimentError

# An experiment or search-space file is a few kilobytes: these limits are far above any
# real one and far below what hurts (a 50 MB file took 3 minutes and 6 GB to parse; a
# "billion laughs" file of nested aliases expanded to 2 GB before pydantic gave up).
MAX_FILE_BYTES = 1_000_000
MAX_NODES = 100_000  # values once every alias is expanded


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads 1e-3 (no dot) as a float, as YAML 1.2 and people do, and
    refuses duplicate keys (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class says so
                break
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {first.line + 1}); YAML would keep "
                    "only the last one",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)
_Loader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _Loader.construct_mapping,  # type: ignore[arg-type]
)


def read_text(path: Path) -> str:
    """A small UTF-8 text file, or ExperimentError naming what it is instead."""
    try:
        size = path.stat().st_size
        if path.is_dir():
            raise ExperimentError.single(str(path), "", "is a folder, not a YAML file")
        if size > MAX_FILE_BYTES:
            raise ExperimentError.single(
                str(path),
                "",
                f"is {size:,} bytes; an experiment or search-space file is at most "
                f"{MAX_FILE_BYTES:,} bytes (is it the right file?)",
            )
        data = path.read_bytes()
    except FileNotFoundError:
        raise ExperimentError.single(str(path), "", "no such file") from None
    except OSError as err:
        raise ExperimentError.single(str(path), "", f"cannot be read: {err.strerror}") from None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in data[:1000]:
        raise ExperimentError.single(str(path), "", "is UTF-16 (or binary); save it as UTF-8 text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ExperimentError.single(
            str(path),
            "",
            f"is not UTF-8 text (byte 0x{data[err.start]:02x} on line {line}); save it as UTF-8",
        ) from None


def parse_yaml(text: str, source: str) -> Any:
    """The YAML document in ``text`` (errors name ``source``, the line and the column)."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node, {})
        if size > MAX_NODES:
            raise ExperimentError.single(
                source,
                "",
                f"its aliases (*name) expand to {size:,} values, more than {MAX_NODES:,}: an "
                "experiment file needs far fewer (nested aliases can expand to gigabytes)",
            )
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise ExperimentError.single(
            source, "", f"invalid YAML at {where}: {err.problem}"
        ) from None
    except yaml.YAMLError as err:
        raise ExperimentError.single(source, "", f"invalid YAML: {err}") from None
    except RecursionError:
        raise ExperimentError.single(source, "", "invalid YAML: nested too deeply") from None
    finally:
        loader.dispose()  # type: ignore[no-untyped-call]


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """How many values the node stands for once aliases are expanded (an alias is the
    same node object again: counted each time, computed once)."""
    known = memo.get(id(node))
    if known is not None:
        return known
    memo[id(node)] = 1  # a recursive alias: counted once
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    memo[id(node)] = size
    return size


def read_yaml(path: Path) -> Any:
    """A YAML file read safely: size, encoding, duplicate keys and aliases checked, and
    errors that give the file, line and column."""
    return parse_yaml(read_text(path), str(path))


def apply_overrides(raw: dict[str, Any], overrides: list[str], file: str) -> dict[str, Any]:
    """``--set key.path=value`` (the value read as YAML: 3, 1e-3, true, [1, 2], text)."""
    data = copy.deepcopy(raw)
    for item in overrides:
        if "=" not in item:
            raise ExperimentError.single(
                file, "--set", f"{item!r} is not key.path=value (for example stop.iterations=20)"
            )
        path, _, text = item.partition("=")
        keys = path.strip().split(".")
        if not all(keys):
            raise ExperimentError.single(file, "--set", f"{path!r} is not a dotted key path")
        try:
            value = yaml.load(text, Loader=_Loader)
        except yaml.YAMLError:
            value = text
        node = data
        for key in keys[:-1]:
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                raise ExperimentError.single(
                    file, path, f"--set cannot go inside {key!r}, which is {child!r}"
                )
            node = child
        node[keys[-1]] = value
    return data
