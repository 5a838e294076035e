"""Run commands on other nodes over SSH (paramiko), with the local runner's semantics.

One `SshConnection` per node, reused for every command on it; `run()` returns the same
`CommandResult` as `runners.local.run_command` and never raises. The bounded fan-out
over many nodes lives in runners/fanout.py (re-exported here as `fan_out`).

The package, by job: `commands` (the remote command line and its exit statuses),
`config` (ssh_config -> `Target`), `known_hosts` (host keys, host patterns and the
missing-key policy), `host_certs` (OpenSSH host certificates: parsed and judged against
the `@cert-authority` keys), `tcp` (connecting the socket), `proxy` (a ProxyCommand:
tokens, the process, its end), `connection` (`SshConnection`: handshake, jump host or
proxy, commands, closing), `errors` (`SshError`, `SshErrorKind`) and `paramiko_import`
(paramiko, imported once and without `invoke`).

What is honoured, and from where:

- ssh config (`SshSettings.config_file`, missing file fine): HostName, User, Port,
  IdentityFile, IdentitiesOnly, UserKnownHostsFile, HostKeyAlias, ProxyJump (one
  hop: `[user@]host[:port]`; the jump host's own config entry is used, and it must not
  need a jump itself) and ProxyCommand (run as ssh runs it, `$SHELL -c "exec CMD"`,
  tokens %h %p %r %n %u %% expanded by hc with the final host, port and user; the
  command and its process group end with the connection; one that exits during the
  handshake is the node's error with its status and stderr). Both ProxyJump and
  ProxyCommand for one host, and `Match exec`, are refused with
  `SshError(SshErrorKind.CONFIG)` rather than silently ignored.
- precedence: user = settings.user, else config User, else the current user;
  port = config Port, else settings.port (settings.port has a default, so it cannot
  override); ConnectTimeout in the config is ignored (settings.connect_timeout_s rules).
- host keys: `settings.known_hosts` files, then the config's UserKnownHostsFile. A key is
  looked up under HostKeyAlias if set, else under the HostName and then the node name
  (so a known_hosts written for either works). Unknown -> rejected unless
  `accept_new_host_keys`, which appends one *plain* (unhashed, grep-able) line
  `name[,hostname] type base64` to the first known_hosts file; a changed key is always
  refused. A key marked `@revoked` for the host (or for `*`) is refused always, also
  when it is listed as known and never recorded as new; `@revoked` and
  `@cert-authority` host patterns may use `*`, `?` and `!negation` (plain host-key lines
  are matched by name only). Host certificates: when a `@cert-authority` line matches
  the host (as `[name]:port` off port 22) and no plain key for it is known, hc asks for
  the host's certificate first and accepts it only when the listed CA's signature
  verifies, it is a host certificate, now is inside its validity, the node name or
  HostName is among its principals (a certificate with none is refused, unlike ssh),
  it has no critical options and neither the host key nor the CA key is `@revoked`;
  anything else is `bad-host-certificate` (or `revoked-host-key`). A vouched
  certificate is never recorded in known_hosts.
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

from healthcheck.runners.fanout import fan_out  # re-exported: callers and tests import it here
from healthcheck.runners.launch import check_env  # one rule for environment names
from healthcheck.runners.ssh.commands import KILL_AFTER_S, format_seconds, remote_command, remote_result
from healthcheck.runners.ssh.config import Target, parse_jump, resolve_target
from healthcheck.runners.ssh.connection import (
    LOCAL_GRACE_S,
    MAX_SESSIONS,
    SshConnection,
    close_and_join,
)
from healthcheck.runners.ssh.errors import SshError, SshErrorKind
from healthcheck.runners.ssh.known_hosts import (
    KnownKey,
    append_known_host,
    find_known_keys,
    revoked_entry,
)
from healthcheck.runners.ssh.paramiko_import import import_paramiko
from healthcheck.runners.ssh.tcp import open_socket

__all__ = [
    "KILL_AFTER_S",
    "LOCAL_GRACE_S",
    "MAX_SESSIONS",
    "KnownKey",
    "SshConnection",
    "SshError",
    "SshErrorKind",
    "Target",
    "append_known_host",
    "close_and_join",
    "remote_result",
    "check_env",
    "fan_out",
    "find_known_keys",
    "format_seconds",
    "import_paramiko",
    "open_socket",
    "parse_jump",
    "remote_command",
    "resolve_target",
    "revoked_entry",
]
