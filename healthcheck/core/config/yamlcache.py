"""Config files parsed once, not at every hook: the parse of each file (its data and the
line of every key) is kept in a cache directory, keyed by the file's bytes, hc's version and
the parser's file (one entry per install on a node), so a prologue whose config has not
changed reads its files and never imports or runs PyYAML.

An entry is used only when everything about it checks out: the directory and the entry
are owned by this user and writable by no one else (a cache another user could write
would let them choose the limits a node is judged by), the entry decodes, and it names
the same hc version, the same parser (its module file's size and time) and the sha256 of
the very bytes just read. Anything else (no directory, a corrupt or foreign entry, a
full disk) is ignored and the file parsed as if there were no cache: the cache can make
a run faster, never different. A parse that could not be stored exactly (a YAML date, a
set) is simply not cached.

The directory: $HC_CACHE_DIR (empty: no cache), else /var/cache/hc/config for root (the
hooks), else none. It is bounded: each store (a miss, so never on a warm prologue) leaves at
most MAX_ENTRIES entries, the oldest written removed first; a node has a few config files,
but every edit of one, every upgrade and every test's config made a new entry and none was
ever removed (15,000 on a test machine).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import stat
from pathlib import Path
from typing import Any

import msgspec

from healthcheck import __version__
from healthcheck.core.atomic import write_atomic
from healthcheck.core.config.docs import Path_, YamlDoc, read_config

PARSER_MODULE = "healthcheck.core.config.yamlsrc"  # imported only on a miss
PARSER_FILE = Path(__file__).with_name("yamlsrc.py")
ROOT_CACHE_DIR = Path("/var/cache/hc/config")
MAX_ENTRY_BYTES = 16 * 1024 * 1024
MAX_ENTRIES = 256  # entries kept; an entry pruned while still in use is parsed and stored again
ENTRY_NAME = re.compile(r"[0-9a-f]{40}\.msgpack")
FORMAT = 1


def cache_dir(env: Any = os.environ) -> Path | None:
    """Where parses are kept, or None for no cache."""
    if "HC_CACHE_DIR" in env:
        return Path(env["HC_CACHE_DIR"]) if env["HC_CACHE_DIR"] else None
    return ROOT_CACHE_DIR if os.geteuid() == 0 else None


def load_yaml(path: Path) -> YamlDoc:
    """`yamlsrc.load_yaml(path)`, from the cache when it holds these bytes' parse."""
    raw = read_config(path)
    directory = cache_dir()
    if directory is None:
        return _parse(path, raw)
    digest = hashlib.sha256(raw).hexdigest()
    stamp = _stamp(digest)
    entry = entry_for(directory, stamp)
    cached = _read_entry(directory, entry, stamp)
    if cached is not None:
        return YamlDoc(path, cached[0], cached[1], raw)
    doc = _parse(path, raw)
    _store(directory, entry, stamp, doc)
    return doc


def entry_for(directory: Path, stamp: list[Any]) -> Path:
    """The entry of one stamp. Named by the whole stamp, not the file's bytes alone: two
    installs of hc on one node (an upgrade under way, a pipx beside a package, checkouts side
    by side) keep an entry each instead of overwriting each other's at every run."""
    return directory / f"{hashlib.sha256(repr(stamp).encode()).hexdigest()[:40]}.msgpack"


def _parse(path: Path, raw: bytes) -> YamlDoc:
    doc: YamlDoc = importlib.import_module(PARSER_MODULE).parse_yaml(path, raw)
    return doc


def _stamp(digest: str) -> list[Any]:
    """What an entry must name to be used: its format, hc's version, the parser's file, the bytes."""
    try:
        st = os.stat(PARSER_FILE)
        parser = [st.st_size, st.st_mtime_ns]
    except OSError:
        parser = [-1, -1]  # no parser file to compare (a zipped install): never matches a stored one
    return [FORMAT, __version__, *parser, digest]


def _trusted(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _read_entry(directory: Path, entry: Path, stamp: list[Any]) -> tuple[Any, dict[Path_, int]] | None:
    """(data, lines) of a trustworthy entry for `stamp`, else None."""
    try:
        if not _trusted_dir(directory):
            return None
        fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not _trusted(st) or st.st_size > MAX_ENTRY_BYTES:
                return None
            blob = os.read(fd, MAX_ENTRY_BYTES + 1)
        finally:
            os.close(fd)
        doc = msgspec.msgpack.decode(blob)
        if not isinstance(doc, list) or len(doc) != 3 or doc[0] != stamp or not isinstance(doc[2], list):
            return None
        lines = {tuple(key): line for key, line in doc[2]}
        return doc[1], lines
    except Exception:  # missing, unreadable, corrupt, a shape no writer made: parse instead
        return None


def _trusted_dir(directory: Path) -> bool:
    st = os.lstat(directory)
    return stat.S_ISDIR(st.st_mode) and _trusted(st)


def _store(directory: Path, entry: Path, stamp: list[Any], doc: YamlDoc) -> None:
    """Keep the parse, when it survives the round trip unchanged; never an error."""
    try:
        lines = [[list(key), line] for key, line in doc.lines.items()]
        blob = msgspec.msgpack.encode([stamp, doc.data, lines])
        back = msgspec.msgpack.decode(blob)
        if not _same(back[1], doc.data):
            return  # a date or a set: stored, it would come back as something else
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if _trusted_dir(directory):
            write_atomic(entry, blob, mode=0o600)
            prune(directory, keep=entry)
    except Exception:  # read-only, full, not ours: the next run parses again
        return


def prune(directory: Path, keep: Path, limit: int | None = None) -> None:
    """Leave at most `limit` (MAX_ENTRIES) entries, the oldest written removed first, never
    `keep` (the one just stored) nor anything that is not an entry's name; never an error."""
    limit = MAX_ENTRIES if limit is None else limit
    aged: list[tuple[int, str]] = []
    with os.scandir(directory) as found:
        for item in found:
            if ENTRY_NAME.fullmatch(item.name) and item.name != keep.name:
                try:
                    aged.append((item.stat(follow_symlinks=False).st_mtime_ns, item.name))
                except OSError:
                    continue  # removed meanwhile (another hook pruning)
    for _, name in sorted(aged)[:max(0, len(aged) + 1 - limit)]:
        try:
            os.unlink(directory / name)
        except OSError:
            continue


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (1 == 1.0 == True for ==)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):  # msgpack keeps the order of a mapping's keys
        return len(a) == len(b) and all(type(ka) is type(kb) and ka == kb and _same(va, vb)
                                        for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True))
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
