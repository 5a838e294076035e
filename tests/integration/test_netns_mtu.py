"""Real component: hc runs inside a network namespace whose veth MTU the test sets,
reads it with the real `ip`, and reports the mismatch (and the fix)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.rig


def _sh(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=20)


@pytest.fixture
def netns(tmp_path):
    """A namespace `hcmtu<pid>` with eth0 (a veth whose peer stays in this namespace, up)."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    name = f"hcmtu{os.getpid()}"
    peer = f"hcmv{os.getpid()}"
    made = _sh("ip", "netns", "add", name)
    if made.returncode != 0:
        pytest.skip(f"cannot create network namespaces here: {made.stderr.strip()}")
    try:
        for argv in (
            ("ip", "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", name),
            ("ip", "link", "set", peer, "mtu", "9000", "up"),
            ("ip", "-n", name, "link", "set", "lo", "up"),
            ("ip", "-n", name, "link", "set", "eth0", "up"),
        ):
            r = _sh(*argv)
            assert r.returncode == 0, f"{' '.join(argv)}: {r.stderr}"
        yield name
    finally:
        _sh("ip", "netns", "del", name)  # also removes the veth pair
        _sh("ip", "link", "del", peer)


def hc_in(ns: str, config: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HC_NODE_NAME": "node7", "HOME": "/root"}
    return subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "healthcheck", "node", "--local",
         "--config", str(config), "--format", "json", *args],
        capture_output=True, env=env, timeout=60,
    )


@pytest.fixture
def config(tmp_path):
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "rig.yaml").write_text(
        "extends: generic\nnet:\n  interfaces:\n    eth0: {mtu: 9000, count: 1}\n"
    )
    path = tmp_path / "hc.yaml"
    path.write_text("nodes:\n  'node[1-9]': rig\n")
    return path


def test_wrong_mtu_in_namespace_is_reported_then_fixed(netns, config, validate_report):
    assert _sh("ip", "-n", netns, "link", "set", "eth0", "mtu", "1500").returncode == 0
    r = hc_in(netns, config)
    assert r.returncode == 2, r.stderr
    report = validate_report(r.stdout)
    (node,) = report["nodes"]
    assert (node["node"], node["fabric"], node["status"]) == ("node7", "rig", "FAIL")
    (f,) = [f for f in node["findings"] if f["status"] != "PASS"]
    assert (f["id"], f["subject"], f["value"]) == ("net.E001", "node7:eth0", 1500)
    assert f["limit"]["value"] == 9000 and f["limit"]["source"].endswith("fabrics/rig.yaml:4")

    assert _sh("ip", "-n", netns, "link", "set", "eth0", "mtu", "9000").returncode == 0
    r = hc_in(netns, config)
    assert r.returncode == 0, r.stdout
    assert json.loads(r.stdout)["status"] == "PASS"


def test_interface_down_in_namespace(netns, config):
    assert _sh("ip", "-n", netns, "link", "set", "eth0", "mtu", "9000").returncode == 0
    assert _sh("ip", "-n", netns, "link", "set", "eth0", "down").returncode == 0
    r = hc_in(netns, config)
    assert r.returncode == 2
    ids = [f["id"] for f in json.loads(r.stdout)["nodes"][0]["findings"]]
    assert ids == ["net.E004"]
