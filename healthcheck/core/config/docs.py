"""A config file as hc holds it once parsed (its data and the line of every key), read
from disk with the bounds every config file gets. Imports no YAML library: the parse
is core/config/yamlsrc.py's, and a cached parse (core/config/yamlcache.py) needs none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from healthcheck.core.errors import ConfigError, HcError
from healthcheck.core.inputs import CONFIG_MAX_BYTES, InputNotFound, read_bounded

Path_ = tuple[Any, ...]  # a key path: ("net", "interfaces", "ib*", "mtu")


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


def read_config(path: Path) -> bytes:
    """The bytes of a config file, read with a size cap and only if it is a regular file
    (a FIFO or /dev/zero named as a config must not hang or exhaust a prologue)."""
    try:
        return read_bounded(path, CONFIG_MAX_BYTES, what="config file", regular_only=True)
    except InputNotFound:
        raise ConfigError(f"{path}: config file not found") from None
    except HcError as exc:  # a directory, FIFO, device, unreadable or too large
        raise ConfigError(str(exc)) from None


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
