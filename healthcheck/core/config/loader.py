"""Load the main config and fabric files, and resolve a node to its effective limits.

Effective limits for a node = its fabric (after `extends`), then every override whose
hostlist pattern contains the node, deep-merged in file order. Every key keeps the
file and line it came from, so `hc config show NODE` and each finding's limit can say
where a threshold was set.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import msgspec

from healthcheck.core import typed
from healthcheck.core.config.docs import Path_, YamlDoc, key_str
from healthcheck.core.config.schema import PATTERN_WORDS, Fabric, MainConfig, value_problems
from healthcheck.core.config.yamlcache import load_yaml
from healthcheck.core.errors import ConfigError, HcError
from healthcheck.core.inputs import CONFIG_MAX_BYTES, clip, read_bounded
from healthcheck.core.lazyre import lazy_compile
from healthcheck.core.nodes import Hostlist, HostlistError, overlapping, parse_hostlist

EMBEDDED_DIR = Path(__file__).resolve().parents[2] / "configs"
EMBEDDED_DEFAULT = EMBEDDED_DIR / "default.yaml"
SITE_CONFIG = Path("/etc/hc/hc.yaml")

Provenance = dict[Path_, str]  # key path (fabric-relative) -> "file:line"
FABRIC_NAME_RE = r"[A-Za-z0-9][A-Za-z0-9._-]*"  # a fabric's name is its file's, without .yaml


class ExtendsCycle(ConfigError):
    """Fabrics whose `extends` lead back to one of them: no node of theirs can be resolved."""

    def __init__(self, where: str, chain: list[str]) -> None:
        self.chain = chain
        super().__init__(f"{where}: extends: cycle {' -> '.join(chain)}")


def default_config_path(env: Mapping[str, str] = os.environ) -> Path:
    """--config, else $HC_CONFIG, else /etc/hc/hc.yaml if present, else the embedded default."""
    if env.get("HC_CONFIG"):
        return Path(env["HC_CONFIG"])
    if SITE_CONFIG.is_file():
        return SITE_CONFIG
    return EMBEDDED_DEFAULT


class NodeConfig(msgspec.Struct, frozen=True, dict=True):
    """The effective limits of one node and where each came from."""

    node: str
    fabric_name: str
    limits: Fabric
    provenance: Provenance

    @cached_property
    def _sources_by_key(self) -> dict[str, str]:
        return {key_str(p): where for p, where in self.provenance.items()}

    def source(self, key: str) -> str | None:
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
        if not self.doc.data:
            # nothing set: no node could be resolved, and a truncated or blanked file
            # must not pass for a config
            raise ConfigError(f"{path}: the config file is empty (it needs at least default_fabric or nodes)")
        self.main: MainConfig = _convert(self.doc.data, MainConfig, _doc_provenance(self.doc, ()), self.doc)
        self.fabric_dirs = self._site_fabric_dirs() + [EMBEDDED_DIR / "fabrics"]
        self._fabric_docs: dict[Path, YamlDoc] = {}
        # (name, below) -> its file: for_node runs once per node of a sweep, without a stat per node
        self._fabric_paths: dict[tuple[str, Path | None], Path] = {}
        self._patterns = self._compile_patterns("nodes", self.main.nodes)
        self._override_patterns = self._compile_patterns("overrides", self.main.overrides)
        self._rail_patterns = self._compile_patterns("rails", self.main.rails)
        for pattern, fabric in self.main.nodes.items():
            self._fabric_path(fabric, where=self.doc.where(("nodes", pattern)), key=f"nodes.{pattern}")
        if self.main.default_fabric is not None:
            self._fabric_path(self.main.default_fabric, where=self.doc.where(("default_fabric",)), key="default_fabric")

    def _site_fabric_dirs(self) -> list[Path]:
        """fabric_dirs, relative to the main file. A directory named there must exist: a
        missing one would silently let hc's shipped fabric of the same name stand in."""
        dirs = [(self.path.parent / d) if not Path(d).is_absolute() else Path(d) for d in self.main.fabric_dirs]
        if "fabric_dirs" in self.doc.data:
            for i, d in enumerate(dirs):
                if not d.is_dir():
                    what = "does not exist" if not d.exists() else "is not a directory"
                    raise ConfigError(f"{self.doc.where(('fabric_dirs', i))}: fabric_dirs[{i}]: {d} {what}")
        return dirs

    # ------------------------------------------------------------------ fabrics

    def fabric_names(self) -> list[str]:
        names: set[str] = set()
        for d in self.fabric_dirs:
            if d.is_dir():
                names.update(p.stem for p in d.glob("*.yaml"))
        return sorted(names)

    def _fabric_path(self, name: str, *, where: str, key: str, below: Path | None = None) -> Path:
        """The file of fabric `name`: the first `name`.yaml in fabric_dirs, then hc's own.

        below: the file of a fabric that extends its own name. It refines the next file of
        that name in the search order (a site's h100-ndr400.yaml, as `hc baseline` writes
        it, over hc's own), so the search starts after the directory `below` is in, or,
        for a file outside fabric_dirs, anywhere but `below` itself.
        """
        if not isinstance(name, str) or not re.fullmatch(FABRIC_NAME_RE, name):
            raise ConfigError(f"{where}: {key}: {name!r} is not a valid fabric name")
        found = self._fabric_paths.get((name, below))
        if found is None:
            found = self._fabric_paths[(name, below)] = self._find_fabric(name, where=where, key=key, below=below)
        return found

    def _find_fabric(self, name: str, *, where: str, key: str, below: Path | None) -> Path:
        dirs = self.fabric_dirs
        if below is not None:
            below = below.resolve()
            at = next((i for i, d in enumerate(dirs) if d.resolve() == below.parent), None)
            dirs = dirs[at + 1:] if at is not None else dirs
        for d in dirs:
            candidate = d / f"{name}.yaml"
            if below is not None and candidate.resolve() == below:
                continue
            if candidate.is_file():
                return candidate
            if candidate.exists():  # a FIFO or device would hang or flood the reader
                raise ConfigError(f"{where}: {key}: {candidate} is not a regular file")
        if below is not None:
            raise ConfigError(f"{where}: {key}: no fabric {name!r} after {below} to refine (a fabric that extends "
                              f"its own name refines the next {name}.yaml in fabric_dirs, then hc's own)")
        known = ", ".join(self.fabric_names()) or "none"
        raise ConfigError(f"{where}: {key}: unknown fabric {name!r} (known: {known})")

    def _fabric_doc(self, path: Path) -> YamlDoc:
        if path not in self._fabric_docs:
            self._fabric_docs[path] = load_yaml(path)
        return self._fabric_docs[path]

    def fabric_raw(self, name: str, *, where: str = "", key: str = "fabric", below: Path | None = None,
                   child: tuple[str, Path] | None = None) -> tuple[dict, Provenance]:
        """The merged raw data of fabric `name` (following `extends`) and its provenance.

        below: look `name` up after this file (see _fabric_path): what a file of that
        name extending itself refines.
        child: (its fabric name, its file) of the file whose `extends` names `name`, as it
        will be once installed in fabric_dirs: a lookup of that name (other than the
        refinement of its own) finds that file, so `extends` coming back to it is the
        cycle it will be (ExtendsCycle)."""
        chain: list[YamlDoc] = []
        seen: list[str] = [child[0]] if child else []
        files: set[Path] = {child[1]} if child else set()
        current: str | None = name
        cur_where, cur_key = where or str(self.path), key
        while current is not None:
            if not isinstance(current, str):
                raise ConfigError(f"{cur_where}: {cur_key}: expected a fabric name, got {type(current).__name__}")
            if child is not None and current == child[0] and below is None:
                path = child[1]
            else:
                path = self._fabric_path(current, where=cur_where, key=cur_key, below=below)
            if path in files:  # the same name and place give the same path: a cycle
                raise ExtendsCycle(cur_where, seen + [current])
            files.add(path)
            seen.append(current)
            doc = self._fabric_doc(path)
            chain.append(doc)
            parent = doc.data.get("extends") if isinstance(doc.data, dict) else None
            cur_where, cur_key = doc.where(("extends",)), "extends"
            below = path if parent == current else None
            current = parent
        data: dict = {}
        prov: Provenance = {}
        for doc in reversed(chain):
            _merge(data, prov, doc.data, _doc_provenance(doc, ()), ())
        data.pop("extends", None)
        return data, prov

    def fabric(self, name: str, *, below: Path | None = None) -> Fabric:
        data, prov = self.fabric_raw(name, below=below)
        return _convert(data, Fabric, prov, None)

    def fabric_file(self, path: Path, *, instead_of: Path | None = None) -> tuple[Fabric, Provenance]:
        """A fabric file read on its own (`hc config validate FILE`), its `extends` looked up in
        this config's fabric_dirs (one extending its own name: after FILE, see _fabric_path),
        as it will be once FILE is installed there as fabric <its name>: a chain that comes
        back to that name is a cycle (ExtendsCycle), wherever FILE is now.

        instead_of: where FILE is about to be written (`hc baseline` checks its output before
        replacing that path): `extends` is looked up as it will be from there."""
        doc = load_yaml(path)
        data: dict = {}
        prov: Provenance = {}
        parent = doc.data.get("extends")
        at = instead_of or path
        if parent is not None:
            data, prov = self.fabric_raw(parent, where=doc.where(("extends",)), key="extends",
                                         below=at if parent == at.stem else None, child=(at.stem, path))
        _merge(data, prov, doc.data, _doc_provenance(doc, ()), ())  # keeps FILE's own `extends`
        return _convert(data, Fabric, prov, None), prov

    # -------------------------------------------------------------------- nodes

    def _compile_patterns(self, section: str, mapping: Mapping[str, Any]) -> list[tuple[str, Hostlist]]:
        # membership is decided without expanding a pattern: "gpu[1-1000000000]" costs
        # a prologue what "gpu[1-10]" does (see healthcheck.core.nodes)
        compiled = []
        for pattern in mapping:
            try:
                compiled.append((pattern, parse_hostlist(pattern)))
            except HostlistError as exc:
                raise ConfigError(  # ascii(): a bidi override must not reorder the message itself
                    f"{self.doc.where((section, pattern))}: {section}: {ascii(clip(pattern))} "
                    f"is not a valid hostlist: {exc}"
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

    def rail_of(self, node: str) -> str | None:
        """The leaf switch or rail group `rails` puts the node under (the first pattern that
        names it), or None."""
        return next((self.main.rails[p] for p, ns in self._rail_patterns if node in ns), None)

    def for_node(self, node: str) -> NodeConfig:
        fabric_name = self.fabric_of(node)
        pattern = next((p for p, ns in self._patterns if node in ns), None)
        where = self.doc.where(("nodes", pattern) if pattern else ("default_fabric",))
        data, prov = self.fabric_raw(fabric_name, where=where, key=f"nodes.{pattern}" if pattern else "default_fabric")
        for pattern, ns in self._override_patterns:
            if node in ns:
                override = self.main.overrides[pattern]
                if not isinstance(override, dict):
                    raise ConfigError(
                        f"{self.doc.where(('overrides', pattern))}: overrides.{pattern}: must be a mapping")
                _merge(data, prov, copy.deepcopy(override), _doc_provenance(self.doc, ("overrides", pattern)), ())
        limits = _convert(data, Fabric, prov, None)
        return NodeConfig(node=node, fabric_name=fabric_name, limits=limits, provenance=prov)

    # --------------------------------------------------------------- validation

    def validate(self) -> list[str]:
        """Check every fabric, pattern and override; raise on the first error, return notes.

        Patterns are compared through nodes.overlapping (a sweep, not every pair against
        every other: 20,000 node patterns take what 2,000 take, times ten and a log)."""
        notes: list[str] = []
        for name in self.fabric_names():
            self.fabric(name)
        self._check_node_patterns()
        reached = self._override_fabrics()
        for k, (pattern, _) in enumerate(self._override_patterns):
            where = self.doc.where(("overrides", pattern))
            override = self.main.overrides[pattern]
            if not isinstance(override, dict):
                raise ConfigError(f"{where}: overrides.{pattern}: must be a mapping")
            _convert(copy.deepcopy(override), Fabric, _doc_provenance(self.doc, ("overrides", pattern)), None)
            fabrics = reached.get(k, set())
            if not fabrics and self.main.default_fabric is None:
                notes.append(f"{where}: override {pattern} matches no node pattern")
            if self.main.default_fabric is not None:
                fabrics.add(self.main.default_fabric)
            for name in sorted(fabrics):
                # ranges across keys (mtu_min <= mtu_max) hold only for the merged result
                data, prov = self.fabric_raw(name, where=where, key=f"overrides.{pattern}")
                _merge(data, prov, copy.deepcopy(override), _doc_provenance(self.doc, ("overrides", pattern)), ())
                _convert(data, Fabric, prov, None)
        return notes

    def _check_node_patterns(self) -> None:
        """ConfigError where two node patterns of different fabrics name the same node."""
        patterns = self._patterns
        pairs = self._overlapping([ns for _, ns in patterns], [self.main.nodes[p] for p, _ in patterns],
                                  lambda a, b: a != b, "nodes")
        for i, j in pairs:  # the first is enough
            (p1, ns1), (p2, ns2) = patterns[i], patterns[j]
            both = self._overlap(ns1, ns2, ("nodes", p2))
            raise ConfigError(
                f"{self.doc.where(('nodes', p2))}: nodes: {p2!r} overlaps {p1!r} on {both} "
                f"with a different fabric ({self.main.nodes[p2]} vs {self.main.nodes[p1]})"
            )

    def _override_fabrics(self) -> dict[int, set[str]]:
        """The fabrics of the node patterns each override (by index) shares a node with."""
        overrides, patterns = self._override_patterns, self._patterns
        hostlists = [ns for _, ns in overrides] + [ns for _, ns in patterns]
        kinds = ["override"] * len(overrides) + ["nodes"] * len(patterns)
        reached: dict[int, set[str]] = {}
        for i, j in self._overlapping(hostlists, kinds, lambda a, b: a != b, "overrides"):
            reached.setdefault(i, set()).add(self.main.nodes[patterns[j - len(overrides)][0]])
        return reached

    def _overlapping(self, hostlists: list[Hostlist], groups: list[str], apart: Callable[[Any, Any], bool],
                     section: str) -> Iterator[tuple[int, int]]:
        try:
            yield from overlapping(hostlists, groups, apart)
        except HostlistError as exc:  # a pattern with operators that cannot be listed
            raise ConfigError(f"{self.doc.where((section,))}: {section}: {exc}") from None

    def _overlap(self, a: Hostlist, b: Hostlist, at: Path_) -> str | None:
        try:
            return a.overlap(b)
        except HostlistError as exc:
            raise ConfigError(f"{self.doc.where(at)}: {key_str(at[:1])}: {exc}") from None

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
                    try:
                        # bounded, and never blocking on a FIFO dropped into a fabric dir
                        h.update(read_bounded(p, CONFIG_MAX_BYTES, what="fabric file"))
                    except HcError as exc:
                        raise ConfigError(str(exc)) from None
        return "sha256:" + h.hexdigest()


def load_config(path: Path | None = None) -> Config:
    return Config(Path(path) if path is not None else default_config_path())


def is_fabric_file(path: Path) -> bool:
    """Whether `path` holds a fabric (its keys are a fabric's, none a main config's), so that
    `hc config validate FILE` can validate either kind of file."""
    data = load_yaml(path).data
    keys = set(data) if isinstance(data, dict) else set()
    return bool(keys & set(Fabric.__struct_fields__)) and not keys & set(MainConfig.__struct_fields__)


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


_AT_RE = lazy_compile(r" - at `\$(?P<path>[^`]*)`$")
_SEG_RE = lazy_compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_WILD = object()
_PY_NAMES = {str: "str", int: "int", float: "float", bool: "bool", type(None): "null", list: "array", dict: "object"}


def _convert(data: Any, model: type, prov: Provenance, doc: YamlDoc | None) -> Any:
    """msgspec.convert (types and ranges), then the rules across keys; errors name file,
    line and key."""
    try:
        value = typed.convert(data, model)
    except msgspec.ValidationError as exc:
        raise ConfigError(_explain(str(exc), data, model, prov, doc)) from None
    for path, message, related in value_problems(value):
        raise ConfigError(_explain_rule(path, message, related, prov, doc))
    return value


def _explain_rule(path: Path_, message: str, related: tuple[Path_, ...], prov: Provenance,
                  doc: YamlDoc | None) -> str:
    """A broken rule, named at the key an operator most likely just changed: one set in a
    site file before one from hc's shipped fabrics (an override's mtu_max below the shipped
    mtu_min is the override's mistake); the other keys' lines follow."""
    keys = [path, *related]
    shipped = str(EMBEDDED_DIR)
    keys.sort(key=lambda k: (prov.get(k) is None, (prov.get(k) or "").startswith(shipped)))
    named, others = keys[0], keys[1:]
    where = _where(prov, named) or (str(doc.path) if doc else "config")
    also = [f"{key_str(k)} is set at {w}" for k in others if (w := prov.get(k)) and w != prov.get(named)]
    return f"{where}: {key_str(named)}: {message}" + (f" ({'; '.join(also)})" if also else "")


_KEY_AT_RE = lazy_compile(r" - at `key` in `\$(?P<path>[^`]*)`$")


def _explain(msg: str, data: Any, model: type, prov: Provenance, doc: YamlDoc | None) -> str:
    at = _AT_RE.search(msg)
    m = at or _KEY_AT_RE.search(msg)
    in_key = at is None and m is not None  # the error is about a mapping's key
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
        if got and not in_key:
            return _PY_NAMES.get(type(value)) == got.group(1)
        # a range or key error: the candidate whose value (or one of whose keys) fails
        return _fails(value, _type_at(model, path), keys=in_key)

    candidates = [p for p in _expand(data, pattern, ()) if fits(p)] or list(_expand(data, pattern, ()))
    path: Path_ = candidates[0] if candidates else tuple(p for p in pattern if p is not _WILD)
    if in_key:
        bad = _bad_key(_get(data, path), _type_at(model, path))
        if bad is not None:
            path = path + (bad,)
    if unknown:
        field = unknown.group(1)
        path = path + (field,)
        allowed = _fields_at(model, path[:-1])
        hint = ""
        if allowed:
            import difflib  # noqa: PLC0415 -- only for a key the schema does not know; not on a run's path

            close = difflib.get_close_matches(field, allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(allowed)})"
        msg = f"unknown key {field!r}{hint}"
    else:
        msg = _words(msg[0].lower() + msg[1:] if msg else "invalid value")
        value = _get(data, path)
        if isinstance(value, float) and not math.isfinite(value):
            msg = f"expected a finite number, got {value}"
        elif msg.startswith("expected") and not (in_key or got) and isinstance(value, (str, int, float)):
            msg += f", got {clip(repr(value), 80)}"  # a range error: say what was there
    where = _where(prov, path) or (str(doc.path) if doc else "config")
    return f"{where}: {key_str(path) or '(top level)'}: {msg}"


