"""`SshConnection`: one paramiko connection per node (connect, handshake, jump host or
ProxyCommand, host certificates), its commands (`run`, never raising) and its closing
(joining paramiko's transport thread, ending the ProxyCommand).
"""

from __future__ import annotations

import dataclasses
import os
import select
import socket
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from healthcheck.runners.base import CommandResult
from healthcheck.runners.ssh.commands import remote_command, remote_result
from healthcheck.runners.ssh.config import Target, parse_jump, resolve_target
from healthcheck.runners.ssh.errors import SshError, SshErrorKind
from healthcheck.runners.ssh.host_certs import cert_first_transport
from healthcheck.runners.ssh.known_hosts import (
    HostKeyPolicy,
    UnknownHostKey,
    cert_authorities,
    find_known_keys,
    host_pattern,
    key_fingerprint,
    refuse_revoked,
)
from healthcheck.runners.ssh.paramiko_import import import_paramiko
from healthcheck.runners.ssh.proxy import ProxyProcess, expand_tokens
from healthcheck.runners.ssh.stream import RemoteStream, drain_chunks
from healthcheck.runners.ssh.tcp import open_socket

if TYPE_CHECKING:  # the config package costs ~35 ms to import; callers have it already
    from healthcheck.core.config.schema import SshSettings


# We stop waiting locally this long after timeout_s: enough for the remote wrapper's
# exit status (and the output printed so far) to arrive, well inside the +1 s promise.
LOCAL_GRACE_S = 0.5

# Concurrent commands per connection: below OpenSSH's default MaxSessions (10).
MAX_SESSIONS = 8
_WRITE_CHUNK = 1 << 15


