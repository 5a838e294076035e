"""Parse YAML into plain data plus the line of every key, so errors can name file and line.

The only module that imports PyYAML on the way to a config: a prologue whose files are
in the parse cache (core/config/yamlcache.py) never loads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from healthcheck.core.config.docs import Path_, YamlDoc, key_str, read_config
from healthcheck.core.errors import ConfigError
from healthcheck.core.inputs import clip

__all__ = ["MAX_ALIASES", "MAX_DEPTH", "MAX_VALUES", "Path_", "YamlDoc", "key_str", "load_yaml", "parse_yaml",
           "read_config"]

try:  # libyaml is ~10x faster; fall back to the pure-Python loader where it is absent
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Loader = yaml.SafeLoader


def load_yaml(path: Path) -> YamlDoc:
    """Read and parse `path` (see read_config and parse_yaml)."""
    return parse_yaml(path, read_config(path))


def parse_yaml(path: Path, raw: bytes) -> YamlDoc:
    """Parse the bytes read from `path`; malformed YAML, duplicate keys and non-mapping
    documents are ConfigErrors. The event stream is checked against the bounds below
    before any node is built."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        _check_bounds(path, text)
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or "malformed YAML"
        raise ConfigError(f"{path}{line}: malformed YAML: {clip(problem)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: malformed YAML: {clip(str(exc))}") from None
    lines: dict[Path_, int] = {}
    if node is None:
        return YamlDoc(path, {}, lines, raw)
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{path}:{node.start_mark.line + 1}: the top level must be a mapping of keys")
    data = _to_data(path, node, (), lines, yaml.constructor.SafeConstructor())
    return YamlDoc(path, data, lines, raw)


# What a config may hold, checked on the parser's event stream before composing: the
# composer and _to_data recurse (1,000 levels is a RecursionError, ~30,000 crash the
# C composer), and _to_data copies what an alias names, so 512 bytes of nested aliases
# ("billion laughs") would expand to 10^9 values. A real config is a few levels deep
# and a few thousand values; the libyaml parser itself is incremental, so stopping at
# the first event past a bound costs nothing however deep the rest of the file goes.
MAX_DEPTH = 64
MAX_VALUES = 250_000  # scalars and collections, aliases counted as what they expand to
MAX_ALIASES = 10_000


class _Open:
    """A collection whose end event has not come yet."""

    __slots__ = ("anchor", "height", "size")

    def __init__(self, anchor: str | None) -> None:
        self.anchor = anchor
        self.size = 1  # itself and everything under it, expanded
        self.height = 1  # levels, itself included


def _check_bounds(path: Path, text: str) -> None:
    """ConfigError (file:line) at the first event that nests too deep, expands too far,
    or names an alias that is undefined or its own ancestor."""
    anchors: dict[str, tuple[int, int]] = {}  # anchor -> (expanded size, height)
    stack: list[_Open] = []
    total = aliases = 0
    for event in yaml.parse(text, Loader=_Loader):
        line = event.start_mark.line + 1 if event.start_mark is not None else 0  # a parsed event has a mark
        if isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= MAX_DEPTH:
                raise ConfigError(f"{path}:{line}: nested deeper than {MAX_DEPTH} levels")
            stack.append(_Open(event.anchor))
            total += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            done = stack.pop()
            _add(stack, anchors, done.anchor, done.size, done.height)
            continue
        elif isinstance(event, yaml.ScalarEvent):
            total += 1
            _add(stack, anchors, event.anchor, 1, 0)
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise ConfigError(f"{path}:{line}: more than {MAX_ALIASES} YAML aliases (*name)")
            size, height = _alias(path, line, event.anchor, anchors, stack)
            if len(stack) + height > MAX_DEPTH:
                raise ConfigError(f"{path}:{line}: alias *{event.anchor} nests deeper than {MAX_DEPTH} levels")
            total += size
            _add(stack, anchors, None, size, height)
        else:
            continue
        if total > MAX_VALUES:
            raise ConfigError(
                f"{path}:{line}: more than {MAX_VALUES} values (aliases counted as what they expand to)"
            )


def _alias(path: Path, line: int, anchor: str | None, anchors: dict[str, tuple[int, int]],
           stack: list[_Open]) -> tuple[int, int]:
    """(expanded size, height) of what an alias names."""
    if anchor in anchors:
        return anchors[anchor]
    if any(o.anchor == anchor for o in stack):
        raise ConfigError(f"{path}:{line}: alias *{anchor} refers to a collection that contains it")
    raise ConfigError(f"{path}:{line}: alias *{anchor} names no anchor (&{anchor}) above it")


def _add(stack: list[_Open], anchors: dict[str, tuple[int, int]], anchor: str | None,
         size: int, height: int) -> None:
    """A finished node: remember its anchor, count it in the collection that holds it."""
    if anchor is not None:
        anchors[anchor] = (size, height)
    if stack:
        parent = stack[-1]
        parent.size += size
        parent.height = max(parent.height, height + 1)


def _to_data(file: Path, node: yaml.Node, at: Path_, lines: dict[Path_, int], ctor: Any) -> Any:
    lines.setdefault(at, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                raise ConfigError(f"{file}:{line}: keys must be plain scalars")
            if key_node.tag == "tag:yaml.org,2002:merge":
                # Checked before constructing: SafeConstructor has no constructor for it.
                raise ConfigError(
                    f"{file}:{line}: YAML merge keys (<<) are not supported: write the keys out "
                    "(a fabric can inherit another's with `extends`)"
                )
            key = _scalar(file, key_node, ctor)
            if key in out:
                raise ConfigError(
                    f"{file}:{line}: key {clip(repr(key), 60)} appears twice "
                    f"(first at line {lines[at + (key,)]})"
                )
            lines[at + (key,)] = line
            out[key] = _to_data(file, value_node, at + (key,), lines, ctor)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_data(file, item, at + (i,), lines, ctor) for i, item in enumerate(node.value)]
    return _scalar(file, node, ctor)


def _scalar(file: Path, node: yaml.Node, ctor: Any) -> Any:
    """A scalar's value; a value its tag cannot hold (`2020-99-99`, `!foo x`, an int of
    10,000 digits) is a ConfigError at its line, not an internal error."""
    try:
        return ctor.construct_object(node)
    except yaml.MarkedYAMLError as exc:
        problem = exc.problem or exc.context or str(exc)
        raise ConfigError(f"{file}:{node.start_mark.line + 1}: {clip(problem)}") from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        raise ConfigError(f"{file}:{node.start_mark.line + 1}: invalid value: {clip(str(exc))}") from None
