"""The SSH runner against real sshd: the rig's namespace hosts node1..node4 (tests/rig/).

Settings come from the rig's files (ssh_config, known_hosts, client key) with the agent
off; tests that need other host-key or jump setups write their own ssh config, which
names the rig's key but no UserKnownHostsFile, so that only settings.known_hosts count.
Needs root; skips with the rig's reason otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:  # so that the ``rigfixtures`` plugin below is importable
    sys.path.insert(0, _TESTS)

pytest_plugins = ["rigfixtures"]
pytestmark = pytest.mark.rig

from rig import NetnsRig, wait_for  # noqa: E402 - after the sys.path line above

from healthcheck.core.config.schema import SshSettings  # noqa: E402
from healthcheck.runners.ssh import SshConnection, SshError, fan_out  # noqa: E402

CONNECT_TIMEOUT_S = 2.0


def rig_settings(rig: NetnsRig, **overrides) -> SshSettings:
    """The rig's own ssh_config (HostName, User, IdentityFile, UserKnownHostsFile)."""
    base = dict(
        config_file=str(rig.ssh_config), known_hosts=[], use_agent=False, connect_timeout_s=CONNECT_TIMEOUT_S
    )
    return SshSettings(**{**base, **overrides})


def own_settings(
    rig: NetnsRig, tmp_path: Path, known_hosts: Path, *, jump: dict[str, str] | None = None, **overrides
) -> SshSettings:
    """An ssh config of our own: HostName and User per host, the rig's key, no known_hosts."""
    lines = []
    for h in rig.hosts:
        lines += [f"Host {h.name}", f"  HostName {h.addr}", "  User root"]
        if jump and h.name in jump:
            lines.append(f"  ProxyJump {jump[h.name]}")
    config = tmp_path / "ssh_config"
    config.write_text("\n".join(lines) + "\n")
    base = dict(
        config_file=str(config),
        known_hosts=[str(known_hosts)],
        identity_files=[str(rig.client_key)],
        use_agent=False,
        connect_timeout_s=CONNECT_TIMEOUT_S,
    )
    return SshSettings(**{**base, **overrides})


def connect_error(node: str, settings: SshSettings) -> tuple[SshError, float]:
    start = time.monotonic()
    with pytest.raises(SshError) as info:
        SshConnection(node, settings).connect()
    return info.value, time.monotonic() - start


def new_key(tmp_path: Path, name: str) -> Path:
    key = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=30)
    return key


def rig_host_key(rig: NetnsRig, node: str) -> str:
    """'type base64' of the node's host key, from the rig's known_hosts."""
    for line in rig.known_hosts.read_text().splitlines():
        names, rest = line.split(" ", 1)
        if node in names.split(","):
            return rest.strip()
    raise AssertionError(f"{node} not in {rig.known_hosts}")


# ------------------------------------------------------------------------------ running


