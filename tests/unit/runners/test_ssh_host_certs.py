"""Host certificates (`@cert-authority` in known_hosts) and known_hosts host patterns:
certificates made by the real ssh-keygen, judged without a network (the rig tests in
tests/integration/test_ssh_certs_proxy_rig.py do the same against a real sshd)."""

from __future__ import annotations

import base64
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from healthcheck.core.config.schema import SshSettings
from healthcheck.runners.ssh import SshError, import_paramiko, resolve_target
from healthcheck.runners.ssh.host_certs import (
    CertFormatError,
    cert_first_transport,
    cert_of,
    check_host_cert,
    parse_cert,
)
from healthcheck.runners.ssh.known_hosts import (
    HostKeyPolicy,
    cert_authorities,
    find_known_keys,
    glob_match,
    patterns_match,
    revoked_entry,
)

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen (openssh-client)")


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
                   check=True, timeout=30)
    return path


def sign(ca: Path, key: Path, *, principals: str = "node1,10.0.0.1", validity: str = "-5m:+1h",
         host: bool = True, serial: int = 7) -> Path:
    """ssh-keygen -s: the certificate for key.pub, key-cert.pub."""
    argv = ["ssh-keygen", "-q", "-s", str(ca), "-I", f"id-{key.name}", "-z", str(serial), "-V", validity]
    if host:
        argv.append("-h")
    if principals:
        argv += ["-n", principals]
    subprocess.run([*argv, f"{key}.pub"], check=True, timeout=30)
    return Path(f"{key}-cert.pub")


def cert_blob(cert: Path) -> bytes:
    return base64.b64decode(cert.read_text().split()[1])


def server_key(cert: Path):
    """The host key as paramiko holds it after a key exchange with a certificate."""
    return import_paramiko().Ed25519Key(data=cert_blob(cert))


def pub_key(path: Path):
    kind, b64 = Path(f"{path}.pub").read_text().split()[:2]
    return import_paramiko().PKey.from_type_string(kind, base64.b64decode(b64))


def ca_line(ca: Path, patterns: str = "node1,10.0.0.1") -> str:
    return f"@cert-authority {patterns} " + " ".join(Path(f"{ca}.pub").read_text().split()[:2]) + "\n"


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("keys")
    return {name: keygen(d / name) for name in ("ca", "other_ca", "host")}


def target_for(tmp_path: Path, known: str, *, accept_new: bool = False):
    kh = tmp_path / "known_hosts"
    kh.write_text(known)
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host node1\n  HostName 10.0.0.1\n")
    return resolve_target("node1", SshSettings(config_file=str(cfg), known_hosts=[str(kh)])), kh


# ------------------------------------------------------------------------------- parsing


def test_parse_cert_reads_what_ssh_keygen_wrote(keys) -> None:
    cert = parse_cert(cert_blob(sign(keys["ca"], keys["host"], principals="node1,n1.example", serial=42)))
    assert cert.cert_type == "ssh-ed25519-cert-v01@openssh.com"
    assert (cert.serial, cert.kind, cert.key_id) == (42, 2, "id-host")
    assert cert.principals == ("node1", "n1.example")
    assert cert.valid_after < time.time() < cert.valid_before
    assert cert.critical_options == ()
    assert cert.ca_blob == pub_key(keys["ca"]).asbytes()


