"""The SSH runner's pure parts: remote command quoting, environment and node-name
validation, exit-status mapping, ssh config and known_hosts handling, fan_out's bounds.
No network: the rig tests (tests/integration/test_ssh_runner.py) cover the wire."""

from __future__ import annotations

import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from healthcheck.core.config.schema import SshSettings
from healthcheck.runners.ssh import (
    SshConnection,
    SshError,
    SshErrorKind,
    append_known_host,
    check_env,
    fan_out,
    find_known_keys,
    format_seconds,
    import_paramiko,
    parse_jump,
    remote_command,
    remote_result,
    resolve_target,
)

HOSTILE = [
    "$(rm -rf /)",
    "`id`",
    "a; touch /tmp/pwned",
    "a && b || c",
    "'",
    '"',
    "it's \"quoted\"",
    "line1\nline2",
    "tab\there",
    "ünïcödé ✓",
    "",
    "-n",
    "*",
    "~",
    "$HOME",
    "\\",
    "a b  c",
    "> /tmp/x",
    "|",
    "#comment",
]


# ------------------------------------------------------------------------------- quoting


def test_remote_command_is_the_timeout_wrapper_then_argv_word_for_word() -> None:
    cmd = remote_command(("printf", "%s", *HOSTILE), timeout_s=61.5)
    assert shlex.split(cmd) == ["timeout", "-k", "2", "61.5", "printf", "%s", *HOSTILE]


@pytest.mark.parametrize("arg", HOSTILE)
def test_hostile_argument_reaches_the_command_literally(arg: str, tmp_path: Path) -> None:
    # the same string a remote login shell gets, run by a real sh here
    cmd = remote_command(("printf", "%s", arg), timeout_s=5)
    r = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, cwd=tmp_path, timeout=10)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode() == arg
    assert list(tmp_path.iterdir()) == []  # nothing redirected or touched


def test_argv0_starting_with_a_dash_stays_the_command() -> None:
    words = shlex.split(remote_command(("-x", "y"), timeout_s=1, env={"A": "1"}))
    assert words == ["timeout", "-k", "2", "1", "env", "A=1", "-x", "y"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [((), "empty"), (("a\0b",), "NUL"), ((1,), "strings"), (("a=b",), "=")],
)
def test_remote_command_rejects_what_it_cannot_carry(argv, message: str) -> None:
    env = {"A": "1"} if argv == ("a=b",) else None
    with pytest.raises(ValueError, match=message):
        remote_command(argv, timeout_s=1, env=env)


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0.01"), (-3, "0.01"), (1.5, "1.5"), (60, "60"), (1e6, "1000000"), (0.0004, "0.01")]
)
def test_format_seconds_is_plain_decimal_and_never_zero(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


# --------------------------------------------------------------------------- environment


def test_env_values_are_quoted(tmp_path: Path) -> None:
    env = {"HC_NODE_NAME": "$(touch pwned); `id` 'x' \"y\"\nz", "_A1": ""}
    cmd = remote_command(("sh", "-c", 'printf "%s|%s" "$HC_NODE_NAME" "$_A1"'), timeout_s=5, env=env)
    r = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, cwd=tmp_path, timeout=10)
    assert r.stdout.decode() == env["HC_NODE_NAME"] + "|"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["", "1A", "A-B", "A B", "A=B", "$(x)", "Ä", "a;b", "A\n"])
def test_env_names_are_validated(name: str) -> None:
    with pytest.raises(ValueError, match="name"):
        check_env({name: "v"})


def test_env_values_must_be_strings_without_nul() -> None:
    with pytest.raises(ValueError):
        check_env({"A": "a\0b"})
    with pytest.raises(ValueError):
        check_env({"A": 1})  # type: ignore[dict-item]
    assert check_env({"A_1": "x y", "_": ""}) == {"A_1": "x y", "_": ""}
    assert check_env(None) == {}


def test_run_never_raises_for_bad_input_and_does_not_connect() -> None:
    conn = SshConnection("node1", SshSettings(config_file=None, known_hosts=[], use_agent=False))
    r = conn.run(("true",), timeout_s=1, env={"BAD-NAME": "1"})
    assert r.error and "BAD-NAME" in r.error and not r.ok
    assert conn.run((), timeout_s=1).error == "empty command"
    assert not conn.connected


# ---------------------------------------------------------------------------- node names


@pytest.mark.parametrize("name", ["", "-node", "node 1", "node;rm", "$(id)", "a" * 64, "node_1", "n/1", "n\n"])
def test_bad_node_names_are_config_errors(name: str) -> None:
    with pytest.raises(SshError) as info:
        SshConnection(name, SshSettings())
    assert info.value.kind == "config"
    assert repr(name) in info.value.message


