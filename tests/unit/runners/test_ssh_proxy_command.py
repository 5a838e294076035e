"""ssh_config's ProxyCommand: tokens, the command's lifetime, its failures as SshError kinds.
Local processes only (the proxy commands here never reach an sshd); the rig test
tests/integration/test_ssh_certs_proxy_rig.py runs `hc node` through a real proxy."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from healthcheck.core.config.schema import SshSettings
from healthcheck.runners.ssh import SshConnection, SshError, resolve_target
from healthcheck.runners.ssh.proxy import ProxyProcess, expand_tokens


def gone(pid: int) -> bool:
    """Dead, or a zombie waiting for PID 1 (which reaps late here): nothing runs."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def read_pid(path: Path, timeout: float = 5.0) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        text = path.read_text().strip() if path.exists() else ""
        if text.isdigit():
            return int(text)
        time.sleep(0.02)
    raise AssertionError(f"{path} never got a pid")


def script(tmp_path: Path, name: str, body: str) -> str:
    """A proxy script: ssh (and hc) run `exec <ProxyCommand>`, so a compound command
    needs a script or `sh -c` of its own."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def config(tmp_path: Path, body: str) -> str:
    path = tmp_path / "ssh_config"
    path.write_text(body)
    return str(path)


def test_proxycommand_is_kept_raw_and_expanded_with_the_final_target(tmp_path) -> None:
    cfg = config(tmp_path, "Host a\n  HostName 10.1.1.1\n  ProxyCommand ssh -W %h:%p -l %r jump # %n 100%%\n")
    target = resolve_target("a", SshSettings(config_file=cfg, port=2200, user="bob"))
    assert target.proxy_command == "ssh -W %h:%p -l %r jump # %n 100%%"
    assert target.where == "a (10.1.1.1:2200 via ProxyCommand)"
    # paramiko would have said 22 (no Port line) and the local user (no User line)
    assert expand_tokens(target.proxy_command, target) == "ssh -W 10.1.1.1:2200 -l bob jump # a 100%"


def test_expansion_is_one_pass(tmp_path) -> None:
    cfg = config(tmp_path, "Host a\n  HostName h%p\n  ProxyCommand nc %h %p\n")
    target = resolve_target("a", SshSettings(config_file=cfg))
    assert expand_tokens(target.proxy_command or "", target) == "nc h%p 22"  # %h's value is not expanded again


@pytest.mark.parametrize("command", ["nc %h %Z", "nc %h %"])
def test_unknown_tokens_are_config_errors(tmp_path, command) -> None:
    target = resolve_target("a", SshSettings(config_file=config(tmp_path, f"Host a\n  ProxyCommand {command}\n")))
    with pytest.raises(SshError) as info:
        expand_tokens(command, target)
    assert info.value.kind == "config" and "unknown token" in info.value.message


def test_proxycommand_none_and_both_proxies(tmp_path) -> None:
    cfg = config(tmp_path, "Host a\n  ProxyCommand none\nHost b\n  ProxyJump a\n  ProxyCommand nc %h %p\n")
    assert resolve_target("a", SshSettings(config_file=cfg)).proxy_command is None
    with pytest.raises(SshError, match="both ProxyJump") as info:
        resolve_target("b", SshSettings(config_file=cfg))
    assert info.value.kind == "config"


def test_close_ends_the_command_and_what_it_started(tmp_path) -> None:
    pids = tmp_path / "pids"
    proxy = ProxyProcess(script(tmp_path, "p", f"sleep 300 & echo $! > {pids}; exec sleep 300\n"), "a")
    child = read_pid(pids)
    assert not gone(proxy.pid) and not gone(child)
    start = time.monotonic()
    proxy.close()
    assert time.monotonic() - start < 3
    assert gone(proxy.pid) and gone(child)
    proxy.close()  # idempotent


def test_close_kills_a_command_that_ignores_sigterm(tmp_path) -> None:
    ready = tmp_path / "ready"
    proxy = ProxyProcess(script(tmp_path, "p", f"trap '' TERM; echo $$ > {ready}; while :; do sleep 0.05; done\n"),
                         "a")
    read_pid(ready)
    proxy.close()
    assert gone(proxy.pid)


def settings_for(tmp_path: Path, command: str, timeout: float = 1.0) -> SshSettings:
    cfg = config(tmp_path, f"Host a\n  HostName 10.255.255.1\n  ProxyCommand {command}\n")
    return SshSettings(config_file=cfg, known_hosts=[], use_agent=False, connect_timeout_s=timeout)


def connect_error(node: str, settings: SshSettings) -> tuple[SshError, float]:
    start = time.monotonic()
    with pytest.raises(SshError) as info:
        SshConnection(node, settings).connect()
    return info.value, time.monotonic() - start


def test_a_proxy_that_fails_is_that_nodes_error_with_its_words(tmp_path) -> None:
    pid = tmp_path / "pid"
    said = "nc: connect to 10.255.255.1 port 22 (tcp) failed: Connection refused"
    proxy = script(tmp_path, "p", f"echo $$ > {pid}; echo '{said}' >&2; exit 1\n")
    err, took = connect_error("a", settings_for(tmp_path, f"{proxy} %h %p"))
    assert err.kind == "refused" and said in err.message and "exited with status 1" in err.message
    assert err.message.startswith("a (10.255.255.1:22 via ProxyCommand)")
    assert took < 3 and gone(read_pid(pid))


def test_a_proxy_command_that_does_not_exist_is_a_config_error(tmp_path) -> None:
    err, _ = connect_error("a", settings_for(tmp_path, "/no/such/proxy %h %p"))
    assert err.kind == "config" and "status 127" in err.message


def test_a_silent_proxy_times_out_within_the_connect_timeout_and_is_ended(tmp_path) -> None:
    pid = tmp_path / "pid"
    proxy = script(tmp_path, "p", f"echo $$ > {pid}; exec sleep 300\n")
    err, took = connect_error("a", settings_for(tmp_path, proxy, timeout=1.0))
    assert err.kind == "timeout"
    assert took < 4
    assert gone(read_pid(pid))


def test_no_proxy_process_is_left_after_many_failed_connects(tmp_path) -> None:
    before = set(os.listdir("/proc"))
    for i in range(5):
        pid = tmp_path / f"pid{i}"
        connect_error("a", settings_for(tmp_path, script(tmp_path, f"p{i}", f"echo $$ > {pid}; exit 3\n")))
        assert gone(read_pid(pid))
    children = [p for p in set(os.listdir("/proc")) - before if p.isdigit() and not gone(int(p))]
    assert all(_ppid(int(p)) != os.getpid() for p in children)


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ValueError, IndexError):
        return -1


def test_the_proxy_dies_with_a_killed_hc_even_when_a_passing_thread_started_it(tmp_path) -> None:
    import signal
    import subprocess
    import sys

    pid_file = tmp_path / "pid"
    proxy = script(tmp_path, "p", f"echo $$ > {pid_file}; exec sleep 300\n")
    # connections are made from fan-out threads that end long before the connection
    code = f"""
import threading, time
from healthcheck.runners.ssh.proxy import ProxyProcess
held = []
t = threading.Thread(target=lambda: held.append(ProxyProcess({proxy!r}, "a")))
t.start(); t.join()
print("up", flush=True)
time.sleep(300)
"""
    hc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert hc.stdout is not None and hc.stdout.readline().strip() == "up"
        pid = read_pid(pid_file)
        time.sleep(0.3)
        assert not gone(pid), "the proxy died with the thread that started it"
        hc.send_signal(signal.SIGKILL)
        hc.wait(timeout=10)
        end = time.monotonic() + 5
        while not gone(pid) and time.monotonic() < end:
            time.sleep(0.05)
        assert gone(pid)
    finally:
        if hc.poll() is None:
            hc.kill()
            hc.wait(timeout=10)
