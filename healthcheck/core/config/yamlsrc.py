"""Read YAML into plain data plus the line of every key, so errors can name file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from healthcheck.core.errors import ConfigError

Path_ = tuple[Any, ...]  # a key path: ("net", "interfaces", "ib*", "mtu")

try:  # libyaml is ~10x faster; fall back to the pure-Python loader where it is absent
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Loader = yaml.SafeLoader


class YamlDoc:
    """A parsed YAML file: its data, its text digest input, and the line of each key path."""

    def __init__(self, path: Path, data: Any, lines: dict[Path_, int], raw: bytes) -> None:
        self.path = path
        self.data = data
        self.lines = lines
        self.raw = raw

    def where(self, key_path: Path_) -> str:
        """"file:line" of the deepest known prefix of key_path."""
        for n in range(len(key_path), -1, -1):
            line = self.lines.get(tuple(key_path[:n]))
            if line is not None:
                return f"{self.path}:{line}"
        return str(self.path)


def load_yaml(path: Path) -> YamlDoc:
    """Parse `path`; malformed YAML, duplicate keys and non-mapping documents are ConfigErrors."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or "malformed YAML"
        raise ConfigError(f"{path}{line}: malformed YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: malformed YAML: {exc}") from None
    lines: dict[Path_, int] = {}
    if node is None:
        return YamlDoc(path, {}, lines, raw)
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{path}:{node.start_mark.line + 1}: the top level must be a mapping of keys")
    data = _to_data(path, node, (), lines, yaml.constructor.SafeConstructor())
    return YamlDoc(path, data, lines, raw)


def _to_data(file: Path, node: yaml.Node, at: Path_, lines: dict[Path_, int], ctor: Any) -> Any:
    lines.setdefault(at, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise ConfigError(f"{file}:{key_node.start_mark.line + 1}: keys must be plain scalars")
            key = ctor.construct_object(key_node)
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise ConfigError(f"{file}:{key_node.start_mark.line + 1}: YAML merge keys (<<) are not supported")
            if key in out:
                raise ConfigError(
                    f"{file}:{key_node.start_mark.line + 1}: key {key!r} appears twice "
                    f"(first at line {lines[at + (key,)]})"
                )
            lines[at + (key,)] = key_node.start_mark.line + 1
            out[key] = _to_data(file, value_node, at + (key,), lines, ctor)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_data(file, item, at + (i,), lines, ctor) for i, item in enumerate(node.value)]
    try:
        return ctor.construct_object(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}:{node.start_mark.line + 1}: {exc}") from None


def key_str(key_path: Path_) -> str:
    """Render a key path for humans: net.interfaces.ib*.mtu, sys.disk_free_min_gib["/scratch.1"]."""
    out = ""
    for part in key_path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part and "." not in part and " " not in part and "[" not in part:
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out
