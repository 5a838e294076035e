"""OpenSSH host certificates: parse one (PROTOCOL.certkeys) and judge it against the
`@cert-authority` keys known_hosts lists for the host.

paramiko negotiates the `*-cert-v01@openssh.com` host-key algorithms and checks that the
server holds the certificate's key (the key exchange is signed with it), but it does not
look inside the certificate: it keeps the blob as `key.public_blob` and nothing more. This
module does the rest of what OpenSSH's check_host_key does for a certificate: the CA's
signature, the CA listed for this host, a host (not user) certificate, the validity
window, the host among the principals, no critical options, neither key revoked.
"""

from __future__ import annotations

import functools
import struct
import time
from dataclasses import dataclass
from typing import Any

from healthcheck.runners.ssh.errors import SshError, SshErrorKind
from healthcheck.runners.ssh.paramiko_import import import_paramiko

CERT_SUFFIX = "-cert-v01@openssh.com"
HOST_CERT = 2  # SSH_CERT_TYPE_HOST; 1 is a user certificate

# How many public-key fields (strings or mpints) precede the serial, per certificate type
_KEY_FIELDS = {
    "ssh-ed25519": 1,  # pk
    "ecdsa-sha2-nistp256": 2,  # curve, Q
    "ecdsa-sha2-nistp384": 2,
    "ecdsa-sha2-nistp521": 2,
    "ssh-rsa": 2,  # e, n
}
# signature algorithms a CA may sign with: OpenSSH's default CASignatureAlgorithms (no SHA-1)
_CA_SIGNATURES = frozenset({
    "ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
    "rsa-sha2-256", "rsa-sha2-512",
})
_MAX_FIELDS = 256  # principals, options: a certificate with more is refused, not parsed


class CertFormatError(ValueError):
    """The certificate blob is not a well-formed OpenSSH certificate."""


