"""`hc node` as sites run SSH, on the rig's hosts (tests/rig/): host keys signed by an SSH CA
(a known_hosts with only a `@cert-authority` line) and nodes reached through a ProxyCommand.

The CA-signed host is a second sshd inside node1 on port 2222 (`NetnsRig.extra_sshd`) with a
host key and a certificate made here with ssh-keygen; the host's own sshd on :22 is left
alone. The proxy is the real OpenSSH client, `ssh -W %h:%p` through node1, to a name that
only the hosts resolve (node2), so the connection can only have gone through the proxy.
Needs root; skips with the rig's reason otherwise.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest
from support import run_hc

pytestmark = pytest.mark.rig

CERT_PORT = 2222


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
                   check=True, timeout=30)
    return path


def sign(ca: Path, key: Path, principals: str, validity: str = "-5m:+1h") -> Path:
    cert = Path(f"{key}-cert.pub")
    cert.unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-s", str(ca), "-h", "-I", f"{key.name}-cert", "-n", principals,
                    "-V", validity, f"{key}.pub"], check=True, timeout=30)
    return cert


def public(key: Path) -> str:
    return " ".join(Path(f"{key}.pub").read_text().split()[:2])


def write_config(tmp_path: Path, net, ssh_config: str, known_hosts: str) -> Path:
    """An hc config for one node of the rig: our ssh config and known_hosts only."""
    (tmp_path / "ssh_config").write_text(ssh_config)
    (tmp_path / "known_hosts").write_text(known_hosts)
    (tmp_path / "kern.log").write_text("[    0.000000] Linux version 6.1.0 (hc rig)\n")
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "rig.yaml").write_text(
        f"extends: generic\nnet:\n  interfaces:\n    eth0: {{mtu: 9000, count: 1}}\n"
        f"gpu:\n  xid: {{source: file, file: {tmp_path}/kern.log}}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(
        "nodes:\n  'node[1-4]': rig\n"
        f"ssh:\n  config_file: {tmp_path}/ssh_config\n  known_hosts: [{tmp_path}/known_hosts]\n"
        f"  identity_files: [{net.client_key}]\n  use_agent: false\n  connect_timeout_s: 5\n"
        f"  command_timeout_s: 10\n  node_timeout_s: 40\n"
        f"history:\n  path: {tmp_path}/history.sqlite\n")
    return cfg


def hc_node(cfg: Path, node: str) -> tuple[int, dict]:
    r = run_hc("node", node, "--mode", "agentless", "--config", str(cfg), "--format", "json", timeout=120)
    assert r.stdout.strip().startswith(b"{"), r.stderr.decode(errors="replace")
    report = json.loads(r.stdout)
    (result,) = [n for n in report["nodes"] if n["node"] == node]
    return r.returncode, result


# ------------------------------------------------------------------------- host certificates


@pytest.fixture
def ca_site(fresh_netns_rig, tmp_path):
    """node1's extra sshd on :2222 with a certificate `make(...)` signs; hc's known_hosts
    holds only the CA."""
    net = fresh_netns_rig
    keys = tmp_path / "keys"
    keys.mkdir()
    ca, other_ca, host_key = keygen(keys / "ca"), keygen(keys / "other_ca"), keygen(keys / "host")
    h = net.host("node1")
    cfg = write_config(
        tmp_path, net,
        f"Host node1\n  HostName {h.addr}\n  Port {CERT_PORT}\n  User root\n",
        f"@cert-authority [node*]:{CERT_PORT},[{h.addr}]:{CERT_PORT} {public(ca)}\n")

    def serve(principals: str = f"node1,{h.addr}", validity: str = "-5m:+1h", signer: Path | None = ca):
        cert = sign(signer, host_key, principals, validity) if signer else None
        return net.extra_sshd("node1", CERT_PORT, tmp_path / "sshd", host_key=host_key, host_cert=cert)

    return type("CaSite", (), {"config": cfg, "serve": staticmethod(serve), "other_ca": other_ca,
                               "known": tmp_path / "known_hosts"})


def test_hc_node_trusts_a_host_certificate_from_the_listed_ca(ca_site):
    before = ca_site.known.read_text()
    with ca_site.serve():
        rc, node = hc_node(ca_site.config, "node1")
    assert (rc, node["status"], node["mode"]) == (0, "PASS", "agentless"), node["findings"]
    assert ca_site.known.read_text() == before  # vouched for by the CA, nothing pinned


@pytest.mark.parametrize(("how", "reason"), [
    ({"principals": "node2,10.98.0.12"}, "not among its principals"),
    ({"validity": "20200101:20200102"}, "expired at 2020-01-02"),
    ({"signer": "other"}, "CA that known_hosts does not list"),
])
def test_hc_node_refuses_a_host_certificate_that_does_not_fit(ca_site, how, reason):
    if how.get("signer") == "other":
        how = {"signer": ca_site.other_ca}
    with ca_site.serve(**how):
        rc, node = hc_node(ca_site.config, "node1")
    assert rc == 3 and node["status"] == "ERROR"
    (f,) = node["findings"]
    assert (f["id"], f["status"], f["value"]) == ("hc.E006", "ERROR", "bad-host-certificate")
    assert reason in f["message"] and "node1" in f["message"]


def test_a_host_without_a_certificate_is_unknown_and_says_so(ca_site):
    with ca_site.serve(signer=None):
        rc, node = hc_node(ca_site.config, "node1")
    (f,) = node["findings"]
    assert rc == 3 and (f["id"], f["status"], f["value"]) == ("hc.E006", "ERROR", "unknown-host-key")
    assert "HostCertificate" in f["message"]


# ---------------------------------------------------------------------------- ProxyCommand


def _gone(pid: int) -> bool:
    """Dead, or a zombie waiting for PID 1 (which reaps late here)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.fixture
