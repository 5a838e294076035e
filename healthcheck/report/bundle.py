"""Evidence bundles (`hc report bundle`): redaction, size caps, the manifest and the tarball.

Pure: the items come from orchestrate/bundle.py (what hc stored about a node, what it
could collect live); this module redacts them, bounds them, lists them in a manifest
(MANIFEST.json and README.txt, every item with its source and size, every item not
collected with the reason) and makes one reproducible .tar.gz of them: members sorted,
relative names of safe characters under one top directory, regular files only, mode
0644, owner 0:0, every mtime (and gzip's) the newest evidence's or 0.

Redaction (`Redactor`): values whose NAME looks secret (`secret_name`: TOKEN, SECRET,
PASSWORD, KEY, AUTH, COOKIE, SESSION, CREDENTIAL...) in key=value and key: value text
and under such keys in JSON; Authorization headers and bearer/basic credentials; the
user:password of a URL; and literal values the caller names (the config's webhook URL,
its token file's line, the values of secret-named environment variables) wherever
they appear. Each becomes `<redacted>`; the manifest counts them per item, never
showing a value.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import io
import json
import re
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

BUNDLE_SCHEMA = "hc.bundle/1"
REDACTED = "<redacted>"
MIB = 1024 * 1024
DEFAULT_ITEM_CAP = 5 * MIB
DEFAULT_TOTAL_CAP = 50 * MIB
MIN_LITERAL = 6  # a shorter "secret" (a flag, a digit) would redact half of every file

# a name part (split on punctuation and case changes) that makes a name secret
_SECRET_PARTS = frozenset({"TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD", "PASSPHRASE",
                           "KEY", "KEYS", "APIKEY", "CREDENTIAL", "CREDENTIALS", "CREDS", "AUTH", "AUTHORIZATION",
                           "COOKIE", "COOKIES", "SESSION", "SESSIONID", "PRIVATE", "SIGNATURE"})
# ... or anywhere in it (GITHUB_TOKEN, MYSECRET, XAUTHTOKEN)
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "COOKIE", "APIKEY")
# names hc writes whose values are no secret: a limit's config key, the token header's name, a path
_NOT_SECRET = frozenset({"key", "token_header", "token_file", "session_count"})
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_AUTH_HEADER = re.compile(r"(?im)^(?P<head>[ \t]*(?:proxy-)?authorization[ \t]*:[ \t]*)(?P<value>\S.*?)[ \t]*$")
_BEARER = re.compile(r"\b(?P<scheme>[Bb]earer|BEARER|Basic|BASIC|Digest|DIGEST)[ \t]+"
                     r"(?P<value>[A-Za-z0-9._~+/-]{8,}=*)")
_URL_USERINFO = re.compile(r"\b(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s:@\"'<>]+:[^/\s@\"'<>]*)@")
_NAME_SEP = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?P<q1>[\"']?)[ \t]*[=:][ \t]*")
_VALUE = re.compile(r"(?P<quote>[\"'])(?P<quoted>[^\"'\n]*)(?P=quote)|(?P<bare>[^\s\"',;&}\]]+)")
_UNREDACTED = frozenset({"", "null", "none", "true", "false", "~", REDACTED, "bearer", "basic", "digest"})


def secret_name(name: str) -> bool:
    """Whether a variable or key of this name holds a secret (its value is redacted)."""
    if name in _NOT_SECRET:
        return False
    upper = name.upper()
    if any(word in upper for word in _SECRET_WORDS):
        return True
    return any(part.upper() in _SECRET_PARTS for part in _PARTS.findall(name))


def secret_values(env: dict[str, str]) -> list[str]:
    """The values of the secret-named variables of `env` long enough to look for elsewhere."""
    return [value for name, value in env.items() if secret_name(name) and len(value.strip()) >= MIN_LITERAL]


class Redactor:
    """Replaces secrets by `<redacted>`, counting what it replaced."""

    def __init__(self, literals: Iterable[str] = ()) -> None:
        # longest first: a webhook URL before the token inside it
        self.literals = sorted({s.strip() for s in literals if len(s.strip()) >= MIN_LITERAL}, key=len, reverse=True)

    def text(self, text: str) -> tuple[str, int]:
        """`text` with its secrets replaced, and how many were."""
        count = 0
        for literal in self.literals:
            if literal in text:
                count += text.count(literal)
                text = text.replace(literal, REDACTED)
        text, n = _AUTH_HEADER.subn(lambda m: m.group("head") + REDACTED if m.group("value") != REDACTED
                                    else m.group(0), text)
        count += n
        text, n = _BEARER.subn(lambda m: f"{m.group('scheme')} {REDACTED}", text)
        count += n
        text, n = _URL_USERINFO.subn(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
        count += n
        text, n = _pairs(text)
        return text, count + n

    def value(self, obj: Any) -> tuple[Any, int]:
        """A JSON-able value with the values under secret-named keys and the secrets in its strings replaced."""
        if isinstance(obj, dict):
            out: dict[str, Any] = {}
            count = 0
            for key, item in obj.items():
                if secret_name(str(key)) and item not in (None, True, False, "", REDACTED) and \
                        not isinstance(item, (dict, list)):
                    out[key], count = REDACTED, count + 1
                    continue
                out[key], n = self.value(item)
                count += n
            return out, count
        if isinstance(obj, (list, tuple)):
            items = [self.value(item) for item in obj]
            return [v for v, _ in items], sum(n for _, n in items)
        if isinstance(obj, str):
            return self.text(obj)
        return obj, 0


def _pairs(text: str) -> tuple[str, int]:
    """The values of secret-named pairs (name=value, name: value, "name": "value") redacted.

    A name and its separator are matched alone, and the value read after them only for a
    secret name, so a pair whose value holds another (`database: db_password=x`) is seen."""
    out: list[str] = []
    pos, count = 0, 0
    for m in _NAME_SEP.finditer(text):
        if m.start() < pos or not secret_name(m.group("name")):
            continue
        v = _VALUE.match(text, m.end())
        if v is None:
            continue
        value = v.group("quoted") if v.group("quote") else v.group("bare")
        if value.strip().lower() in _UNREDACTED:
            continue
        quote = v.group("quote") or ""
        out += [text[pos:v.start()], f"{quote}{REDACTED}{quote}"]
        pos, count = v.end(), count + 1
    out.append(text[pos:])
    return "".join(out), count


@dataclass(frozen=True)
class Item:
    """One member of the bundle: its name under the bundle's directory, what it holds
    (text or a JSON-able value), where it came from, and when it was true."""

    name: str
    source: str
    text: str | None = None
    data: Any = None  # encoded as JSON when text is None
    mtime: float | None = None  # epoch seconds of the evidence; None: not known
    keep: str = "head"  # what a cut keeps: "head", or "tail" (a log's newest lines)


@dataclass(frozen=True)
class Missing:
    """Something the bundle would hold but does not, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class Caps:
    item: int = DEFAULT_ITEM_CAP
    total: int = DEFAULT_TOTAL_CAP