def test_truncated_or_padded_certificates_are_format_errors(keys) -> None:
    blob = cert_blob(sign(keys["ca"], keys["host"]))
    for bad in (blob[:-1], blob[: len(blob) // 2], blob + b"\0", b"", blob[:3]):
        with pytest.raises(CertFormatError):
            parse_cert(bad)
    plain = pub_key(keys["host"]).asbytes()
    with pytest.raises(CertFormatError, match="not a supported certificate"):
        parse_cert(plain)


def test_cert_of_tells_a_certificate_from_a_plain_key(keys) -> None:
    cert = sign(keys["ca"], keys["host"])
    assert cert_of(server_key(cert)) == cert_blob(cert)
    assert cert_of(pub_key(keys["host"])) is None
    # the certificate's key is the host's own key: the kex signature proves it holds it
    assert server_key(cert) == pub_key(keys["host"])


# ------------------------------------------------------------------------------ judging


def judge(keys, cert: Path, names=("10.0.0.1", "node1"), cas=("ca",), now=None):
    return check_host_cert(parse_cert(cert_blob(cert)), [pub_key(keys[c]) for c in cas], names, "node1", now)


def test_a_valid_host_certificate_is_vouched_for_by_its_ca(keys) -> None:
    assert judge(keys, sign(keys["ca"], keys["host"]), cas=("other_ca", "ca")) == pub_key(keys["ca"])
    # the node name or the HostName may be the principal
    assert judge(keys, sign(keys["ca"], keys["host"], principals="10.0.0.1"))


@pytest.mark.parametrize(("how", "reason"), [
    (dict(principals="node2,10.0.0.2"), "not among its principals (node2, 10.0.0.2)"),
    (dict(validity="20200101:20200102"), "expired at 2020-01-02"),
    (dict(validity="+1d:+2d"), "not valid before"),
    (dict(host=False), "user certificate"),
    (dict(principals=""), "names no principals"),
])
def test_a_certificate_that_does_not_fit_is_refused_with_the_reason(keys, how, reason) -> None:
    with pytest.raises(SshError) as info:
        judge(keys, sign(keys["ca"], keys["host"], **how))
    assert info.value.kind == "bad-host-certificate"
    assert reason in info.value.message and "id-host" in info.value.message


def test_a_certificate_from_an_unlisted_ca_is_refused(keys) -> None:
    with pytest.raises(SshError, match="CA that known_hosts does not list") as info:
        judge(keys, sign(keys["other_ca"], keys["host"]))
    assert info.value.kind == "bad-host-certificate"


def test_a_forged_signature_is_refused(keys) -> None:
    blob = bytearray(cert_blob(sign(keys["ca"], keys["host"])))
    blob[-5] ^= 0x01  # inside the signature: everything else still parses
    cert = parse_cert(bytes(blob))
    with pytest.raises(SshError, match="does not verify"):
        check_host_cert(cert, [pub_key(keys["ca"])], ("node1",), "node1")
    # a principal changed after signing: the signature no longer covers the bytes
    good = cert_blob(sign(keys["ca"], keys["host"], principals="nodeX"))
    forged = good.replace(b"nodeX", b"node1")
    with pytest.raises(SshError, match="does not verify"):
        check_host_cert(parse_cert(forged), [pub_key(keys["ca"])], ("node1",), "node1")


# -------------------------------------------------------------------- known_hosts markers


def test_cert_authority_lines_are_cas_not_host_keys(tmp_path, keys) -> None:
    tabbed = ca_line(keys["ca"], "gpu*").replace(" ", "\t", 1)
    target, kh = target_for(tmp_path, ca_line(keys["ca"], "node*,!node13") + "# the end\n@revoked\n" + tabbed)
    assert len(cert_authorities(target.known_hosts, ("gpu7",), 22)) == 1  # a tab after the marker
    (ca,) = cert_authorities(target.known_hosts, target.host_key_names, 22)
    assert ca.key == pub_key(keys["ca"]) and ca.lineno == 1
    # a CA line naming the host is not that host's key
    assert find_known_keys(target.known_hosts, "node1", 22) == []
    assert cert_authorities(target.known_hosts, ("node13",), 22) == []  # negated
    assert cert_authorities(target.known_hosts, ("login1",), 22) == []


@pytest.mark.parametrize(("pattern", "name", "hit"), [
    ("node*", "node17", True), ("node?", "node1", True), ("node?", "node17", False),
    ("*.example.com", "gpu1.EXAMPLE.com", True), ("*", "anything", True), ("a*b*c", "axxbyyc", True),
    ("a*b*c", "axxbyy", False), ("", "", True), ("*" * 40 + "x", "a" * 60, False),
])
def test_glob_match_is_openssh_wildcards(pattern, name, hit) -> None:
    assert glob_match(pattern, name) is hit


def test_patterns_match_ports_negation_and_hashes() -> None:
    hashed = import_paramiko().HostKeys.hash_host("node1")
    assert patterns_match(("[node1]:2222",), ("node1",), 2222)
    assert not patterns_match(("node1",), ("node1",), 2222)  # another port is another host
    assert patterns_match(("*",), ("node1",), 2222)
    assert not patterns_match(("node*", "!node1"), ("node1",), 22)
    assert patterns_match((hashed,), ("node1",), 22)


def test_glob_match_stays_fast_on_hostile_patterns() -> None:
    start = time.monotonic()
    for _ in range(20):
        glob_match("*a" * 500, "a" * 1000 + "b")
    assert time.monotonic() - start < 5  # quadratic at worst, never exponential


# ------------------------------------------------------------------------ the policy


def test_policy_accepts_a_vouched_certificate_without_recording_it(tmp_path, keys) -> None:
    target, kh = target_for(tmp_path, ca_line(keys["ca"]))
    before = kh.read_text()
    HostKeyPolicy(True, target).missing_host_key(None, "node1", server_key(sign(keys["ca"], keys["host"])))
    assert kh.read_text() == before  # trusted through the CA: nothing pinned


def test_policy_refuses_a_bad_certificate_even_with_accept_new(tmp_path, keys) -> None:
    target, kh = target_for(tmp_path, ca_line(keys["ca"]))
    with pytest.raises(SshError) as info:
        HostKeyPolicy(True, target).missing_host_key(None, "node1", server_key(sign(keys["other_ca"], keys["host"])))
    assert info.value.kind == "bad-host-certificate"
    assert kh.read_text() == ca_line(keys["ca"])  # never recorded


def test_policy_refuses_a_certificate_from_a_revoked_ca(tmp_path, keys) -> None:
    revoked = "@revoked * " + " ".join(Path(f"{keys['ca']}.pub").read_text().split()[:2]) + "\n"
    target, kh = target_for(tmp_path, ca_line(keys["ca"]) + revoked)
    with pytest.raises(SshError) as info:
        HostKeyPolicy(False, target).missing_host_key(None, "node1", server_key(sign(keys["ca"], keys["host"])))
    assert info.value.kind == "revoked-host-key" and "CA key" in info.value.message
    assert revoked_entry(target.known_hosts, ("anyhost",), 22, pub_key(keys["ca"])) is not None


def test_policy_without_a_matching_ca_treats_a_certificate_as_an_unknown_key(tmp_path, keys) -> None:
    from healthcheck.runners.ssh.known_hosts import UnknownHostKey

    target, _ = target_for(tmp_path, ca_line(keys["ca"], "gpu*"))
    with pytest.raises(UnknownHostKey):
        HostKeyPolicy(False, target).missing_host_key(None, "node1", server_key(sign(keys["ca"], keys["host"])))


def test_cert_first_transport_asks_for_certificates_first() -> None:
    import socket

    a, b = socket.socketpair()
    try:
        transport = cert_first_transport()(a)
        keys = transport.preferred_keys
        certs = [k for k in keys if k.endswith("-cert-v01@openssh.com")]
        assert certs and list(keys[: len(certs)]) == certs
        assert "ssh-ed25519" in keys  # the plain keys still follow
    finally:
        a.close()
        b.close()