def _words(msg: str) -> str:
    """msgspec's message, without backticks and with regexes said in words."""
    msg = msg.replace("`", "")
    for regex, words in PATTERN_WORDS.items():
        msg = msg.replace(f"str matching regex {regex!r}", words)
    return msg


def _type_at(model: Any, path: Path_) -> Any:
    """The annotated type at `path` below `model` (Any where the path leaves the schema)."""

    tp = model
    for part in path:
        tp = _bare(tp)
        if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
            tp = {f.name: f.type for f in msgspec.structs.fields(tp)}.get(part, Any)
        elif typing.get_origin(tp) in (dict, list):
            tp = typing.get_args(tp)[-1]
        else:
            return Any
    return tp


def _bare(tp: Any) -> Any:
    """Through Optional and Annotated to the container or Struct type."""

    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        else:
            return tp


def _fails(value: Any, tp: Any, *, keys: bool = False) -> bool:
    if tp is Any:
        return True
    if keys:
        return _bad_key(value, tp) is not None
    try:
        typed.convert(value, tp)
    except msgspec.ValidationError:
        return True
    return False


def _bad_key(mapping: Any, tp: Any) -> Any:
    """The first key of `mapping` that its dict type `tp` refuses, if any."""

    tp = _bare(tp)
    if not isinstance(mapping, dict) or typing.get_origin(tp) is not dict:
        return None
    key_type = typing.get_args(tp)[0]
    for key in mapping:
        if _fails(key, key_type):
            return key
    return None


def _where(prov: Provenance, path: Path_) -> str | None:
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
    elif (isinstance(data, dict) and head in data) or (
        isinstance(data, list) and isinstance(head, int) and head < len(data)
    ):
        yield from _expand(data[head], rest, at + (head,))
    else:
        yield at + tuple(p for p in pattern if p is not _WILD)


def _fields_at(model: Any, path: Path_) -> list[str]:
    """Field names of the Struct reached by following `path` from `model`, if any."""
    tp = _bare(_type_at(model, path))
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return [f.name for f in msgspec.structs.fields(tp)]
    return []