class _Reader:
    """Strict big-endian SSH wire reader over bytes: every read is bounds-checked
    (paramiko's Message pads short reads with zeros instead)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CertFormatError("truncated certificate")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def uint32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def uint64(self) -> int:
        return int(struct.unpack(">Q", self.take(8))[0])

    def string(self) -> bytes:
        return self.take(self.uint32())

    def text(self) -> str:
        try:
            return self.string().decode("utf-8")
        except UnicodeDecodeError:
            raise CertFormatError("a text field is not UTF-8") from None

    def done(self) -> bool:
        return self.pos == len(self.data)


def _strings(blob: bytes) -> list[bytes]:
    """A packed sequence of SSH strings (the principals, the options)."""
    reader, out = _Reader(blob), list[bytes]()
    while not reader.done():
        if len(out) >= _MAX_FIELDS:
            raise CertFormatError(f"more than {_MAX_FIELDS} entries in one field")
        out.append(reader.string())
    return out


@dataclass(frozen=True)
class HostCert:
    """The fields of one OpenSSH certificate that a host check needs."""

    cert_type: str  # e.g. ssh-ed25519-cert-v01@openssh.com
    serial: int
    kind: int  # HOST_CERT or 1 (user)
    key_id: str
    principals: tuple[str, ...]
    valid_after: int  # seconds since the epoch
    valid_before: int  # 2**64-1: forever
    critical_options: tuple[str, ...]
    ca_blob: bytes  # the signing key, as an SSH public-key blob
    signature: bytes  # an SSH signature blob over `signed`
    signed: bytes  # every byte before the signature field

    @property
    def ca_type(self) -> str:
        return _Reader(self.ca_blob).text()


def parse_cert(blob: bytes) -> HostCert:
    """One OpenSSH certificate blob -> HostCert; CertFormatError for anything else."""
    reader = _Reader(blob)
    cert_type = reader.text()
    base = cert_type.removesuffix(CERT_SUFFIX)
    if base == cert_type or base not in _KEY_FIELDS:
        raise CertFormatError(f"not a supported certificate type: {cert_type[:80]!r}")
    reader.string()  # nonce
    for _ in range(_KEY_FIELDS[base]):
        reader.string()  # the certified key itself (paramiko already took it from here)
    serial, kind, key_id = reader.uint64(), reader.uint32(), reader.text()
    try:
        principals = tuple(p.decode("utf-8") for p in _strings(reader.string()))
    except UnicodeDecodeError:
        raise CertFormatError("a principal is not UTF-8") from None
    valid_after, valid_before = reader.uint64(), reader.uint64()
    critical = _strings(reader.string())[::2]  # name, data, name, data, ...
    reader.string()  # extensions: permit-pty and friends, meaningless for a host
    reader.string()  # reserved
    ca_blob = reader.string()
    signed = blob[:reader.pos]
    signature = reader.string()
    if not reader.done():
        raise CertFormatError("trailing bytes after the signature")
    return HostCert(
        cert_type=cert_type, serial=serial, kind=kind, key_id=key_id, principals=principals,
        valid_after=valid_after, valid_before=valid_before,
        critical_options=tuple(c.decode("utf-8", "replace") for c in critical),
        ca_blob=ca_blob, signature=signature, signed=signed,
    )


def cert_of(key: Any) -> bytes | None:
    """The certificate blob a paramiko host key arrived in, or None for a plain key."""
    blob = getattr(key, "public_blob", None)
    if blob is None or not str(getattr(blob, "key_type", "")).endswith(CERT_SUFFIX):
        return None
    return bytes(blob.key_blob)


def _when(seconds: int) -> str:
    if seconds >= 2**63:
        return "forever"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(min(seconds, 253402300799)))


def _signature_ok(ca_key: Any, cert: HostCert) -> bool:
    try:
        algorithm = _Reader(cert.signature).text()
        if algorithm not in _CA_SIGNATURES:
            return False
        return bool(ca_key.verify_ssh_sig(cert.signed, import_paramiko().Message(cert.signature)))
    except Exception:  # a malformed signature blob is a bad signature
        return False


def check_host_cert(
    cert: HostCert, ca_keys: list[Any], names: tuple[str, ...], where: str, now: float | None = None
) -> Any:
    """The CA key (one of `ca_keys`, paramiko PKeys) that vouches for `cert` as a host
    certificate of one of `names`; SshError(BAD_HOST_CERT) naming the reason otherwise."""
    def refuse(why: str) -> SshError:
        return SshError(SshErrorKind.BAD_HOST_CERT,
                        f"{where}: host certificate {cert.key_id!r} (serial {cert.serial}) refused: {why}")

    ca_key = next((k for k in ca_keys if k.asbytes() == cert.ca_blob), None)
    if ca_key is None:
        return _unlisted(cert, ca_keys, refuse)
    if not _signature_ok(ca_key, cert):
        raise refuse(f"the signature by CA {ca_key.get_name()} {ca_key.fingerprint} does not verify")
    if cert.kind != HOST_CERT:
        raise refuse("it is a user certificate, not a host certificate")
    now = time.time() if now is None else now
    if now < cert.valid_after:
        raise refuse(f"not valid before {_when(cert.valid_after)}")
    if now >= cert.valid_before:
        raise refuse(f"expired at {_when(cert.valid_before)}")
    if not cert.principals:
        # OpenSSH takes a host certificate without principals as valid for every host;
        # hc does not: one such certificate would vouch for any node
        raise refuse("it names no principals (hc requires the host among them)")
    if not any(name in cert.principals for name in names):
        shown = ", ".join(cert.principals[:8]) + (" ..." if len(cert.principals) > 8 else "")
        raise refuse(f"{' or '.join(names)} is not among its principals ({shown})")
    if cert.critical_options:
        raise refuse(f"unknown critical options {', '.join(cert.critical_options)}")
    return ca_key


def _unlisted(cert: HostCert, ca_keys: list[Any], refuse: Any) -> Any:
    listed = ", ".join(f"{k.get_name()} {k.fingerprint}" for k in ca_keys[:4])
    try:
        signer = cert.ca_type
    except CertFormatError:
        signer = "?"
    raise refuse(f"signed by a {signer} CA that known_hosts does not list for this host "
                 f"(@cert-authority keys for it: {listed})")


@functools.cache
def cert_first_transport() -> Any:
    """A paramiko Transport class that asks for the host's certificate first.

    paramiko offers the `*-cert-v01@openssh.com` host-key algorithms after the plain ones,
    so a server with both a key and a certificate would show its plain key; ssh asks for
    certificates first when a `@cert-authority` line matches the host. Used only then.
    """
    paramiko = import_paramiko()

    class CertFirstTransport(paramiko.Transport):  # type: ignore[name-defined]
        @property
        def preferred_keys(self) -> tuple[str, ...]:
            keys = tuple(super().preferred_keys)
            return tuple(k for k in keys if k.endswith(CERT_SUFFIX)) + tuple(
                k for k in keys if not k.endswith(CERT_SUFFIX))

    return CertFirstTransport
