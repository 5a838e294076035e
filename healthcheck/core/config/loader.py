"""Load the main config and fabric files, and resolve a node to its effective limits.

Effective limits for a node = its fabric (after `extends`), then every override whose
hostlist pattern contains the node, deep-merged in file order. Every key keeps the
file and line it came from, so `hc config show NODE` and each finding's limit can say
where a threshold was set.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

import msgspec

from healthcheck.core.config.schema import Fabric, MainConfig
from healthcheck.core.config.yamlsrc import Path_, YamlDoc, key_str, load_yaml
from healthcheck.core.errors import ConfigError

EMBEDDED_DIR = Path(__file__).resolve().parents[2] / "configs"
EMBEDDED_DEFAULT = EMBEDDED_DIR / "default.yaml"
SITE_CONFIG = Path("/etc/hc/hc.yaml")

Provenance = dict[Path_, str]  # key path (fabric-relative) -> "file:line"


def default_config_path(env: Mapping[str, str] = os.environ) -> Path:
    """--config, else $HC_CONFIG, else /etc/hc/hc.yaml if present, else the embedded default."""
    if env.get("HC_CONFIG"):
        return Path(env["HC_CONFIG"])
    if SITE_CONFIG.is_file():
        return SITE_CONFIG
    return EMBEDDED_DEFAULT


@dataclass(frozen=True)
class NodeConfig:
    """The effective limits of one node and where each came from."""

    node: str
    fabric_name: str
    limits: Fabric
    provenance: Provenance

    @cached_property
    def _sources_by_key(self) -> dict[str, str]:
        return {key_str(p): where for p, where in self.provenance.items()}

    def source(self, key: str) -> Optional[str]:
        """"file:line" of a dotted key such as "ib.rate_gbps" (deepest known prefix)."""
        by_str = self._sources_by_key
        parts = key.split(".")
        for n in range(len(parts), 0, -1):
            where = by_str.get(".".join(parts[:n]))
            if where is not None:
                return where
        return None

    def leaves(self) -> Iterator[tuple[str, Any, str]]:
        """(key, value, source) for every configured leaf value; defaults say "default"."""
        yield from _leaves(msgspec.to_builtins(self.limits), (), self.provenance)


def _leaves(value: Any, at: Path_, prov: Provenance) -> Iterator[tuple[str, Any, str]]:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from _leaves(v, at + (k,), prov)
        return
    yield key_str(at), value, prov.get(at, "default")


class Config:
    """A loaded main config; fabrics are read on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.doc = load_yaml(path)
        self.main: MainConfig = _convert(self.doc.data, MainConfig, _doc_provenance(self.doc, ()), self.doc)
        self.fabric_dirs = [
            (path.parent / d) if not Path(d).is_absolute() else Path(d) for d in self.main.fabric_dirs
        ] + [EMBEDDED_DIR / "fabrics"]
        self._fabric_docs: dict[str, YamlDoc] = {}
        self._patterns = self._compile_patterns("nodes", self.main.nodes)
        self._override_patterns = self._compile_patterns("overrides", self.main.overrides)
        for pattern, fabric in self.main.nodes.items():
            self._fabric_path(fabric, where=self.doc.where(("nodes", pattern)), key=f"nodes.{pattern}")
        if self.main.default_fabric is not None:
            self._fabric_path(self.main.default_fabric, where=self.doc.where(("default_fabric",)), key="default_fabric")

    # ------------------------------------------------------------------ fabrics

    def fabric_names(self) -> list[str]:
        names: set[str] = set()
        for d in self.fabric_dirs:
            if d.is_dir():
                names.update(p.stem for p in d.glob("*.yaml"))
        return sorted(names)

    def _fabric_path(self, name: str, *, where: str, key: str) -> Path:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
            raise ConfigError(f"{where}: {key}: {name!r} is not a valid fabric name")
        for d in self.fabric_dirs:
            candidate = d / f"{name}.yaml"
            if candidate.is_file():
                return candidate
        known = ", ".join(self.fabric_names()) or "none"
        raise ConfigError(f"{where}: {key}: unknown fabric {name!r} (known: {known})")

    def _fabric_doc(self, name: str, *, where: str, key: str) -> YamlDoc:
        if name not in self._fabric_docs:
            self._fabric_docs[name] = load_yaml(self._fabric_path(name, where=where, key=key))
        return self._fabric_docs[name]

    def fabric_raw(self, name: str, *, where: str = "", key: str = "fabric") -> tuple[dict, Provenance]:
        """The merged raw data of fabric `name` (following `extends`) and its provenance."""
        chain: list[YamlDoc] = []
        seen: list[str] = []
        current: Optional[str] = name
        cur_where, cur_key = where or str(self.path), key
        while current is not None:
            if current in seen:
                raise ConfigError(f"{cur_where}: extends: cycle {' -> '.join(seen + [current])}")
            seen.append(current)
            doc = self._fabric_doc(current, where=cur_where, key=cur_key)
            chain.append(doc)
            parent = doc.data.get("extends") if isinstance(doc.data, dict) else None
            cur_where, cur_key = doc.where(("extends",)), "extends"
            current = parent
        data: dict = {}
        prov: Provenance = {}
        for doc in reversed(chain):
            _merge(data, prov, doc.data, _doc_provenance(doc, ()), ())
        data.pop("extends", None)
        return data, prov

    def fabric(self, name: str) -> Fabric:
        data, prov = self.fabric_raw(name)
        return _convert(data, Fabric, prov, None)

    # -------------------------------------------------------------------- nodes

    def _compile_patterns(self, section: str, mapping: Mapping[str, Any]) -> list[tuple[str, Any]]:
        from ClusterShell.NodeSet import NodeSet, NodeSetException

        compiled = []
        for pattern in mapping:
            try:
                compiled.append((pattern, NodeSet(pattern)))
            except (NodeSetException, ValueError) as exc:
                raise ConfigError(
                    f"{self.doc.where((section, pattern))}: {section}: {pattern!r} is not a valid hostlist: {exc}"
                ) from None
        return compiled

    def fabric_of(self, node: str) -> str:
        matches = [(p, self.main.nodes[p]) for p, ns in self._patterns if node in ns]
        fabrics = {f for _, f in matches}
        if len(fabrics) > 1:
            detail = ", ".join(f"{p} -> {f}" for p, f in matches)
            raise ConfigError(f"{self.path}: nodes: {node} matches patterns of different fabrics ({detail})")
        if fabrics:
            return fabrics.pop()
        if self.main.default_fabric is None:
            raise ConfigError(f"{self.path}: nodes: {node} matches no pattern and there is no default_fabric")
        return self.main.default_fabric

    def for_node(self, node: str) -> NodeConfig:
        fabric_name = self.fabric_of(node)
        pattern = next((p for p, ns in self._patterns if node in ns), None)
        where = self.doc.where(("nodes", pattern) if pattern else ("default_fabric",))
        data, prov = self.fabric_raw(fabric_name, where=where, key=f"nodes.{pattern}" if pattern else "default_fabric")
        for pattern, ns in self._override_patterns:
            if node in ns:
                override = self.main.overrides[pattern]
                if not isinstance(override, dict):
                    raise ConfigError(f"{self.doc.where(('overrides', pattern))}: overrides.{pattern}: must be a mapping")
                _merge(data, prov, copy.deepcopy(override), _doc_provenance(self.doc, ("overrides", pattern)), ())
        limits = _convert(data, Fabric, prov, None)
        return NodeConfig(node=node, fabric_name=fabric_name, limits=limits, provenance=prov)

    # --------------------------------------------------------------- validation

    def validate(self) -> list[str]:
        """Check every fabric, pattern and override; raise on the first error, return notes."""
        notes: list[str] = []
        for name in self.fabric_names():
            self.fabric(name)
        for pattern, override in self.main.overrides.items():
            if not isinstance(override, dict):
                raise ConfigError(f"{self.doc.where(('overrides', pattern))}: overrides.{pattern}: must be a mapping")
            _convert(copy.deepcopy(override), Fabric, _doc_provenance(self.doc, ("overrides", pattern)), None)
        for i, (p1, ns1) in enumerate(self._patterns):
            for p2, ns2 in self._patterns[i + 1 :]:
                both = ns1.intersection(ns2)
                if both and self.main.nodes[p1] != self.main.nodes[p2]:
                    raise ConfigError(
                        f"{self.doc.where(('nodes', p2))}: nodes: {p2!r} overlaps {p1!r} on {both} "
                        f"with a different fabric ({self.main.nodes[p2]} vs {self.main.nodes[p1]})"
                    )
        for pattern, ns in self._override_patterns:
            if not any(ns.intersection(n) for _, n in self._patterns) and self.main.default_fabric is None:
                notes.append(f"{self.doc.where(('overrides', pattern))}: override {pattern} matches no node pattern")
        return notes

    def remote_args(self) -> list[str]:
        """`--config PATH` for hc runs on other nodes (agent mode, srun tasks): the same
        file, which must then be readable at that path there (shared filesystem or
        config management). With the embedded default, nodes use their own config."""
        if self.path.resolve() == EMBEDDED_DEFAULT.resolve():
            return []
        return ["--config", str(self.path.resolve())]

    @property
    def digest(self) -> str:
        """sha256 over the main file and every fabric file hc could read: which config made a report."""
        h = hashlib.sha256(self.doc.raw)
        for d in self.fabric_dirs:
            if d.is_dir():
                for p in sorted(d.glob("*.yaml")):
                    h.update(p.name.encode())
                    h.update(p.read_bytes())
        return "sha256:" + h.hexdigest()


