"""ssh_config and settings -> `Target`: where and how to reach one node (ProxyJump: one
hop; or a ProxyCommand)."""

from __future__ import annotations

import functools
import getpass
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from healthcheck.runners.ssh.errors import SshError, SshErrorKind
from healthcheck.runners.ssh.paramiko_import import import_paramiko

if TYPE_CHECKING:  # the config package costs ~35 ms to import; callers have it already
    from healthcheck.core.config.schema import SshSettings


def parse_jump(spec: str) -> tuple[str | None, str, int | None]:
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
    proxy_jump: str | None = None
    # ssh_config's ProxyCommand as written: its %-tokens are expanded (proxy.expand_tokens)
    # when the connection starts it, with the final hostname, port and user
    proxy_command: str | None = None

    @property
    def where(self) -> str:
        via = f" via {self.proxy_jump}" if self.proxy_jump else ""
        if self.proxy_command:
            via = " via ProxyCommand"
        return f"{self.node} ({self.hostname}:{self.port}{via})"


# path -> ((mtime_ns, size), parsed): re-read when the file changes, one entry per path
_CONFIG_CACHE: dict[str, tuple[tuple[int, int], Any]] = {}
_CACHE_LOCK = threading.Lock()


def _expand(path: str) -> str:
    return os.path.expanduser(os.path.expandvars(path)) if path else path


def cached_by_stat(cache: dict[str, tuple[tuple[int, int], Any]], path: str, what: str,
                    load: Callable[[str], Any], missing: Any) -> Any:
    """load(path), re-run only when the file's mtime or size changed; `missing` if absent."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return missing
    except OSError as exc:
        raise SshError(SshErrorKind.CONFIG, f"{what} {path}: {exc.strerror or exc}") from None
    stamp = (st.st_mtime_ns, st.st_size)
    with _CACHE_LOCK:
        cached = cache.get(path)
    if cached and cached[0] == stamp:
        return cached[1]
    value = load(path)
    with _CACHE_LOCK:
        cache[path] = (stamp, value)
    return value


def _load_ssh_config(path: str | None) -> Any:
    """Parsed paramiko SSHConfig for `path` (cached by mtime), or None without a file."""
    if not path:
        return None
    return cached_by_stat(_CONFIG_CACHE, _expand(path), "ssh config", _parse_ssh_config, None)


@functools.cache
def _config_class() -> Any:
    """paramiko's SSHConfig, except that ProxyCommand keeps its %-tokens: paramiko expands
    %p with 22 when the config has no Port (hc's settings.port may say otherwise), %r with
    the config's User (not settings.user) and never %%; proxy.expand_tokens does it right."""
    paramiko = import_paramiko()

    class RawProxyCommandConfig(paramiko.SSHConfig):  # type: ignore[name-defined]
        TOKENS_BY_CONFIG_KEY = {**paramiko.SSHConfig.TOKENS_BY_CONFIG_KEY, "proxycommand": []}

    return RawProxyCommandConfig


def _parse_ssh_config(path: str) -> Any:
    try:
        return _config_class().from_path(path)
    except OSError as exc:
        raise SshError(SshErrorKind.CONFIG, f"ssh config {path}: {exc.strerror or exc}") from None
    except Exception as exc:  # ConfigParseError and friends
        raise SshError(SshErrorKind.CONFIG, f"ssh config {path}: {exc}") from None


def _lookup(config: Any, name: str, config_file: str | None) -> dict[str, Any]:
    if config is None:
        return {"hostname": name}
    try:
        return dict(config.lookup(name))
    except ImportError:
        # invoke is blocked by import_paramiko (see there)
        raise SshError(
            SshErrorKind.CONFIG, f"{name}: ssh config {config_file} uses 'Match exec', which hc cannot run"
        ) from None
    except Exception as exc:
        raise SshError(SshErrorKind.CONFIG, f"{name}: ssh config {config_file}: {exc}") from None


def _is_none(value: Any) -> bool:
    return value is None or str(value).strip().lower() == "none"


def _proxy_jump(node: str, value: Any) -> str | None:
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
    hostname = str(opts.get("hostname") or node)
    try:
        port = int(opts["port"]) if opts.get("port") else int(settings.port)
    except ValueError:
        bad = opts.get("port")
        raise SshError(SshErrorKind.CONFIG, f"{node}: bad Port {bad!r} in {settings.config_file}") from None
    user = settings.user or opts.get("user") or getpass.getuser()
    identities = [*settings.identity_files, *(opts.get("identityfile") or [])]
    known = [*settings.known_hosts]
    for path in str(opts.get("userknownhostsfile") or "").split():
        if not _is_none(path):
            known.append(path)
    alias = opts.get("hostkeyalias")
    names = (alias,) if alias else tuple(dict.fromkeys([hostname, node]))
    proxy = _proxy_jump(node, opts.get("proxyjump"))
    command = None if _is_none(opts.get("proxycommand")) else str(opts["proxycommand"]).strip()
    if proxy and command:
        # ssh uses whichever comes first in the file; paramiko's lookup cannot say which
        raise SshError(SshErrorKind.CONFIG, f"{node}: ssh config {settings.config_file} sets both ProxyJump "
                                            f"({proxy}) and ProxyCommand; hc cannot tell which applies")
    if proxy and not jump:
        raise SshError(
            SshErrorKind.CONFIG, f"{node}: the jump host needs a jump itself ({proxy}); hc supports one hop"
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
        proxy_command=command,
    )