def proxy_site(fresh_netns_rig, tmp_path):
    """node2 by its name (which only the hosts resolve) through `ssh -W %h:%p node1`; the
    proxy script appends its pid to `pids` and then execs the OpenSSH client."""
    net = fresh_netns_rig
    pids = tmp_path / "pids"
    proxy = tmp_path / "proxy.sh"
    proxy.write_text(f"#!/bin/sh\necho $$ >> {pids}\nexec ssh -F {net.ssh_config} -W \"$1:$2\" node1\n")
    proxy.chmod(0o755)
    known = "".join(line + "\n" for line in net.known_hosts.read_text().splitlines() if line.startswith("node2,"))

    def config(port: int = 22) -> Path:
        return write_config(tmp_path, net, f"Host node2\n  HostName node2\n  User root\n  Port {port}\n"
                                           f"  ProxyCommand {proxy} %h %p\n", known)

    return type("ProxySite", (), {"config": staticmethod(config), "pids": pids})


def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def test_hc_node_reaches_a_host_through_a_proxycommand_and_ends_it(proxy_site):
    try:
        socket.getaddrinfo("node2", 22)
        pytest.fail("node2 resolves here: the test could not tell the proxy was used")
    except socket.gaierror:
        pass
    rc, node = hc_node(proxy_site.config(), "node2")
    assert (rc, node["status"], node["mode"]) == (0, "PASS", "agentless"), node["findings"]
    pids = _pids(proxy_site.pids)
    assert pids, "the proxy never ran"
    deadline = time.monotonic() + 5  # PID 1 reaps late; the processes themselves are gone
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(p) for p in pids), [p for p in pids if not _gone(p)]


def test_a_proxy_that_cannot_reach_the_node_is_error_and_ends(proxy_site):
    start = time.monotonic()
    rc, node = hc_node(proxy_site.config(port=2999), "node2")  # nothing listens there
    assert time.monotonic() - start < 30
    assert rc == 3 and node["status"] == "ERROR"
    (f,) = node["findings"]
    assert (f["id"], f["status"]) == ("hc.E006", "ERROR")
    assert f["value"] == "refused" and "ProxyCommand" in f["message"], f
    assert all(_gone(p) for p in _pids(proxy_site.pids))