@pytest.mark.parametrize("name", ["node1", "gpu-017", "n1.cluster.example", "10.98.0.11"])
def test_good_node_names(name: str) -> None:
    assert SshConnection(name, SshSettings()).node == name


def test_ssh_error_kinds_are_closed() -> None:
    err = SshError(SshErrorKind.REFUSED, "node1: refused")
    assert str(err) == "node1: refused"
    # the kind is an enum that is also its string: comparisons, str() and JSON see the value
    assert err.kind is SshErrorKind.REFUSED and err.kind == "refused" and str(err.kind) == "refused"
    assert [str(k) for k in SshErrorKind] == [
        "unknown-host-key", "changed-host-key", "revoked-host-key", "bad-host-certificate", "refused", "timeout",
        "unreachable", "auth", "dropped", "config", "other",
    ]
    with pytest.raises(ValueError):
        SshError("nope", "x")  # type: ignore[arg-type]


# -------------------------------------------------------------------- exit-status mapping


def test_exit_statuses_map_like_the_local_runner() -> None:
    argv = ("tool", "x")
    assert remote_result(argv, 0, "out", "", 0.1, 5).ok
    assert remote_result(argv, 3, "", "bad", 0.1, 5).returncode == 3
    late = remote_result(argv, 124, "partial", "", 5.02, 5)
    assert late.timed_out and late.returncode is None and late.stdout == "partial"
    assert remote_result(argv, 137, "", "", 7.0, 5).timed_out
    # a tool's own 124 long before the limit is just an exit status
    assert remote_result(argv, 124, "", "", 0.2, 5).returncode == 124
    wrapper = remote_result(argv, 127, "", "timeout: failed to run command 'tool': No such file or directory\n", 0.1, 5)
    assert wrapper.not_found and wrapper.returncode is None and wrapper.stderr == "tool: command not found"
    script = remote_result(argv, 127, "", "tool: line 3: frob: command not found\n", 0.1, 5)
    assert script.not_found and "frob" in script.stderr
    denied = remote_result(argv, 126, "", "timeout: failed to run command 'tool': Permission denied\n", 0.1, 5)
    assert denied.error and "Permission denied" in denied.error and denied.returncode is None


# ------------------------------------------------------------------- ssh config, jumping


def test_parse_jump() -> None:
    assert parse_jump("node1") == (None, "node1", None)
    assert parse_jump("admin@bastion:2222") == ("admin", "bastion", 2222)
    assert parse_jump("ssh://u@h") == ("u", "h", None)
    for bad in ("a,b", "h:x", "h:0", "u@", ""):
        with pytest.raises(ValueError):
            parse_jump(bad)


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_resolve_target_reads_the_ssh_config(tmp_path: Path) -> None:
    cfg = _write(
        tmp_path / "config",
        "Host gpu*\n  HostName %h.cluster\n  User admin\n  Port 2222\n  IdentityFile ~/k1\n"
        "  UserKnownHostsFile /etc/kh1 /etc/kh2\n  ProxyJump jump@bastion:22\n  IdentitiesOnly yes\n"
        "Host *\n  IdentityFile /k2\n",
    )
    t = resolve_target("gpu1", SshSettings(config_file=cfg, known_hosts=["/kh0"], identity_files=["/k0"]))
    assert (t.hostname, t.port, t.user) == ("gpu1.cluster", 2222, "admin")
    assert t.identity_files[0] == "/k0" and t.identity_files[-1] == "/k2" and len(t.identity_files) == 3
    assert t.known_hosts == ("/kh0", "/etc/kh1", "/etc/kh2")
    assert t.host_key_names == ("gpu1.cluster", "gpu1")
    assert t.proxy_jump == "jump@bastion:22" and t.identities_only
    assert t.where == "gpu1 (gpu1.cluster:2222 via jump@bastion:22)"
    # settings.user wins over the config's User
    assert resolve_target("gpu1", SshSettings(config_file=cfg, user="me")).user == "me"


def test_resolve_target_without_a_config_file(tmp_path: Path) -> None:
    t = resolve_target("n1", SshSettings(config_file=str(tmp_path / "missing"), port=2200, known_hosts=[]))
    assert (t.hostname, t.port, t.known_hosts, t.proxy_jump) == ("n1", 2200, (), None)


def test_host_key_alias_is_the_only_lookup_name(tmp_path: Path) -> None:
    cfg = _write(tmp_path / "config", "Host n1\n  HostName 10.0.0.1\n  HostKeyAlias n1-key\n")
    assert resolve_target("n1", SshSettings(config_file=cfg)).host_key_names == ("n1-key",)


