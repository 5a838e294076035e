"""Host keys: known_hosts files (plain, hashed, `@revoked`, `@cert-authority`), recording
new keys, the missing-key policy (which also judges host certificates).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from healthcheck.runners.ssh.config import Target, cached_by_stat
from healthcheck.runners.ssh.errors import SshError, SshErrorKind
from healthcheck.runners.ssh.host_certs import CertFormatError, cert_of, check_host_cert, parse_cert
from healthcheck.runners.ssh.paramiko_import import import_paramiko


@dataclass(frozen=True)
class KnownKey:
    path: str
    lineno: int
    names: tuple[str, ...]
    key: Any  # paramiko PKey
    revoked: bool = False  # an "@revoked" line: this key must never be accepted
    cert_authority: bool = False  # a "@cert-authority" line: a CA for hosts matching `names`


_KNOWN_CACHE: dict[str, tuple[tuple[int, int], list[KnownKey]]] = {}
_KNOWN_WRITE_LOCK = threading.Lock()


def _read_known_hosts(path: str) -> list[KnownKey]:
    """Every usable entry of one known_hosts file (cached by mtime and size).

    Parsed here instead of HostKeys.load, which de-duplicates in O(n^2) and forgets
    which file and line an entry came from (which a changed-key message must name).
    """
    return cached_by_stat(_KNOWN_CACHE, path, "known_hosts", _parse_known_hosts, [])


def _parse_known_hosts(path: str) -> list[KnownKey]:
    paramiko = import_paramiko()
    entries: list[KnownKey] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                line = line.strip()
                marker, *rest = line.split(None, 1) or [""]
                revoked, authority = marker == "@revoked", marker == "@cert-authority"
                if revoked or authority:
                    line = rest[0].strip() if rest else ""
                if not line or line.startswith(("#", "@")):
                    continue  # a comment, or a marker OpenSSH would not know either
                try:
                    entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
                except Exception:  # bad base64 (InvalidHostKey), unknown key type, ...
                    continue
                if entry is not None and entry.key is not None:
                    entries.append(KnownKey(path, lineno, tuple(entry.hostnames), entry.key, revoked, authority))
    except OSError as exc:
        raise SshError(SshErrorKind.CONFIG, f"known_hosts {path}: {exc.strerror or exc}") from None
    return entries


def host_pattern(name: str, port: int) -> str:
    return name if port == 22 else f"[{name}]:{port}"


def _name_matches(stored: str, name: str) -> bool:
    if stored.startswith("|1|"):
        try:
            return import_paramiko().HostKeys.hash_host(name, stored) == stored
        except Exception:  # malformed salt
            return False
    return stored == name


def find_known_keys(files: tuple[str, ...], name: str, port: int) -> list[KnownKey]:
    """Trusted host keys for `name` (at `port`) in the files, in file order."""
    pattern = host_pattern(name, port)
    return [
        k for path in files for k in _read_known_hosts(path)
        if not k.revoked and not k.cert_authority and any(_name_matches(stored, pattern) for stored in k.names)
    ]


_MAX_NAME = 1024  # longer host names or patterns never match (bounds the glob's work)


def glob_match(pattern: str, text: str) -> bool:
    """OpenSSH's `*` and `?` wildcards, case-insensitive; at most len(pattern) * len(text)
    steps (the usual single-backtrack-point walk: no regex, nothing exponential)."""
    if len(pattern) > _MAX_NAME or len(text) > _MAX_NAME:
        return False
    pattern, text = pattern.lower(), text.lower()
    p = t = 0
    star, mark = -1, 0
    while t < len(text):
        if p < len(pattern) and pattern[p] in ("?", text[t]):
            p, t = p + 1, t + 1
        elif p < len(pattern) and pattern[p] == "*":
            star, mark, p = p, t, p + 1
        elif star >= 0:
            mark += 1
            p, t = star + 1, mark
        else:
            return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)


def patterns_match(stored: tuple[str, ...], names: tuple[str, ...], port: int) -> bool:
    """OpenSSH's match_hostname over a marker line's host patterns: a `!pattern` that
    matches vetoes the line, otherwise any pattern (wildcards, hashed names) matches."""
    hosts = [host_pattern(n, port) for n in names]
    matched = False
    for item in stored:
        negated = item.startswith("!")
        pattern = item[1:] if negated else item
        if pattern.startswith("|1|"):
            hit = any(_name_matches(pattern, h) for h in hosts)
        else:
            hit = any(glob_match(pattern, h) for h in hosts)
        if hit and negated:
            return False
        matched = matched or hit
    return matched


def revoked_entry(files: tuple[str, ...], names: tuple[str, ...], port: int, key: Any) -> KnownKey | None:
    """The `@revoked` line that revokes `key` for any of `names` (patterns as OpenSSH: `*`)."""
    for path in files:
        for k in _read_known_hosts(path):
            if k.revoked and k.key == key and patterns_match(k.names, names, port):
                return k
    return None


def cert_authorities(files: tuple[str, ...], names: tuple[str, ...], port: int) -> list[KnownKey]:
    """The `@cert-authority` entries whose host patterns match any of `names` at `port`."""
    return [
        k for path in files for k in _read_known_hosts(path)
        if k.cert_authority and patterns_match(k.names, names, port)
    ]


def append_known_host(path: str, names: tuple[str, ...], port: int, key: Any) -> None:
    """accept_new_host_keys: record a first-seen key as a plain line (see module doc)."""
    hosts = ",".join(host_pattern(n, port) for n in names)
    line = f"{hosts} {key.get_name()} {key.get_base64()}\n"
    with _KNOWN_WRITE_LOCK:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, mode=0o700, exist_ok=True)
        with open(path, "a+", encoding="utf-8") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell() > 0:
                fh.seek(fh.tell() - 1)
                if fh.read(1) != "\n":
                    line = "\n" + line
            fh.write(line)


class UnknownHostKey(Exception):
    def __init__(self, key: Any) -> None:
        super().__init__("unknown host key")
        self.key = key


def key_fingerprint(key: Any) -> str:
    return f"{key.get_name()} {key.fingerprint}"


def refuse_revoked(target: Any, key: Any, client: Any = None) -> None:
    entry = revoked_entry(target.known_hosts, target.host_key_names, target.port, key)
    if entry is not None:
        if client is not None:
            client.close()
        raise SshError(SshErrorKind.REVOKED_HOST_KEY, f"{target.where}: host key {key_fingerprint(key)} is revoked "
                                                      f"(@revoked in {entry.path}:{entry.lineno}); not connecting")


class HostKeyPolicy:
    """Missing host key: a host certificate is judged against the `@cert-authority` keys
    for the host (accepted, or refused with the reason); any other key is refused
    (default) or recorded (accept_new_host_keys)."""

    def __init__(self, accept_new: bool, target: Target) -> None:
        self.accept_new = accept_new  # the connection's accept_new_host_keys
        self.target = target

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        refuse_revoked(self.target, key)
        if self.vouched_for(key):
            return  # a host certificate a listed CA signed for this host: trusted, not recorded
        if not self.accept_new:
            raise UnknownHostKey(key)
        if not self.target.known_hosts:
            raise SshError(
                SshErrorKind.CONFIG, f"{self.target.where}: accept_new_host_keys needs a known_hosts file"
            )
        path = self.target.known_hosts[0]
        try:
            append_known_host(path, self.target.host_key_names, self.target.port, key)
        except OSError as exc:
            why = exc.strerror or exc
            raise SshError(
                SshErrorKind.CONFIG, f"{self.target.where}: cannot record its host key in {path}: {why}"
            ) from None

    def vouched_for(self, key: Any) -> bool:
        """True for a certificate a matching CA vouches for; SshError for one it cannot;
        False for a plain key or when no `@cert-authority` line matches the host."""
        blob = cert_of(key)
        target = self.target
        if blob is None:
            return False
        authorities = cert_authorities(target.known_hosts, target.host_key_names, target.port)
        if not authorities:
            return False
        try:
            cert = parse_cert(blob)
        except CertFormatError as exc:
            raise SshError(SshErrorKind.BAD_HOST_CERT, f"{target.where}: malformed host certificate: {exc}") from None
        ca_key = check_host_cert(cert, [k.key for k in authorities], target.host_key_names, target.where)
        entry = revoked_entry(target.known_hosts, target.host_key_names, target.port, ca_key)
        if entry is not None:
            raise SshError(SshErrorKind.REVOKED_HOST_KEY, f"{target.where}: the CA key {key_fingerprint(ca_key)} that "
                                                          f"signed its host certificate is revoked "
                                                          f"(@revoked in {entry.path}:{entry.lineno}); not connecting")
        return True