class SshConnection:
    """One SSH connection to one node, shared by every command (and thread) on it.

    `connect()` raises SshError; `run()` never raises. A connection that dropped is
    re-established by the next `run()` (once per call), so one command that kills its
    session does not fail the commands after it.
    """

    def __init__(
        self,
        node: str,
        settings: SshSettings,
        *,
        _jump_allowed: bool = True,
        _port: int | None = None,
    ) -> None:
        from healthcheck.core.errors import HcError
        from healthcheck.core.nodes import check_node_name

        try:
            check_node_name(node)
            if node != node.strip():  # nodes.py's "$" lets a trailing newline through
                raise HcError(f"{node!r} is not a valid node name (it has white space)")
        except HcError as exc:
            raise SshError(SshErrorKind.CONFIG, str(exc)) from None
        self.node = node
        self.settings = settings
        self._jump_allowed = _jump_allowed
        self._port = _port  # a jump host's "host:port" from ProxyJump beats its config
        self._lock = threading.Lock()
        self._sessions = threading.BoundedSemaphore(MAX_SESSIONS)
        self._client: Any = None
        self._jump: SshConnection | None = None
        self._proxy: ProxyProcess | None = None
        self.target: Target | None = None

    def __repr__(self) -> str:
        return f"SshConnection({self.node!r}, connected={self.connected})"

    def __enter__(self) -> SshConnection:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- connecting -----------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        client = self._client
        transport = client.get_transport() if client is not None else None
        return bool(
            transport is not None and transport.is_active() and transport.is_authenticated()
        )

    def connect(self) -> None:
        """Connect and authenticate (no-op when connected); SshError on any failure."""
        with self._lock:
            if self.connected:
                return
            self._close_locked()
            self._connect_locked()

    def _connect_locked(self) -> None:
        try:
            self._connect_steps()
        except SshError:
            raise
        except Exception as exc:  # a surprise from paramiko or the OS: still an SshError
            raise SshError(SshErrorKind.OTHER, f"{self._where()}: {type(exc).__name__}: {exc}") from None

    def _connect_steps(self) -> None:
        deadline = time.monotonic() + self.settings.connect_timeout_s
        target = resolve_target(self.node, self.settings, jump=self._jump_allowed)
        if self._port is not None:
            target = dataclasses.replace(target, port=self._port)
        self.target = target
        client = import_paramiko().SSHClient()
        lookup_name = self._prepare_host_keys(client, target)  # before anything is opened
        client.set_missing_host_key_policy(HostKeyPolicy(self.settings.accept_new_host_keys, target))
        sock = self._open_sock(target, deadline)
        try:
            self._handshake(client, target, lookup_name, sock, deadline)
        except SshError as exc:
            failure = self._proxy_failure(exc)
            client.close()
            sock.close()
            self._close_jump()
            self._close_proxy()
            raise failure from None
        except BaseException:
            client.close()
            sock.close()
            self._close_jump()
            self._close_proxy()
            raise
        self._client = client

    def _proxy_failure(self, exc: SshError) -> SshError:
        """A handshake that failed because the ProxyCommand ended says so (its status
        and stderr) instead of "connection closed during the SSH handshake"."""
        if self._proxy is None or exc.kind not in (SshErrorKind.DROPPED, SshErrorKind.TIMEOUT, SshErrorKind.OTHER):
            return exc
        return self._proxy.failure() or exc

    def _open_sock(self, target: Target, deadline: float) -> Any:
        """A TCP socket to the node, a direct-tcpip channel through the jump host, or
        the stdin/stdout of the ProxyCommand."""
        if target.proxy_command:
            self._proxy = ProxyProcess(expand_tokens(target.proxy_command, target), target.where)
            return self._proxy.sock
        if not target.proxy_jump:
            try:
                return open_socket(target.hostname, target.port, deadline)
            except SshError as exc:
                raise SshError(exc.kind, f"{target.where}: {exc.message}") from None
        return self._open_via_jump(target, deadline)

    def _open_via_jump(self, target: Target, deadline: float) -> Any:
        try:
            user, host, port = parse_jump(target.proxy_jump or "")
        except ValueError as exc:
            raise SshError(SshErrorKind.CONFIG, f"{target.where}: {exc}") from None
        settings = self.settings
        remaining = max(deadline - time.monotonic(), 0.1)
        overrides: dict[str, Any] = {"connect_timeout_s": remaining}
        if user:
            overrides["user"] = user
        import msgspec

        jump_settings = msgspec.structs.replace(settings, **overrides)
        try:
            jump = SshConnection(host, jump_settings, _jump_allowed=False, _port=port)
            jump.connect()
        except SshError as exc:
            raise SshError(exc.kind, f"{self.node} via jump host: {exc.message}") from None
        self._jump = jump
        transport = jump._client.get_transport()
        try:
            return transport.open_channel(
                "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0),
                timeout=max(deadline - time.monotonic(), 0.1),
            )
        except Exception as exc:
            self._close_jump()
            raise _jump_channel_error(target, exc) from None

    def _prepare_host_keys(self, client: Any, target: Target) -> str:
        """Put the known keys for this host into the client; return the name they are under."""
        for name in target.host_key_names:
            found = find_known_keys(target.known_hosts, name, target.port)
            if found:
                keys = client.get_host_keys()
                pattern = host_pattern(name, target.port)
                seen: set[str] = set()
                for k in found:
                    if k.key.get_name() not in seen:  # the first file wins, per key type
                        seen.add(k.key.get_name())
                        keys.add(pattern, k.key.get_name(), k.key)
                return name
        return target.host_key_names[0]

    def _handshake(
        self, client: Any, target: Target, lookup_name: str, sock: Any, deadline: float
    ) -> None:
        paramiko = import_paramiko()
        remaining = max(deadline - time.monotonic(), 0.1)
        keys = [p for p in target.identity_files if os.path.exists(p)]
        allow_agent = self.settings.use_agent and not target.identities_only
        factory = None
        if not client.get_host_keys() and cert_authorities(target.known_hosts, target.host_key_names, target.port):
            factory = cert_first_transport()  # like ssh: ask for the certificate when a CA could vouch
        try:
            client.connect(
                hostname=lookup_name,  # with sock given, only names the host key entry
                port=target.port,
                username=target.user,
                sock=sock,
                key_filename=keys or None,
                allow_agent=allow_agent,
                look_for_keys=not target.identity_files,
                timeout=remaining,
                banner_timeout=remaining,
                auth_timeout=remaining,
                channel_timeout=max(self.settings.connect_timeout_s, 1.0),
                transport_factory=factory,
            )
            # a key listed as known may still be revoked by an "@revoked" line
            refuse_revoked(target, client.get_transport().get_remote_server_key(), client)
        except SshError:  # from HostKeyPolicy
            raise
        except UnknownHostKey as exc:
            raise SshError(SshErrorKind.UNKNOWN_HOST_KEY, self._unknown_key_message(target, exc.key)) from None
        except paramiko.BadHostKeyException as exc:
            message = self._changed_key_message(target, lookup_name, exc)
            raise SshError(SshErrorKind.CHANGED_HOST_KEY, message) from None
        except paramiko.AuthenticationException as exc:
            raise SshError(SshErrorKind.AUTH, self._auth_message(target, keys, allow_agent, exc)) from None
        except Exception as exc:
            raise self._handshake_error(client, target, keys, allow_agent, exc, deadline) from None

    # -- error messages -----------------------------------------------------------------
    def _unknown_key_message(self, target: Target, key: Any) -> str:
        files = ", ".join(target.known_hosts) or "(no known_hosts files configured)"
        authorities = cert_authorities(target.known_hosts, target.host_key_names, target.port)
        if authorities:  # the site trusts a CA, but the node has no certificate (from it)
            ca = authorities[0]
            return (
                f"{target.where}: host key not known: {key_fingerprint(key)} is no certificate; "
                f"{ca.path}:{ca.lineno} trusts host certificates from a CA for it, "
                "so its sshd needs a HostCertificate signed by that CA (ssh-keygen -s CA -h)"
            )
        return (
            f"{target.where}: host key not known: {key_fingerprint(key)} is in none of {files}; "
            f"verify it (ssh-keyscan -p {target.port} {target.hostname} | ssh-keygen -lf -) "
            f"and add it to {target.known_hosts[0] if target.known_hosts else 'a known_hosts file'}"
            ", or set ssh.accept_new_host_keys"
        )

    def _changed_key_message(self, target: Target, name: str, exc: Any) -> str:
        found = find_known_keys(target.known_hosts, name, target.port)
        same_type = [k for k in found if k.key.get_name() == exc.key.get_name()] or found
        where = f"{same_type[0].path}:{same_type[0].lineno}" if same_type else "known_hosts"
        path = same_type[0].path if same_type else "known_hosts"
        expected = exc.expected_key
        return (
            f"{target.where}: host key changed: got {key_fingerprint(exc.key)}, expected "
            f"{expected.fingerprint} in {where}; if the host was reinstalled, remove the old key "
            f"(ssh-keygen -R {host_pattern(name, target.port)} -f {path})"
        )

    def _auth_message(self, target: Target, keys: list[str], agent: bool, exc: Any) -> str:
        tried = ", ".join(keys) or "no identity file"
        return (
            f"{target.where}: authentication failed as {target.user} "
            f"(keys: {tried}; agent {'on' if agent else 'off'}): {exc}"
        )

    def _handshake_error(
        self,
        client: Any,
        target: Target,
        keys: list[str],
        agent: bool,
        exc: BaseException,
        deadline: float,
    ) -> SshError:
        """Classify a failure inside paramiko's connect(): auth, timeout or dropped."""
        transport = client.get_transport()
        alive = transport is not None and transport.is_active()
        text = str(exc) or type(exc).__name__
        # key exchange done (so the host key was accepted) but not logged in. paramiko's
        # start_client() returns silently at its timeout, so "alive" alone is not enough.
        kex_done = alive and bool(getattr(transport, "initial_kex_done", False))
        in_auth = kex_done and not transport.is_authenticated()
        if "No authentication methods available" in text or in_auth:
            return SshError(SshErrorKind.AUTH, self._auth_message(target, keys, agent, exc))
        if time.monotonic() >= deadline - 0.05 or isinstance(exc, (socket.timeout, TimeoutError)):
            return SshError(
                SshErrorKind.TIMEOUT,
                f"{target.where}: no SSH handshake within "
                f"{self.settings.connect_timeout_s:g}s ({text})",
            )
        return SshError(
            SshErrorKind.DROPPED, f"{target.where}: connection closed during the SSH handshake ({text})"
        )

    # -- running commands -------------------------------------------------------------------
    def run(
        self,
        argv: tuple[str, ...],
        *,
        timeout_s: float,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        """Run argv on the node; like runners.local.run_command, never raises.

        timeout_s counts from the moment the command starts: (re)connecting first, when
        the connection is not up, has its own budget (settings.connect_timeout_s), and
        waiting for one of the connection's session slots counts against timeout_s.
        env adds variables for the command (names [A-Za-z_][A-Za-z0-9_]*); cwd is the
        remote directory it starts in (a directory it cannot enter is an `error`).
        """
        argv = tuple(argv)
        start = time.monotonic()
        try:
            command = remote_command(argv, timeout_s=timeout_s, env=env, cwd=cwd)
        except ValueError as exc:
            return CommandResult(argv, None, "", "", 0.0, error=str(exc))
        try:
            transport = self._live_transport()
        except SshError as exc:
            return CommandResult(argv, None, "", "", time.monotonic() - start, error=exc.message)
        # sshd allows MaxSessions (default 10) channels per connection; more would be refused
        if not self._sessions.acquire(timeout=max(timeout_s, 0.0)):
            return CommandResult(argv, None, "", "", time.monotonic() - start, timed_out=True)
        try:
            return self._run_channel(transport, argv, command, input, timeout_s, start)
        finally:
            self._sessions.release()

    def open_stream(
        self, argv: tuple[str, ...], *, lifetime_s: float, env: Mapping[str, str] | None = None,
    ) -> RemoteStream:
        """Start argv on the node with its stdin and stdout kept open (stream.RemoteStream),
        for at most lifetime_s; SshError when it cannot be started."""
        try:
            command = remote_command(tuple(argv), timeout_s=lifetime_s, env=env)
        except ValueError as exc:
            raise SshError(SshErrorKind.CONFIG, f"{self.node}: {exc}") from None
        transport = self._live_transport()
        timeout_s = self.settings.connect_timeout_s
        if not self._sessions.acquire(timeout=timeout_s):
            raise SshError(SshErrorKind.TIMEOUT, f"{self._where()}: no free session on the connection")
        chan = None
        try:
            chan = transport.open_session(timeout=timeout_s)
            chan.exec_command(command)
        except Exception as exc:
            if chan is not None:
                chan.close()
            self._sessions.release()
            result = self._failure(transport, tuple(argv), time.monotonic(), exc)
            raise SshError(SshErrorKind.DROPPED if "dropped" in (result.error or "") else SshErrorKind.OTHER,
                           result.error or f"{self._where()}: {type(exc).__name__}: {exc}") from None
        return RemoteStream(self.node, chan, self._sessions.release)

    def _run_channel(
        self, transport: Any, argv: tuple[str, ...], command: str, input: str | None,
        timeout_s: float, start: float,
    ) -> CommandResult:
        chan = None
        try:
            chan = transport.open_session(timeout=max(timeout_s, 0.1))
            deadline = time.monotonic() + timeout_s + LOCAL_GRACE_S
            chan.exec_command(command)
            out, err, complete = _pump(chan, input.encode() if input is not None else b"", deadline)
        except Exception as exc:  # channel refused, transport died, close() from another thread
            return self._failure(transport, argv, start, exc)
        finally:
            if chan is not None:
                chan.close()
        duration = time.monotonic() - start
        stdout = out.decode("utf-8", errors="replace")
        stderr = err.decode("utf-8", errors="replace")
        if not complete:
            return CommandResult(argv, None, stdout, stderr, duration, timed_out=True)
        if chan.exit_status < 0:
            return self._no_status(transport, argv, start, stdout, stderr)
        return remote_result(argv, chan.exit_status, stdout, stderr, duration, timeout_s)

    def _live_transport(self) -> Any:
        """The connected transport, (re)connecting first when needed; SshError."""
        with self._lock:
            if not self.connected:
                self._close_locked()
                self._connect_locked()
            return self._client.get_transport()

    def _failure(
        self, transport: Any, argv: tuple[str, ...], start: float, exc: BaseException
    ) -> CommandResult:
        """A command that could not run to its end: the connection is gone, or the server
        refused the session (ChannelException) or something else failed on a live one."""
        if _wait_inactive(transport, 0.5):
            return self._dropped(argv, start, transport.saved_exception or exc, "", "")
        return CommandResult(
            argv, None, "", "", time.monotonic() - start,
            error=f"{self._where()}: {type(exc).__name__}: {getattr(exc, 'text', None) or exc}",
        )

    def _no_status(
        self, transport: Any, argv: tuple[str, ...], start: float, stdout: str, stderr: str
    ) -> CommandResult:
        """The channel closed without an exit status: the connection died, or a signal
        killed the command (sshd then sends exit-signal, which paramiko ignores)."""
        if not _wait_inactive(transport, 0.5):
            return CommandResult(
                argv, None, stdout, stderr, time.monotonic() - start,
                error=f"{argv[0]} on {self.node} ended without an exit status "
                "(killed by a signal?)",
            )
        return self._dropped(argv, start, transport.saved_exception, stdout, stderr)

    def _dropped(
        self,
        argv: tuple[str, ...],
        start: float,
        exc: BaseException | None,
        stdout: str,
        stderr: str,
    ) -> CommandResult:
        # a transport's saved_exception may be a stale authentication detail
        if exc is None or isinstance(exc, (EOFError, import_paramiko().AuthenticationException)):
            reason = "the server closed the connection"
        elif isinstance(exc, OSError) and exc.strerror:
            reason = exc.strerror
        else:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return CommandResult(
            argv, None, stdout, stderr, time.monotonic() - start,
            error=f"connection dropped: {self._where()}: {reason}",
        )

    def _where(self) -> str:
        return self.target.where if self.target else self.node

    # -- closing ----------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection (and the jump host's); idempotent."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            close_and_join(client)
        self._close_jump()
        self._close_proxy()

    def _close_proxy(self) -> None:
        proxy, self._proxy = self._proxy, None
        if proxy is not None:
            proxy.close()  # ends and reaps the command's whole process group

    def _close_jump(self) -> None:
        jump, self._jump = self._jump, None
        if jump is not None:
            jump.close()  # an SshConnection of its own: closes and joins its client


def close_and_join(client: Any) -> None:
    """Close a paramiko client and wait (briefly) for its transport thread to end.

    paramiko's stop_thread() closes the packetizer and then skips its own join, so the
    transport thread can outlive close(); a daemon thread still in cryptography's C code
    while the interpreter finalizes is how a sweep process can die with SIGSEGV.
    """
    transport = client.get_transport()
    client.close()
    if transport is not None and transport is not threading.current_thread():
        transport.join(2.0)


def _wait_inactive(transport: Any, limit_s: float) -> bool:
    """True once the transport is dead; paramiko closes the channels of a dropped
    connection just before it marks the transport inactive, hence the short wait."""
    until = time.monotonic() + limit_s
    while transport.is_active():
        if time.monotonic() >= until:
            return False
        time.sleep(0.01)
    return True


def _jump_channel_error(target: Target, exc: BaseException) -> SshError:
    """The jump host could not open a connection onward to the node."""
    text = getattr(exc, "text", None) or str(exc) or type(exc).__name__
    low = text.lower()
    if "refused" in low:
        kind = SshErrorKind.REFUSED
    elif "timeout" in low or "timed out" in low or isinstance(exc, (socket.timeout, TimeoutError)):
        kind, text = SshErrorKind.TIMEOUT, f"no answer within the connect timeout ({text})"
    else:
        # OpenSSH's sshd says only "Connect failed", whether refused, down or filtered
        kind, text = SshErrorKind.UNREACHABLE, f"{text} (refused, down or filtered)"
    onward = f"{target.hostname}:{target.port}"
    return SshError(kind, f"{target.where}: the jump host could not connect to {onward}: {text}")


def _pump(chan: Any, stdin: bytes, deadline: float) -> tuple[bytes, bytes, bool]:
    """Feed stdin and read stdout and stderr together until both end or `deadline`.

    Reading both streams in one loop (select on the channel's pipe, non-blocking reads)
    means a command that fills its stderr while we wait on stdout cannot deadlock.
    Returns (stdout, stderr, complete); complete=False when the deadline passed.
    """
    chan.settimeout(0.0)
    out: list[bytes] = []
    err: list[bytes] = []
    out_done = err_done = False
    pending = memoryview(stdin)
    if not pending:
        chan.shutdown_write()  # like stdin=/dev/null: EOF at once
    fd = chan.fileno()
    while True:
        out_done = out_done or drain_chunks(chan.recv, out)
        err_done = err_done or drain_chunks(chan.recv_stderr, err)
        if pending and chan.send_ready():
            try:
                sent = chan.send(pending[:_WRITE_CHUNK])
            except TimeoutError:
                sent = 0
            except OSError:  # the remote closed its stdin (the command does not read it)
                sent, pending = 0, memoryview(b"")
            pending = pending[sent:]
            if not pending:
                chan.shutdown_write()
        if out_done and err_done:
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return b"".join(out), b"".join(err), False
        select.select([fd], [], [], min(remaining, 0.02 if pending else 0.5))
    # both streams ended: the exit status comes with (or right before) the close
    remaining = deadline - time.monotonic()
    if not chan.status_event.wait(max(remaining, 0.0)):
        return b"".join(out), b"".join(err), False
    return b"".join(out), b"".join(err), True