def test_second_hops_are_refused(tmp_path: Path) -> None:
    # ProxyCommand is honoured now: tests/unit/runners/test_ssh_proxy_command.py
    cfg = _write(tmp_path / "config", "Host a\n  ProxyCommand nc %h %p\nHost b\n  ProxyJump a\n")
    assert resolve_target("a", SshSettings(config_file=cfg)).proxy_command == "nc %h %p"
    with pytest.raises(SshError, match="one hop"):
        resolve_target("b", SshSettings(config_file=cfg), jump=False)


def test_unparsable_config_is_a_config_error(tmp_path: Path) -> None:
    cfg = _write(tmp_path / "config", "Host a\n  Port\n")
    with pytest.raises(SshError) as info:
        resolve_target("a", SshSettings(config_file=cfg))
    assert info.value.kind == "config"


def test_import_paramiko_blocks_invoke_and_match_exec_is_a_config_error(tmp_path: Path) -> None:
    # a fresh interpreter: this one may have imported paramiko (or invoke) already
    cfg = _write(tmp_path / "config", "Match exec \"true\"\n  User x\nHost *\n  User y\n")
    code = f"""
import sys
from healthcheck.runners.ssh import import_paramiko, resolve_target, SshError
from healthcheck.core.config.schema import SshSettings
p = import_paramiko()
assert p.config.invoke is None, "paramiko imported invoke"
assert "invoke" not in sys.modules, "the block leaked"
assert import_paramiko() is p
try:
    resolve_target("a", SshSettings(config_file={cfg!r}))
except SshError as e:
    assert e.kind == "config" and "Match exec" in e.message, e.message
    print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "ok", r.stderr


# ---------------------------------------------------------------------------- known_hosts


def _key():
    return import_paramiko().ECDSAKey.generate()


def test_known_hosts_lookup_plain_hashed_and_ported(tmp_path: Path) -> None:
    paramiko = import_paramiko()
    k1, k2, k3 = _key(), _key(), _key()
    hashed = paramiko.HostKeys.hash_host("node2")
    kh = _write(
        tmp_path / "known_hosts",
        "# comment\n\ngarbage line\n@cert-authority *.x ssh-ed25519 AAAA\n"
        f"node1,10.0.0.1 {k1.get_name()} {k1.get_base64()}\n"
        f"{hashed} {k2.get_name()} {k2.get_base64()}\n"
        f"[node3]:2222 {k3.get_name()} {k3.get_base64()}\n",
    )
    (one,) = find_known_keys((kh, str(tmp_path / "missing")), "10.0.0.1", 22)
    assert one.key == k1 and one.lineno == 5 and one.path == kh
    assert find_known_keys((kh,), "node2", 22)[0].key == k2
    assert find_known_keys((kh,), "node3", 2222)[0].key == k3
    assert find_known_keys((kh,), "node3", 22) == []
    assert find_known_keys((kh,), "node9", 22) == []


def test_recorded_keys_are_plain_lines_found_again(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "known_hosts"
    path.parent.mkdir()
    path.write_text("other ssh-ed25519 AAAA")  # no final newline
    key = _key()
    append_known_host(str(path), ("10.0.0.5", "node5"), 22, key)
    lines = path.read_text().splitlines()
    assert lines[1] == f"10.0.0.5,node5 {key.get_name()} {key.get_base64()}"
    assert find_known_keys((str(path),), "node5", 22)[0].key == key
    append_known_host(str(tmp_path / "new" / "kh"), ("n",), 2222, key)
    assert (tmp_path / "new" / "kh").read_text().startswith("[n]:2222 ")


# -------------------------------------------------------------------------------- fan_out


def test_fan_out_never_runs_more_than_max_parallel() -> None:
    lock = threading.Lock()
    running = peak = 0

    def work(node: str) -> str:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.03)
        with lock:
            running -= 1
        return node.upper()

    done: list[str] = []
    nodes = [f"n{i}" for i in range(12)]
    out = fan_out(nodes, work, max_parallel=3, on_done=lambda n, r: done.append(n))
    assert out == {n: n.upper() for n in nodes} and list(out) == nodes
    assert peak == 3
    assert sorted(done) == sorted(nodes)


def test_fan_out_on_done_runs_in_the_calling_thread() -> None:
    threads: set[int] = set()
    fan_out(["a", "b"], lambda n: n, max_parallel=2, on_done=lambda n, r: threads.add(threading.get_ident()))
    assert threads == {threading.get_ident()}


def test_fan_out_reraises_and_cancels_what_has_not_started() -> None:
    started: list[str] = []

    def work(node: str) -> str:
        started.append(node)
        if node == "n1":
            raise RuntimeError("config is broken")
        time.sleep(0.05)
        return node

    with pytest.raises(RuntimeError, match="config is broken"):
        fan_out([f"n{i}" for i in range(10)], work, max_parallel=2)
    assert len(started) < 10


def test_fan_out_edges() -> None:
    assert fan_out([], lambda n: n, max_parallel=4) == {}
    calls: list[str] = []
    assert fan_out(["a", "a", "b"], lambda n: calls.append(n) or n, max_parallel=8) == {"a": "a", "b": "b"}
    assert sorted(calls) == ["a", "b"]
    with pytest.raises(ValueError):
        fan_out(["a"], lambda n: n, max_parallel=0)


# ------------------------------------------------- handshake failures against a fake server


@pytest.fixture
def fake_server():
    """A TCP listener on 127.0.0.1 that closes, stays silent or talks nonsense."""
    import socket

    servers: list[socket.socket] = []
    held: list[socket.socket] = []

    def start(behaviour: str) -> int:
        srv = socket.create_server(("127.0.0.1", 0))
        servers.append(srv)

        def serve() -> None:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            if behaviour == "close":
                conn.close()
            elif behaviour == "garbage":
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                conn.close()
            else:  # silent: hold the connection open until the test ends
                held.append(conn)

        threading.Thread(target=serve, daemon=True).start()
        return srv.getsockname()[1]

    yield start
    for s in servers + held:
        s.close()


def _local(port: int, timeout_s: float = 1.0) -> SshSettings:
    return SshSettings(config_file=None, known_hosts=[], use_agent=False, port=port, connect_timeout_s=timeout_s)


@pytest.mark.parametrize(("behaviour", "kind"), [("close", "dropped"), ("garbage", "dropped"), ("silent", "timeout")])
def test_handshake_failures_are_classified(fake_server, behaviour: str, kind: str) -> None:
    port = fake_server(behaviour)
    start = time.monotonic()
    with pytest.raises(SshError) as info:
        SshConnection("127.0.0.1", _local(port)).connect()
    assert info.value.kind == kind, info.value.message
    assert info.value.message.startswith(f"127.0.0.1 (127.0.0.1:{port})")
    assert time.monotonic() - start < 1.0 + 0.5


def test_closed_port_is_refused_and_run_reports_it() -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = srv.getsockname()[1]
    conn = SshConnection("127.0.0.1", _local(port))
    with pytest.raises(SshError) as info:
        conn.connect()
    assert info.value.kind == "refused"
    r = conn.run(("hostname",), timeout_s=5)  # run() reconnects, and never raises
    assert r.error and "refused" in r.error and r.returncode is None


def test_unresolvable_name_is_unreachable() -> None:
    with pytest.raises(SshError) as info:
        SshConnection("no-such-host.invalid", _local(22)).connect()
    # "timeout" where no resolver answers within the connect timeout
    assert info.value.kind in ("unreachable", "timeout") and "no-such-host.invalid" in info.value.message


# ------------------------------------------------------------------ working directory (cwd)


def test_cwd_is_entered_first_and_quoted(tmp_path: Path) -> None:
    odd = tmp_path / "a b $(touch pwned) 'q'\\n"
    odd.mkdir()
    cmd = remote_command(("sh", "-c", 'pwd; printf "%s" "$V"'), timeout_s=5, env={"V": "x y"}, cwd=str(odd))
    assert cmd.startswith("cd -- ")
    r = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, cwd=tmp_path, timeout=10)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode() == f"{odd}\nx y"
    assert not (tmp_path / "pwned").exists() and not (odd / "pwned").exists()


def test_a_cwd_that_cannot_be_entered_is_an_error_not_the_commands_status(tmp_path: Path) -> None:
    cmd = remote_command(("true",), timeout_s=5, cwd=str(tmp_path / "missing"))
    r = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, timeout=10)
    mapped = remote_result(("true",), r.returncode, "", r.stderr.decode(), 0.1, 5)
    assert r.returncode == 125 and mapped.error and "missing" in mapped.error and not mapped.ok
    # a command's own 125 without the marker stays its exit status
    assert remote_result(("x",), 125, "", "x: failed\n", 0.1, 5).returncode == 125


@pytest.mark.parametrize("cwd", ["", "a\0b"])
def test_bad_cwd_is_refused_without_connecting(cwd: str) -> None:
    with pytest.raises(ValueError, match="working directory"):
        remote_command(("true",), timeout_s=1, cwd=cwd)
    conn = SshConnection("node1", SshSettings(config_file=None, known_hosts=[], use_agent=False))
    r = conn.run(("true",), timeout_s=1, cwd=cwd)
    assert r.error and "working directory" in r.error and not conn.connected


def test_closing_a_connection_waits_for_paramikos_transport_thread():
    """paramiko's own close() does not join its transport thread; ours does."""
    import threading

    from healthcheck.runners.ssh import close_and_join

    release = threading.Event()
    transport = threading.Thread(target=release.wait, args=(5,), daemon=True)
    transport.start()

    class Client:
        def get_transport(self):
            return transport

        def close(self):
            release.set()  # the transport's loop ends shortly after close

    close_and_join(Client())
    assert not transport.is_alive()
