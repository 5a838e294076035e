"""Run commands on other nodes over SSH (paramiko), with the local runner's semantics.

One `SshConnection` per node, reused for every command on it; `run()` returns the same
`CommandResult` as `runners.local.run_command` and never raises. The bounded fan-out
over many nodes lives in runners/fanout.py (re-exported here as `fan_out`).

What is honoured, and from where:

- ssh config (`SshSettings.config_file`, missing file fine): HostName, User, Port,
  IdentityFile, IdentitiesOnly, UserKnownHostsFile, HostKeyAlias and ProxyJump (one
  hop: `[user@]host[:port]`; the jump host's own config entry is used, and it must not
  need a jump itself). ProxyCommand and `Match exec` are refused with
  `SshError("config")` rather than silently ignored.
- precedence: user = settings.user, else config User, else the current user;
  port = config Port, else settings.port (settings.port has a default, so it cannot
  override); ConnectTimeout in the config is ignored (settings.connect_timeout_s rules).
- host keys: `settings.known_hosts` files, then the config's UserKnownHostsFile. A key is
  looked up under HostKeyAlias if set, else under the HostName and then the node name
  (so a known_hosts written for either works). Unknown -> rejected unless
  `accept_new_host_keys`, which appends one *plain* (unhashed, grep-able) line
  `name[,hostname] type base64` to the first known_hosts file; a changed key is always
  refused. A key marked `@revoked` for the host (or for `*`) is refused always, also
  when it is listed as known and never recorded as new. `@cert-authority` and other
  wildcard patterns in known_hosts are not understood (such lines are skipped).
- authentication: public keys only -- the agent (`use_agent`, and not IdentitiesOnly),
  settings.identity_files and the config's IdentityFile (missing files skipped), and
  paramiko's default ~/.ssh/id_* only when no identity file is configured at all.

Remote commands are `[cd -- <cwd> || exit 125;] timeout -k 2 <N> [env NAME=value ...] argv...`, quoted with
`shlex.join`: the remote login shell must be POSIX-like (sh, bash, zsh, dash) and the
node must have coreutils `timeout` (or busybox's). The wrapper makes sure nothing
outlives a timed-out command even though closing a channel does not signal the process.

What `run()` returns (CommandResult, as the local runner):
  exit status N               returncode=N
  no exit within timeout_s    timed_out=True (we stop waiting at timeout_s + 0.5 s; the
                              remote wrapper's 124/137 also means timed out)
  exit 127                    not_found=True ("<argv0>: command not found" when the wrapper
                              could not find argv[0], else the remote stderr)
  126/125 from the wrapper    error=its message (cannot execute)
  connection died mid-command error="connection dropped: <node> (...): <why>"
  killed by a signal          error="... ended without an exit status (killed by a signal?)"
                              (sshd sends exit-signal, which paramiko does not surface)
  cannot (re)connect          error=SshError.message
At most MAX_SESSIONS commands run at once per connection (sshd's MaxSessions is 10);
more wait for a slot within their own timeout.
"""

from __future__ import annotations

import dataclasses
import errno
import getpass
import os
import select
import shlex
import socket
import sys
import threading
import time
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from healthcheck.runners.fanout import fan_out as fan_out  # re-exported: callers and tests import it here
from healthcheck.runners.local import CommandResult
from healthcheck.runners.launch import check_env  # one rule for environment names

if TYPE_CHECKING:  # the config package costs ~35 ms to import; callers have it already
    from healthcheck.core.config.schema import SshSettings

ERROR_KINDS = (
    "unknown-host-key", "changed-host-key", "revoked-host-key", "refused", "timeout", "unreachable", "auth",
    "dropped", "config", "other",
)

# The remote `timeout` sends SIGTERM at N seconds and SIGKILL this much later.
KILL_AFTER_S = 2
# We stop waiting locally this long after timeout_s: enough for the remote wrapper's
# exit status (and the output printed so far) to arrive, well inside the +1 s promise.
LOCAL_GRACE_S = 0.5
# Exit statuses of coreutils `timeout`: timed out (TERM, then KILL); its own failure;
# command found but not runnable; command not found.
_TIMED_OUT_CODES = (124, 137)
# Concurrent commands per connection: below OpenSSH's default MaxSessions (10).
MAX_SESSIONS = 8
_READ_CHUNK = 1 << 16
_WRITE_CHUNK = 1 << 15


