"""One line per hook run to syslog/journald (issue 21, section 8): `journalctl -t hc` says
what hc did on a node, and no syslog socket (or a full one) never fails or holds a hook."""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import pytest
from support import run_hc, run_hc_inproc
from test_hooks import setup

from healthcheck.report import syslog


@pytest.fixture
def listener():
    """A unix datagram socket bound where the hook is told to send (a short path: AF_UNIX
    allows 108 bytes, pytest's tmp_path can be longer)."""
    where = Path(tempfile.mkdtemp(prefix="hc-log-", dir="/tmp"))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(where / "log"))
    sock.settimeout(0)
    try:
        yield sock, str(where / "log")
    finally:
        sock.close()
        shutil.rmtree(where)


def received(sock: socket.socket) -> list[str]:
    lines = []
    while True:
        try:
            lines.append(sock.recv(65536).decode())
        except BlockingIOError:
            return lines


def test_the_datagram_is_what_syslog3_sends_one_line_bounded():
    sent = syslog.datagram("a\nb  c" + "x" * 5000, severity="warning", now=0, pid=42).decode()
    assert re.match(r"^<28>[A-Z][a-z]{2} [ 1-3]\d \d\d:\d\d:\d\d hc\[42\]: a b cx+\.\.\.$", sent)
    assert len(sent.split(": ", 1)[1]) == syslog.MAX_MESSAGE


def test_no_socket_an_empty_setting_or_a_plain_file_is_no_error(tmp_path):
    (tmp_path / "file").write_text("")
    assert syslog.send("x", path=str(tmp_path / "absent")) is False
    assert syslog.send("x", path=str(tmp_path / "file")) is False
    assert syslog.send("x", path="") is False
    assert syslog.socket_path({}) == "/dev/log" and syslog.socket_path({"HC_SYSLOG_SOCKET": ""}) == ""


def test_a_socket_nobody_reads_drops_the_line_instead_of_holding_the_hook(listener):
    sock, path = listener
    sent = []

    def flood():
        for _ in range(100_000):  # a datagram queue holds a few hundred at most
            sent.append(syslog.send("y" * 1000, path=path))
            if not sent[-1]:
                return

    worker = threading.Thread(target=flood, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "send() blocked on a full socket"
    assert sent[0] is True and sent[-1] is False


def test_a_prologue_that_drains_says_so_in_one_line(tmp_path, listener):
    sock, path = listener
    _, log, env = setup(tmp_path, mtu=1500)
    r = run_hc_inproc("prologue", env={**env, "HC_SYSLOG_SOCKET": path}, timeout=30)
    assert r.returncode == 2
    [line] = received(sock)
    assert re.match(rf"^<28>.* hc\[\d+\]: hook=prologue node=node1 job=7 verdict=FAIL findings=net.E001 exit=2 "
                    rf"report={tmp_path}/reports/node1/prologue-\S+\.json action=drain node1 \(hc: net.E001\)$", line)
    report = line.split("report=", 1)[1].split()[0]
    assert os.path.isfile(report) and not report.endswith("latest.json")


def test_a_passing_prologue_says_why_it_did_nothing(tmp_path, listener):
    sock, path = listener
    _, log, env = setup(tmp_path)
    assert run_hc_inproc("prologue", env={**env, "HC_SYSLOG_SOCKET": path}, timeout=30).returncode == 0
    [line] = received(sock)
    assert "hook=prologue node=node1 job=7 verdict=PASS exit=0 " in line
    assert line.startswith("<30>") and line.endswith(" action=none: nothing to drain")
    assert f"report={tmp_path}/reports/node1/prologue-latest.json" in line


def test_a_node_hc_may_not_drain_is_named_with_the_reason(tmp_path, listener):
    sock, path = listener
    bin_dir, log, env = setup(tmp_path, mtu=1500)
    nodes = "node1|drained|Unknown|maint jdoe\\n" + "\\n".join(f"node{i}|idle|Unknown|none" for i in range(2, 11))
    (bin_dir / "sinfo").write_text(f'#!/bin/sh\nprintf "{nodes}\\n"\n')
    assert run_hc_inproc("health", env={**env, "HC_SYSLOG_SOCKET": path}, timeout=30).returncode == 2
    [line] = received(sock)
    assert "hook=health node=node1 job=7 verdict=FAIL findings=net.E001 exit=2 " in line
    assert re.search(r" action=none: \S.*maint jdoe", line) and not log.exists()


def test_a_hook_that_could_not_run_still_logs_its_line(tmp_path, listener):
    sock, path = listener
    env = {"HC_CONFIG": str(tmp_path / "missing.yaml"), "HC_NODE_NAME": "node1", "HC_SYSLOG_SOCKET": path}
    assert run_hc("prologue", env=env).returncode == 0
    [line] = received(sock)
    assert line.startswith("<27>") and "hook=prologue verdict=none exit=0 report=none action=none: error: " in line
    assert "config file not found" in line and line.endswith("(job not affected)")


@pytest.mark.parametrize("kind, code", [("prologue", 2), ("epilogue", 0), ("health", 2)])
def test_no_syslog_socket_changes_no_exit_code(tmp_path, kind, code):
    _, log, env = setup(tmp_path, mtu=1500)
    r = run_hc(kind, env={**env, "HC_SYSLOG_SOCKET": str(tmp_path / "no-such-socket")}, timeout=30)
    assert r.returncode == code and b"Traceback" not in r.stderr