def load_config(path: Optional[Path] = None) -> Config:
    return Config(Path(path) if path is not None else default_config_path())


# ------------------------------------------------------------------ internals


def _doc_provenance(doc: YamlDoc, prefix: Path_) -> Provenance:
    """Lines of doc's keys under `prefix`, re-rooted so `prefix` becomes ()."""
    n = len(prefix)
    return {p[n:]: f"{doc.path}:{line}" for p, line in doc.lines.items() if p[:n] == prefix}


def _merge(base: dict, base_prov: Provenance, over: Any, over_prov: Provenance, at: Path_) -> None:
    """Deep-merge `over` into `base` (mappings merge, anything else replaces), with provenance."""
    if not isinstance(over, dict):
        return
    for key, value in over.items():
        here = at + (key,)
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base_prov[here] = over_prov.get(here, base_prov.get(here, ""))
            _merge(base[key], base_prov, value, over_prov, here)
            continue
        for p in [p for p in base_prov if p[: len(here)] == here]:
            del base_prov[p]
        if value is None:
            # null resets a key to its default: how a refining fabric drops an inherited
            # expectation (e.g. an interface pattern it does not have)
            base.pop(key, None)
            continue
        base[key] = copy.deepcopy(value)
        for p, where in over_prov.items():
            if p[: len(here)] == here:
                base_prov[p] = where