class SshError(Exception):
    """A connection failure, with a `kind` code and a one-line message naming the host."""

    def __init__(self, kind: str, message: str) -> None:
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown SshError kind {kind!r}")
        super().__init__(kind, message)
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        return self.message


# ------------------------------------------------------------------------ paramiko import

_IMPORT_LOCK = threading.Lock()
_PARAMIKO: Optional[ModuleType] = None


def import_paramiko() -> ModuleType:
    """Import paramiko (everything in hc goes through here) without `invoke`.

    paramiko.config imports the optional `invoke` package only to run `Match exec`
    lines of an ssh config; that import alone is about half of paramiko's import time
    (~80 of ~150 ms). Blocking it for the duration of the import makes paramiko record
    the ImportError, so `Match exec` in ssh_config is NOT supported: a config that
    reaches such a line raises that ImportError at lookup, which `SshConnection`
    reports as SshError("config"). When invoke (or paramiko) was imported before,
    nothing is blocked.
    """
    global _PARAMIKO
    if _PARAMIKO is not None:
        return _PARAMIKO
    with _IMPORT_LOCK:  # also keeps a second thread from seeing a half-imported module
        if _PARAMIKO is None:
            block = "invoke" not in sys.modules and "paramiko" not in sys.modules
            if block:
                sys.modules["invoke"] = None  # type: ignore[assignment]  # import fails fast
            try:
                import paramiko
            finally:
                # paramiko.config has bound `invoke = None` by now; unblock it for others
                if block and "invoke" in sys.modules and sys.modules["invoke"] is None:
                    del sys.modules["invoke"]
            _quiet_paramiko_logging()
            _PARAMIKO = paramiko
    return _PARAMIKO


def _quiet_paramiko_logging() -> None:
    """paramiko logs failures (some with tracebacks) at ERROR, which Python's last-resort
    handler would print on stderr; hc reports them as SshError/CommandResult instead.
    Records still propagate to whatever handlers the application configures."""
    import logging

    logging.getLogger("paramiko").addHandler(logging.NullHandler())


# ------------------------------------------------------------------------- pure helpers


def format_seconds(seconds: float) -> str:
    """Duration for coreutils `timeout`: plain decimal, never 0 (0 would mean 'no limit')."""
    text = f"{max(float(seconds), 0.01):.3f}".rstrip("0").rstrip(".")
    return text


def remote_command(
    argv: tuple[str, ...] | list[str], *, timeout_s: float, env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
) -> str:
    """The command line sent to the remote shell; ValueError for an argv or env it cannot carry.

    `timeout -k 2 N [env NAME=value ...] argv...`, every word quoted by shlex.join, so no
    argument is ever interpreted by the remote shell. `timeout` stops option parsing at N
    and `env` at its first non-option word, so an argv[0] starting with "-" is still run
    as a command; only an argv[0] containing "=" cannot follow `env` (it would be read as
    an assignment). With cwd, `cd -- <cwd>` comes first; a directory it cannot enter
    exits 125 with a line starting `hc: cannot cd` (see `_result`).
    """
    argv = tuple(argv)
    if not argv:
        raise ValueError("empty command")
    for arg in argv:
        if not isinstance(arg, str):
            raise ValueError(f"command arguments must be strings, got {arg!r}")
        if "\0" in arg:
            raise ValueError("command arguments cannot contain NUL bytes")
    variables = check_env(env)
    words = ["timeout", "-k", str(KILL_AFTER_S), format_seconds(timeout_s)]
    if variables:
        if "=" in argv[0]:
            raise ValueError(f"cannot run {argv[0]!r} with an environment (it contains '=')")
        words += ["env", *(f"{k}={v}" for k, v in variables.items())]
    command = shlex.join([*words, *argv])
    return f"{_cd_prefix(cwd)}{command}" if cwd is not None else command