def test_all_hosts_in_parallel_answer_with_their_own_name(fresh_netns_rig: NetnsRig) -> None:
    rig = fresh_netns_rig
    settings = rig_settings(rig)

    def work(node: str):
        with SshConnection(node, settings) as conn:
            # two commands at once on the one connection
            results: dict[str, object] = {}
            threads = [
                threading.Thread(target=lambda a=argv: results.__setitem__(a[0], conn.run(a, timeout_s=10)))
                for argv in (("hostname",), ("ip", "-j", "link"))
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(15)
            return results

    done: list[str] = []
    out = fan_out(rig.names, work, max_parallel=4, on_done=lambda n, r: done.append(n))
    assert sorted(done) == rig.names
    for h in rig.hosts:
        name, links = out[h.name]["hostname"], out[h.name]["ip"]
        assert name.ok and name.stdout.strip() == h.name, name
        assert links.ok, links
        mtus = {link["ifname"]: link["mtu"] for link in json.loads(links.stdout)}
        assert mtus["eth0"] == h.mtu


def test_large_stdout_and_stderr_with_stdin_do_not_deadlock(fresh_netns_rig: NetnsRig) -> None:
    script = "(yes err | head -c 5000000 >&2) & (yes out | head -c 5000000); cat >&2; wait"
    data = "in\n" * 500_000  # 1.5 MB fed while both outputs stream
    with SshConnection("node2", rig_settings(fresh_netns_rig)) as conn:
        r = conn.run(("sh", "-c", script), timeout_s=30, input=data)
    assert r.ok, (r.returncode, r.error, r.stderr[-200:])
    assert len(r.stdout) == 5_000_000 and set(r.stdout) == {"o", "u", "t", "\n"}
    assert len(r.stderr) == 5_000_000 + len(data)
    assert r.duration_s < 20


def test_hostile_arguments_are_passed_literally(fresh_netns_rig: NetnsRig) -> None:
    marker = Path(f"/tmp/hc-pwned-{uuid.uuid4().hex}")  # /tmp is shared with the hosts
    hostile = [f"a; touch {marker}", f"$(touch {marker})", f"`touch {marker}`", "it's \"q\"\n\tü"]
    with SshConnection("node1", rig_settings(fresh_netns_rig)) as conn:
        for arg in hostile:
            r = conn.run(("printf", "%s", arg), timeout_s=10)
            assert r.ok and r.stdout == arg, r
        r = conn.run(("sh", "-c", 'printf %s "$X"'), timeout_s=10, env={"X": hostile[1]})
        assert r.ok and r.stdout == hostile[1], r
    assert not marker.exists()


def test_exit_status_and_command_not_found(fresh_netns_rig: NetnsRig) -> None:
    with SshConnection("node3", rig_settings(fresh_netns_rig)) as conn:
        r = conn.run(("sh", "-c", "echo out; echo err >&2; exit 3"), timeout_s=10)
        assert (r.returncode, r.stdout, r.stderr, r.ok) == (3, "out\n", "err\n", False)
        missing = conn.run(("hc-no-such-tool", "--version"), timeout_s=10)
        assert missing.not_found and missing.returncode is None
        assert missing.stderr == "hc-no-such-tool: command not found"


def test_hung_command_times_out_and_leaves_nothing_behind(fresh_netns_rig: NetnsRig) -> None:
    rig = fresh_netns_rig
    with SshConnection("node4", rig_settings(rig)) as conn:
        start = time.monotonic()
        r = conn.run(("sleep", "61.5"), timeout_s=1.5)
        assert r.timed_out and r.returncode is None and not r.ok
        assert time.monotonic() - start < 1.5 + 1
        # one that ignores SIGTERM (sleep inherits the ignored signal) needs the -k KILL
        r = conn.run(("sh", "-c", "trap '' TERM; sleep 61.7"), timeout_s=1.0)
        assert r.timed_out
        assert conn.run(("hostname",), timeout_s=10).stdout.strip() == "node4"  # still usable

    def leftovers() -> str:
        return rig.exec("node4", ["pgrep", "-af", "sleep 61[.][57]"]).stdout

    wait_for(lambda: not leftovers(), timeout=6, poll=0.2, what="the remote sleeps to be gone")


def test_session_killed_mid_command_is_a_dropped_connection(fresh_netns_rig: NetnsRig) -> None:
    rig = fresh_netns_rig
    # kill the sshd process that serves this session ("sshd: root@notty"), not the listener;
    # a second after the first line, so sshd has sent it (CI once lost it to the kill)
    rig.local_bin(
        "node3",
        "hc-kill-my-session",
        "#!/bin/sh\necho started\nsleep 1\np=$$\nwhile [ \"$p\" -gt 1 ]; do\n"
        "  case \"$(tr '\\0' ' ' < /proc/$p/cmdline)\" in 'sshd: '*@*) kill -9 \"$p\"; break;; esac\n"
        "  p=$(awk '{print $4}' /proc/$p/stat)\ndone\nsleep 3\n",
    )
    with SshConnection("node3", rig_settings(rig)) as conn:
        r = conn.run(("hc-kill-my-session",), timeout_s=10)
        assert r.error and r.error.startswith("connection dropped: node3"), r
        assert r.stdout == "started\n" and r.returncode is None and not r.timed_out
        assert r.duration_s < 3
        # the next command reconnects
        assert conn.run(("hostname",), timeout_s=10).stdout.strip() == "node3"
    assert rig.host("node3").sshd_pid  # the listener survived


# ------------------------------------------------------------------------------ host keys


def test_unknown_host_key_is_refused(fresh_netns_rig: NetnsRig, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    err, _ = connect_error("node1", own_settings(fresh_netns_rig, tmp_path, empty))
    assert err.kind == "unknown-host-key"
    assert err.message.startswith(f"node1 ({fresh_netns_rig.host('node1').addr}:22): host key not known")
    assert str(empty) in err.message


def test_changed_host_key_is_refused_even_with_accept_new(fresh_netns_rig: NetnsRig, tmp_path: Path) -> None:
    rig = fresh_netns_rig
    other = new_key(tmp_path, "other").with_suffix(".pub").read_text().split()[:2]
    lines = rig.known_hosts.read_text().splitlines()
    changed = tmp_path / "known_hosts"
    changed.write_text(
        "\n".join(f"{ln.split()[0]} {' '.join(other)}" if ln.startswith("node2,") else ln for ln in lines) + "\n"
    )
    lineno = next(i for i, ln in enumerate(lines, 1) if ln.startswith("node2,"))
    for accept in (False, True):
        err, _ = connect_error("node2", own_settings(rig, tmp_path, changed, accept_new_host_keys=accept))
        assert err.kind == "changed-host-key"
        assert err.message.startswith(f"node2 ({rig.host('node2').addr}:22): host key changed: got ssh-ed25519 SHA256:")
        assert f"in {changed}:{lineno}" in err.message
    assert changed.read_text().count("\n") == len(lines)  # nothing was recorded


def test_accept_new_records_the_key_and_still_refuses_a_change(fresh_netns_rig: NetnsRig, tmp_path: Path) -> None:
    rig = fresh_netns_rig
    known = tmp_path / "known_hosts"
    known.write_text("")
    accept = own_settings(rig, tmp_path, known, accept_new_host_keys=True)
    with SshConnection("node1", accept) as conn:
        assert conn.run(("hostname",), timeout_s=10).stdout.strip() == "node1"
    assert known.read_text() == f"{rig.host('node1').addr},node1 {rig_host_key(rig, 'node1')}\n"
    # the recorded line is what a strict connection now trusts
    with SshConnection("node1", own_settings(rig, tmp_path, known)) as conn:
        assert conn.run(("true",), timeout_s=10).ok
    # node2 answers with its own key under node1's name: a changed key, not a new one
    known.write_text(f"{rig.host('node2').addr},node2 {rig_host_key(rig, 'node1')}\n")
    err, _ = connect_error("node2", accept)
    assert err.kind == "changed-host-key"


def test_revoked_host_key_is_refused_even_when_known_and_never_accepted(fresh_netns_rig: NetnsRig, tmp_path: Path) -> None:
    rig = fresh_netns_rig
    key = rig_host_key(rig, "node1")
    known = tmp_path / "known_hosts"
    known.write_text(f"{rig.host('node1').addr},node1 {key}\n@revoked * {key}\n")
    err, _ = connect_error("node1", own_settings(rig, tmp_path, known))
    assert err.kind == "revoked-host-key" and f"{known}:2" in err.message
    only_revoked = tmp_path / "revoked_only"
    only_revoked.write_text(f"@revoked node1 {key}\n")
    err, _ = connect_error("node1", own_settings(rig, tmp_path, only_revoked, accept_new_host_keys=True))
    assert err.kind == "revoked-host-key"
    assert only_revoked.read_text() == f"@revoked node1 {key}\n"  # not recorded as new
    # revoked for another host only: node1 connects as usual
    other = tmp_path / "other_revoked"
    other.write_text(f"{rig.host('node1').addr},node1 {key}\n@revoked node4 {key}\n")
    with SshConnection("node1", own_settings(rig, tmp_path, other)) as conn:
        assert conn.run(("true",), timeout_s=10).ok


# ---------------------------------------------------------------------- connection errors


def test_sshd_stopped_is_refused_at_once(fresh_netns_rig: NetnsRig) -> None:
    fresh_netns_rig.stop_sshd("node4")
    err, took = connect_error("node4", rig_settings(fresh_netns_rig))
    assert err.kind == "refused" and err.message.startswith(f"node4 ({fresh_netns_rig.host('node4').addr}:22): connection refused")
    assert took < 2


def test_link_down_times_out_within_the_connect_timeout(fresh_netns_rig: NetnsRig) -> None:
    fresh_netns_rig.set_link("node3", "eth0", False)
    err, took = connect_error("node3", rig_settings(fresh_netns_rig))
    assert err.kind in ("timeout", "unreachable") and err.message.startswith(f"node3 ({fresh_netns_rig.host('node3').addr}:22)")
    assert took < CONNECT_TIMEOUT_S + 0.5


def test_wrong_user_or_key_is_an_auth_error(fresh_netns_rig: NetnsRig, tmp_path: Path) -> None:
    rig = fresh_netns_rig
    err, _ = connect_error("node1", rig_settings(rig, user="hc-no-such-user"))
    assert err.kind == "auth" and "as hc-no-such-user" in err.message
    wrong = new_key(tmp_path, "wrong")
    err, _ = connect_error("node1", own_settings(rig, tmp_path, rig.known_hosts, identity_files=[str(wrong)]))
    assert err.kind == "auth" and str(wrong) in err.message


# -------------------------------------------------------------------------------- jumping


def test_proxy_jump_through_node1(fresh_netns_rig: NetnsRig, tmp_path: Path) -> None:
    rig = fresh_netns_rig
    settings = own_settings(rig, tmp_path, rig.known_hosts, jump={"node2": "node1"})
    with SshConnection("node2", settings) as conn:
        r = conn.run(("sh", "-c", 'hostname; echo "$SSH_CONNECTION"'), timeout_s=10)
    name, origin = r.stdout.splitlines()
    assert (name, origin.split()[0]) == ("node2", rig.host("node1").addr)  # it came from node1
    rig.stop_sshd("node2")
    err, took = connect_error("node2", settings)
    assert err.kind == "unreachable" and err.message.startswith(f"node2 ({rig.host('node2').addr}:22 via node1)")
    assert took < 2