@dataclass
class Built:
    """The tarball's bytes and its manifest."""

    data: bytes
    manifest: dict[str, Any]
    redacted: int = 0
    members: list[str] = field(default_factory=list)


_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_name(name: str) -> str:
    """A relative member name of safe characters: no leading '/', no '.' or '..' part, nothing empty."""
    parts = []
    for part in name.replace("\\", "/").split("/"):
        part = _SAFE.sub("_", part)[:120]
        if not part:
            continue
        if set(part) == {"."}:
            part = "_" * len(part)
        parts.append(part)
    return "/".join(parts) or "_"


def _encoded(item: Item, redactor: Redactor) -> tuple[bytes, int]:
    if item.text is not None:
        text, count = redactor.text(item.text)
        return text.encode("utf-8", "replace"), count
    value, count = redactor.value(item.data)
    return (json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False, default=str) + "\n").encode(), count


def _cut(data: bytes, cap: int, keep: str) -> bytes:
    """At most `cap` bytes of `data`, at a line boundary where one is near: its head or its tail."""
    if len(data) <= cap:
        return data
    if cap <= 0:
        return b""
    if keep == "tail":
        piece = data[-cap:]
        nl = piece.find(b"\n")
        return piece[nl + 1:] if 0 <= nl < cap // 2 else piece
    piece = data[:cap]
    nl = piece.rfind(b"\n")
    return piece[:nl + 1] if nl >= cap // 2 else piece


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def build(top: str, header: dict[str, Any], items: Sequence[Item], missing: Sequence[Missing], redactor: Redactor,
          caps: Caps = Caps()) -> Built:
    """The bundle: every item redacted and cut to the caps (in order: what comes first is kept
    first), the manifest and README, as one reproducible .tar.gz under directory `top`."""
    top = safe_name(top).split("/")[0]
    members: dict[str, bytes] = {}
    rows: list[dict[str, Any]] = []
    left_out = list(missing)
    total, redacted = 0, 0
    times = [i.mtime for i in items if i.mtime is not None and i.mtime > 0]
    for item in items:
        name = safe_name(item.name)
        while name in members or name in ("MANIFEST.json", "README.txt"):
            name += "_"
        data, count = _encoded(item, redactor)
        remaining = caps.total - total
        room = min(caps.item, remaining)
        if remaining <= 0 or (len(data) > remaining and remaining < min(1024, caps.item)):
            left_out.append(Missing(name, f"not included: the bundle's total size cap ({caps.total} bytes) was "
                                          f"reached ({len(data)} bytes)"))
            continue
        kept = _cut(data, room, item.keep)
        members[name] = kept
        total += len(kept)
        redacted += count
        row: dict[str, Any] = {"name": name, "source": item.source, "size": len(kept), "redacted": count,
                               "sha256": hashlib.sha256(kept).hexdigest()}
        if len(kept) < len(data):
            why = "per-item" if room == caps.item else "total"
            row.update(truncated=True, original_size=len(data),
                       truncation=f"cut to the {why} size cap ({room} bytes), its {item.keep} kept")
        if item.mtime is not None:
            row["time"] = _iso(item.mtime)
        rows.append(row)
    newest = max(times) if times else 0.0
    manifest = {"schema": BUNDLE_SCHEMA, **header, "newest_evidence": _iso(newest) if newest else None,
                "caps": {"item_bytes": caps.item, "total_bytes": caps.total}, "redacted": redacted,
                "redaction": "values of secret-looking names (TOKEN, SECRET, PASSWORD, PASSWD, KEY, CREDENTIAL, "
                             "AUTH, COOKIE, SESSION...), Authorization headers, bearer/basic credentials, URL "
                             "user:password, the config's webhook URL and token, secret environment values: "
                             f"each replaced by {REDACTED}; counts per item, never the values",
                "items": rows, "missing": [{"name": m.name, "reason": m.reason} for m in left_out]}
    members["MANIFEST.json"] = (json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()
    members["README.txt"] = readme(manifest).encode()
    return Built(tarball(top, members, int(newest)), manifest, redacted, sorted(f"{top}/{n}" for n in members))


def readme(manifest: dict[str, Any]) -> str:
    """The manifest for a person: what the bundle is, what it holds, what it could not collect."""
    job = f", job {manifest['job']}" if manifest.get("job") else ""
    lines = [f"hc evidence bundle: node {manifest.get('node')}{job}",
             f"made by hc {manifest.get('hc_version')} on {manifest.get('host')} "
             f"({'on the node itself' if manifest.get('live') else 'from what hc stored'}); "
             f"newest evidence {manifest.get('newest_evidence') or 'unknown'}",
             f"{manifest['redacted']} value(s) redacted ({REDACTED}); caps {manifest['caps']['item_bytes']} bytes "
             f"per item, {manifest['caps']['total_bytes']} in all. MANIFEST.json says the same as JSON.", "",
             "Items:"]
    for row in manifest["items"]:
        notes = [f"{row['redacted']} redacted"] if row["redacted"] else []
        if row.get("truncated"):
            notes.append(f"truncated from {row['original_size']} bytes")
        lines.append(f"  {row['name']}  {row['size']} bytes  <- {row['source']}"
                     + (f"  ({'; '.join(notes)})" if notes else ""))
    lines += ["", "Not collected:" if manifest["missing"] else "Not collected: nothing"]
    lines += [f"  {m['name']}: {m['reason']}" for m in manifest["missing"]]
    return "\n".join(lines) + "\n"


def tarball(top: str, members: dict[str, bytes], mtime: int) -> bytes:
    """A gzip'd tar of `members` under `top/`: sorted, regular files, mode 0644, owner 0:0, one mtime."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            data = members[name]
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mtime, info.mode = len(data), mtime, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.type = tarfile.REGTYPE
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=mtime, compresslevel=6) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()