_CD_FAILED = "hc: cannot cd to "


def _cd_prefix(cwd: str) -> str:
    """`cd -- <cwd> || exit 125; `, quoted; ValueError for a cwd that cannot be carried."""
    if not isinstance(cwd, str) or not cwd or "\0" in cwd:
        raise ValueError(f"invalid working directory {cwd!r}")
    # 125 plus our own line tells "could not start there" from the command's own failure
    failed = shlex.quote(f"{_CD_FAILED}{cwd}")
    return f"cd -- {shlex.quote(cwd)} || {{ printf '%s\\n' {failed} >&2; exit 125; }}; "


def parse_jump(spec: str) -> tuple[Optional[str], str, Optional[int]]:
    """ProxyJump `[user@]host[:port]` -> (user, host, port); ValueError otherwise."""
    spec = spec.strip()
    if spec.startswith("ssh://"):
        spec = spec[len("ssh://"):]
    if not spec or "," in spec or any(c.isspace() for c in spec):
        raise ValueError(f"ProxyJump {spec!r}: only one jump host is supported")
    user, _, hostport = spec.rpartition("@")
    host, port = hostport, None
    if hostport.count(":") == 1:
        host, _, port_text = hostport.partition(":")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"ProxyJump {spec!r}: bad port {port_text!r}")
        port = int(port_text)
    if not host:
        raise ValueError(f"ProxyJump {spec!r}: no host")
    return (user or None), host, port


# ------------------------------------------------------------------- ssh config + target


@dataclass(frozen=True)
class Target:
    """Where and how to reach one node, after the ssh config and the settings."""

    node: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    known_hosts: tuple[str, ...]
    host_key_names: tuple[str, ...]  # names to look the host key up under, in order
    identities_only: bool = False
    proxy_jump: Optional[str] = None

    @property
    def where(self) -> str:
        via = f" via {self.proxy_jump}" if self.proxy_jump else ""
        return f"{self.node} ({self.hostname}:{self.port}{via})"


# path -> ((mtime_ns, size), parsed): re-read when the file changes, one entry per path
_CONFIG_CACHE: dict[str, tuple[tuple[int, int], Any]] = {}
_CACHE_LOCK = threading.Lock()


def _expand(path: str) -> str:
    return os.path.expanduser(os.path.expandvars(path)) if path else path