_AT_RE = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_SEG_RE = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_WILD = object()
_PY_NAMES = {str: "str", int: "int", float: "float", bool: "bool", type(None): "null", list: "array", dict: "object"}


def _convert(data: Any, model: type, prov: Provenance, doc: Optional[YamlDoc]) -> Any:
    """msgspec.convert with errors that name file, line and key."""
    try:
        return msgspec.convert(data, model)
    except msgspec.ValidationError as exc:
        raise ConfigError(_explain(str(exc), data, model, prov, doc)) from None


def _explain(msg: str, data: Any, model: type, prov: Provenance, doc: Optional[YamlDoc]) -> str:
    m = _AT_RE.search(msg)
    pattern: list[Any] = []
    if m:
        msg = msg[: m.start()]
        for name, index in _SEG_RE.findall(m.group("path")):
            pattern.append(name if name else (_WILD if index == "..." else int(index)))
    unknown = re.match(r"Object contains unknown field `(.*)`$", msg)
    got = re.search(r"got `(\w+)`", msg)

    def fits(path: Path_) -> bool:
        value = _get(data, path)
        if unknown:
            return isinstance(value, dict) and unknown.group(1) in value
        if got:
            return _PY_NAMES.get(type(value)) == got.group(1)
        return True

    candidates = [p for p in _expand(data, pattern, ()) if fits(p)] or list(_expand(data, pattern, ()))
    path: Path_ = candidates[0] if candidates else tuple(p for p in pattern if p is not _WILD)
    if unknown:
        field = unknown.group(1)
        path = path + (field,)
        allowed = _fields_at(model, path[:-1])
        hint = ""
        if allowed:
            close = difflib.get_close_matches(field, allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(allowed)})"
        msg = f"unknown key {field!r}{hint}"
    else:
        msg = msg[0].lower() + msg[1:] if msg else "invalid value"
        msg = msg.replace("`", "")
    where = _where(prov, path) or (str(doc.path) if doc else "config")
    return f"{where}: {key_str(path) or '(top level)'}: {msg}"


def _where(prov: Provenance, path: Path_) -> Optional[str]:
    for n in range(len(path), -1, -1):
        where = prov.get(tuple(path[:n]))
        if where:
            return where
    return None


def _get(data: Any, path: Path_) -> Any:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _expand(data: Any, pattern: list[Any], at: Path_) -> Iterator[Path_]:
    if not pattern:
        yield at
        return
    head, rest = pattern[0], pattern[1:]
    if head is _WILD:
        keys = list(data.keys()) if isinstance(data, dict) else range(len(data)) if isinstance(data, list) else []
        for k in keys:
            yield from _expand(data[k], rest, at + (k,))
    elif isinstance(data, dict) and head in data:
        yield from _expand(data[head], rest, at + (head,))
    elif isinstance(data, list) and isinstance(head, int) and head < len(data):
        yield from _expand(data[head], rest, at + (head,))
    else:
        yield at + tuple(p for p in pattern if p is not _WILD)


def _fields_at(model: Any, path: Path_) -> list[str]:
    """Field names of the Struct reached by following `path` from `model`, if any."""
    import typing

    tp = model
    for part in path:
        while typing.get_origin(tp) is typing.Union:
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
            fields = {f.name: f.type for f in msgspec.structs.fields(tp)}
            if part not in fields:
                return []
            tp = fields[part]
        elif typing.get_origin(tp) in (dict, list):
            tp = typing.get_args(tp)[-1]
        else:
            return []
    while typing.get_origin(tp) is typing.Union:
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return [f.name for f in msgspec.structs.fields(tp)]
    return []
