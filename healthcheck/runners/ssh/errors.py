"""`SshError`: why a node could not be reached, as a `SshErrorKind` and a one-line message."""

from __future__ import annotations

from enum import Enum


class SshErrorKind(str, Enum):
    """Why a connection failed (a str, so `kind == "refused"` still holds)."""

    UNKNOWN_HOST_KEY = "unknown-host-key"
    CHANGED_HOST_KEY = "changed-host-key"
    REVOKED_HOST_KEY = "revoked-host-key"
    # a host certificate that no listed CA vouches for this host: unlisted CA, bad
    # signature, expired or not yet valid, another host's principals
    BAD_HOST_CERT = "bad-host-certificate"
    REFUSED = "refused"
    TIMEOUT = "timeout"
    UNREACHABLE = "unreachable"
    AUTH = "auth"
    DROPPED = "dropped"
    CONFIG = "config"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value


class SshError(Exception):
    """A connection failure, with a `kind` code and a one-line message naming the host."""

    def __init__(self, kind: SshErrorKind, message: str) -> None:
        try:
            kind = SshErrorKind(kind)
        except ValueError:
            raise ValueError(f"unknown SshError kind {kind!r}") from None
        super().__init__(kind, message)
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        return self.message