def _cached_by_stat(cache: dict[str, tuple[tuple[int, int], Any]], path: str, what: str,
                    load: Callable[[str], Any], missing: Any) -> Any:
    """load(path), re-run only when the file's mtime or size changed; `missing` if absent."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return missing
    except OSError as exc:
        raise SshError("config", f"{what} {path}: {exc.strerror or exc}") from None
    stamp = (st.st_mtime_ns, st.st_size)
    with _CACHE_LOCK:
        cached = cache.get(path)
    if cached and cached[0] == stamp:
        return cached[1]
    value = load(path)
    with _CACHE_LOCK:
        cache[path] = (stamp, value)
    return value


def _load_ssh_config(path: Optional[str]) -> Any:
    """Parsed paramiko SSHConfig for `path` (cached by mtime), or None without a file."""
    if not path:
        return None
    return _cached_by_stat(_CONFIG_CACHE, _expand(path), "ssh config", _parse_ssh_config, None)


def _parse_ssh_config(path: str) -> Any:
    paramiko = import_paramiko()
    try:
        return paramiko.SSHConfig.from_path(path)
    except OSError as exc:
        raise SshError("config", f"ssh config {path}: {exc.strerror or exc}") from None
    except Exception as exc:  # ConfigParseError and friends
        raise SshError("config", f"ssh config {path}: {exc}") from None


def _lookup(config: Any, name: str, config_file: Optional[str]) -> dict[str, Any]:
    if config is None:
        return {"hostname": name}
    try:
        return dict(config.lookup(name))
    except ImportError:
        # invoke is blocked by import_paramiko (see there)
        raise SshError(
            "config", f"{name}: ssh config {config_file} uses 'Match exec', which hc cannot run"
        ) from None
    except Exception as exc:
        raise SshError("config", f"{name}: ssh config {config_file}: {exc}") from None


def _is_none(value: Any) -> bool:
    return value is None or str(value).strip().lower() == "none"


def _proxy_jump(node: str, value: Any) -> Optional[str]:
    """The ProxyJump value, or None; like ssh, ignore a jump to the host itself (the
    usual result of `Host *` + ProxyJump applying to the jump host's own entry)."""
    if _is_none(value):
        return None
    proxy = str(value).strip()
    try:
        if parse_jump(proxy)[1] == node:
            return None
    except ValueError:
        pass  # reported when the connection tries to use it
    return proxy


def resolve_target(node: str, settings: SshSettings, *, jump: bool = True) -> Target:
    """Apply the ssh config and settings to `node`; SshError("config") when they cannot be."""
    config = _load_ssh_config(settings.config_file)
    opts = _lookup(config, node, settings.config_file)
    if not _is_none(opts.get("proxycommand")):
        raise SshError(
            "config", f"{node}: ProxyCommand ({settings.config_file}) is unsupported; use ProxyJump"
        )
    hostname = str(opts.get("hostname") or node)
    try:
        port = int(opts["port"]) if opts.get("port") else int(settings.port)
    except ValueError:
        bad = opts.get("port")
        raise SshError("config", f"{node}: bad Port {bad!r} in {settings.config_file}") from None
    user = settings.user or opts.get("user") or getpass.getuser()
    identities = [*settings.identity_files, *(opts.get("identityfile") or [])]
    known = [*settings.known_hosts]
    for path in str(opts.get("userknownhostsfile") or "").split():
        if not _is_none(path):
            known.append(path)
    alias = opts.get("hostkeyalias")
    names = (alias,) if alias else tuple(dict.fromkeys([hostname, node]))
    proxy = _proxy_jump(node, opts.get("proxyjump"))
    if proxy and not jump:
        raise SshError(
            "config", f"{node}: the jump host needs a jump itself ({proxy}); hc supports one hop"
        )
    return Target(
        node=node,
        hostname=hostname,
        port=port,
        user=str(user),
        identity_files=tuple(dict.fromkeys(_expand(p) for p in identities)),
        known_hosts=tuple(dict.fromkeys(_expand(p) for p in known)),
        host_key_names=tuple(names),
        identities_only=str(opts.get("identitiesonly", "no")).lower() == "yes",
        proxy_jump=proxy,
    )


# --------------------------------------------------------------------------- known_hosts


@dataclass(frozen=True)
class KnownKey:
    path: str
    lineno: int
    names: tuple[str, ...]
    key: Any  # paramiko PKey
    revoked: bool = False  # an "@revoked" line: this key must never be accepted


_KNOWN_CACHE: dict[str, tuple[tuple[int, int], list[KnownKey]]] = {}
_KNOWN_WRITE_LOCK = threading.Lock()


def _read_known_hosts(path: str) -> list[KnownKey]:
    """Every usable entry of one known_hosts file (cached by mtime and size).

    Parsed here instead of HostKeys.load, which de-duplicates in O(n^2) and forgets
    which file and line an entry came from (which a changed-key message must name).
    """
    return _cached_by_stat(_KNOWN_CACHE, path, "known_hosts", _parse_known_hosts, [])


def _parse_known_hosts(path: str) -> list[KnownKey]:
    paramiko = import_paramiko()
    entries: list[KnownKey] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                line = line.strip()
                revoked = line.startswith("@revoked")
                if revoked:
                    line = line[len("@revoked"):].strip()
                if not line or line.startswith(("#", "@")):
                    continue
                try:
                    entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
                except Exception:  # bad base64 (InvalidHostKey), unknown key type, ...
                    continue
                if entry is not None and entry.key is not None:
                    entries.append(KnownKey(path, lineno, tuple(entry.hostnames), entry.key, revoked))
    except OSError as exc:
        raise SshError("config", f"known_hosts {path}: {exc.strerror or exc}") from None
    return entries


def _host_pattern(name: str, port: int) -> str:
    return name if port == 22 else f"[{name}]:{port}"


def _name_matches(stored: str, name: str) -> bool:
    if stored.startswith("|1|"):
        try:
            return import_paramiko().HostKeys.hash_host(name, stored) == stored
        except Exception:  # malformed salt
            return False
    return stored == name


def find_known_keys(files: tuple[str, ...], name: str, port: int) -> list[KnownKey]:
    """Trusted entries for `name` (at `port`) in the files, in file order."""
    pattern = _host_pattern(name, port)
    return [
        k for path in files for k in _read_known_hosts(path)
        if not k.revoked and any(_name_matches(stored, pattern) for stored in k.names)
    ]


def revoked_entry(files: tuple[str, ...], names: tuple[str, ...], port: int, key: Any) -> KnownKey | None:
    """The `@revoked` line that revokes `key` for any of `names` (or for every host, `*`)."""
    patterns = [_host_pattern(n, port) for n in names]
    for path in files:
        for k in _read_known_hosts(path):
            if k.revoked and k.key == key and any(
                stored == "*" or any(_name_matches(stored, p) for p in patterns) for stored in k.names
            ):
                return k
    return None


def _append_known_host(path: str, names: tuple[str, ...], port: int, key: Any) -> None:
    """accept_new_host_keys: record a first-seen key as a plain line (see module doc)."""
    hosts = ",".join(_host_pattern(n, port) for n in names)
    line = f"{hosts} {key.get_name()} {key.get_base64()}\n"
    with _KNOWN_WRITE_LOCK:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, mode=0o700, exist_ok=True)
        with open(path, "a+", encoding="utf-8") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell() > 0:
                fh.seek(fh.tell() - 1)
                if fh.read(1) != "\n":
                    line = "\n" + line
            fh.write(line)


class _UnknownHostKey(Exception):
    def __init__(self, key: Any) -> None:
        super().__init__("unknown host key")
        self.key = key


def _fingerprint(key: Any) -> str:
    return f"{key.get_name()} {key.fingerprint}"


# ------------------------------------------------------------------------ TCP connecting


def _resolve(host: str, port: int, timeout_s: float) -> list[tuple]:
    """getaddrinfo, bounded: a stuck resolver must not outlast the connect timeout."""
    try:  # an address needs no resolver (and no thread)
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass
    box: dict[str, Any] = {}

    def lookup() -> None:
        try:
            box["ok"] = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM)
        except Exception as exc:  # noqa: BLE001 - handed to the caller
            box["err"] = exc

    thread = threading.Thread(target=lookup, name=f"hc-dns-{host}", daemon=True)
    thread.start()
    thread.join(max(timeout_s, 0.0))
    if thread.is_alive():
        raise SshError("timeout", f"resolving {host} took more than {timeout_s:g}s")
    if "err" in box:
        why = getattr(box["err"], "strerror", None) or box["err"]
        raise SshError("unreachable", f"cannot resolve {host}: {why}")
    return box["ok"]


_UNREACHABLE = {
    errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ENETDOWN, errno.EADDRNOTAVAIL,
}


def open_socket(host: str, port: int, deadline: float) -> socket.socket:
    """TCP connect to host:port by `deadline`; SshError refused/timeout/unreachable."""
    infos = _resolve(host, port, deadline - time.monotonic())
    last: Optional[SshError] = None
    for family, kind, proto, _canon, addr in infos:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        sock = socket.socket(family, kind, proto)
        sock.settimeout(remaining)
        try:
            sock.connect(addr)
        except (socket.timeout, TimeoutError):
            sock.close()
            last = SshError("timeout", f"TCP connect to {addr[0]}:{port} timed out")
            continue
        except ConnectionRefusedError:
            sock.close()
            last = SshError("refused", f"connection refused by {addr[0]}:{port} (is sshd running?)")
            continue
        except OSError as exc:
            sock.close()
            kind_ = "unreachable" if exc.errno in _UNREACHABLE else "other"
            last = SshError(kind_, f"TCP connect to {addr[0]}:{port}: {exc.strerror or exc}")
            continue
        sock.settimeout(None)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        # small request/reply packets: without this, Nagle + delayed ACK add ~40 ms each
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise last or SshError("timeout", f"TCP connect to {host}:{port} timed out")


# ------------------------------------------------------------------------- the connection


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
        _port: Optional[int] = None,
    ) -> None:
        from healthcheck.core.errors import HcError
        from healthcheck.core.nodes import check_node_name

        try:
            check_node_name(node)
            if node != node.strip():  # nodes.py's "$" lets a trailing newline through
                raise HcError(f"{node!r} is not a valid node name (it has white space)")
        except HcError as exc:
            raise SshError("config", str(exc)) from None
        self.node = node
        self.settings = settings
        self._jump_allowed = _jump_allowed
        self._port = _port  # a jump host's "host:port" from ProxyJump beats its config
        self._lock = threading.Lock()
        self._sessions = threading.BoundedSemaphore(MAX_SESSIONS)
        self._client: Any = None
        self._jump: Optional[SshConnection] = None
        self.target: Optional[Target] = None

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
            raise SshError("other", f"{self._where()}: {type(exc).__name__}: {exc}") from None

    def _connect_steps(self) -> None:
        deadline = time.monotonic() + self.settings.connect_timeout_s
        target = resolve_target(self.node, self.settings, jump=self._jump_allowed)
        if self._port is not None:
            target = dataclasses.replace(target, port=self._port)
        self.target = target
        client = import_paramiko().SSHClient()
        lookup_name = self._prepare_host_keys(client, target)  # before anything is opened
        client.set_missing_host_key_policy(_Policy(self, target))
        sock = self._open_sock(target, deadline)
        try:
            self._handshake(client, target, lookup_name, sock, deadline)
        except BaseException:
            client.close()
            sock.close()
            self._close_jump()
            raise
        self._client = client

    def _open_sock(self, target: Target, deadline: float) -> Any:
        """A TCP socket to the node, or a direct-tcpip channel through the jump host."""
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
            raise SshError("config", f"{target.where}: {exc}") from None
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
                pattern = _host_pattern(name, target.port)
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
            )
            # a key listed as known may still be revoked by an "@revoked" line
            _refuse_revoked(target, client.get_transport().get_remote_server_key(), client)
        except SshError:  # from _Policy
            raise
        except _UnknownHostKey as exc:
            raise SshError("unknown-host-key", self._unknown_key_message(target, exc.key)) from None
        except paramiko.BadHostKeyException as exc:
            message = self._changed_key_message(target, lookup_name, exc)
            raise SshError("changed-host-key", message) from None
        except paramiko.AuthenticationException as exc:
            raise SshError("auth", self._auth_message(target, keys, allow_agent, exc)) from None
        except Exception as exc:
            raise self._handshake_error(client, target, keys, allow_agent, exc, deadline) from None

    # -- error messages -----------------------------------------------------------------
    def _unknown_key_message(self, target: Target, key: Any) -> str:
        files = ", ".join(target.known_hosts) or "(no known_hosts files configured)"
        return (
            f"{target.where}: host key not known: {_fingerprint(key)} is in none of {files}; "
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
            f"{target.where}: host key changed: got {_fingerprint(exc.key)}, expected "
            f"{expected.fingerprint} in {where}; if the host was reinstalled, remove the old key "
            f"(ssh-keygen -R {_host_pattern(name, target.port)} -f {path})"
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
            return SshError("auth", self._auth_message(target, keys, agent, exc))
        if time.monotonic() >= deadline - 0.05 or isinstance(exc, (socket.timeout, TimeoutError)):
            return SshError(
                "timeout",
                f"{target.where}: no SSH handshake within "
                f"{self.settings.connect_timeout_s:g}s ({text})",
            )
        return SshError(
            "dropped", f"{target.where}: connection closed during the SSH handshake ({text})"
        )

    # -- running commands -------------------------------------------------------------------
    def run(
        self,
        argv: tuple[str, ...],
        *,
        timeout_s: float,
        input: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
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

    def _run_channel(
        self, transport: Any, argv: tuple[str, ...], command: str, input: Optional[str],
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
        return _result(argv, chan.exit_status, stdout, stderr, duration, timeout_s)

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
        exc: Optional[BaseException],
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
            _close_and_join(client)
        self._close_jump()

    def _close_jump(self) -> None:
        jump, self._jump = self._jump, None
        if jump is not None:
            jump.close()  # an SshConnection of its own: closes and joins its client


def _close_and_join(client: Any) -> None:
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
        kind = "refused"
    elif "timeout" in low or "timed out" in low or isinstance(exc, (socket.timeout, TimeoutError)):
        kind, text = "timeout", f"no answer within the connect timeout ({text})"
    else:
        # OpenSSH's sshd says only "Connect failed", whether refused, down or filtered
        kind, text = "unreachable", f"{text} (refused, down or filtered)"
    onward = f"{target.hostname}:{target.port}"
    return SshError(kind, f"{target.where}: the jump host could not connect to {onward}: {text}")


def _refuse_revoked(target: Any, key: Any, client: Any = None) -> None:
    entry = revoked_entry(target.known_hosts, target.host_key_names, target.port, key)
    if entry is not None:
        if client is not None:
            client.close()
        raise SshError("revoked-host-key", f"{target.where}: host key {_fingerprint(key)} is revoked "
                                           f"(@revoked in {entry.path}:{entry.lineno}); not connecting")


class _Policy:
    """Missing host key: refuse (default) or record it (accept_new_host_keys)."""

    def __init__(self, conn: SshConnection, target: Target) -> None:
        self.conn = conn
        self.target = target

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        _refuse_revoked(self.target, key)
        if not self.conn.settings.accept_new_host_keys:
            raise _UnknownHostKey(key)
        if not self.target.known_hosts:
            raise SshError(
                "config", f"{self.target.where}: accept_new_host_keys needs a known_hosts file"
            )
        path = self.target.known_hosts[0]
        try:
            _append_known_host(path, self.target.host_key_names, self.target.port, key)
        except OSError as exc:
            why = exc.strerror or exc
            raise SshError(
                "config", f"{self.target.where}: cannot record its host key in {path}: {why}"
            ) from None


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
        out_done = out_done or _drain(chan.recv, out)
        err_done = err_done or _drain(chan.recv_stderr, err)
        if pending and chan.send_ready():
            try:
                sent = chan.send(pending[:_WRITE_CHUNK])
            except socket.timeout:
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


def _drain(read: Callable[[int], bytes], into: list[bytes]) -> bool:
    """Read what is buffered; True at end of stream."""
    while True:
        try:
            data = read(_READ_CHUNK)
        except socket.timeout:
            return False
        if not data:
            return True
        into.append(data)


def _result(
    argv: tuple[str, ...], status: int, stdout: str, stderr: str, duration: float, timeout_s: float
) -> CommandResult:
    """Map the wrapper's exit statuses to the local runner's result shape."""
    # 124/137 mean "timed out" only when that much time has passed: a tool's own 124
    # (or an OOM kill's 137) after a second must not read as a timeout.
    if status in _TIMED_OUT_CODES and duration >= timeout_s - 0.1:
        return CommandResult(argv, None, stdout, stderr, duration, timed_out=True)
    if status == 127:
        wrapper = stderr.startswith(("timeout: failed to run command", "env: "))
        said = f"{argv[0]}: command not found" if wrapper or not stderr.strip() else stderr
        return CommandResult(argv, None, stdout, said, duration, not_found=True)
    if status in (125, 126) and stderr.startswith(("timeout: ", "env: ")):
        said = stderr.strip().splitlines()[-1]
        return CommandResult(argv, None, stdout, stderr, duration, error=said)
    if status == 125 and _CD_FAILED in stderr:  # the cwd prefix: the command never started
        said = "; ".join(line.strip() for line in stderr.strip().splitlines() if line.strip())
        return CommandResult(argv, None, stdout, stderr, duration, error=said)
    return CommandResult(argv, status, stdout, stderr, duration)
