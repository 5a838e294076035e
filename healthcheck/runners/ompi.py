"""What hc sets on its own mpirun command lines (Open MPI 4.x) so that mpirun reaches the
nodes the way hc's SSH does, without the site having to repeat hc's settings as OMPI_MCA_*
variables -- and never over a setting the site made.

mpirun starts its daemons (orted) over ssh, with the ssh on PATH and ~/.ssh as they are:
it knows nothing of hc's `ssh` section. Without the same view, ssh cannot resolve a name
hc's ssh config maps (`Could not resolve hostname`), refuses a host key hc knows (an
unknown key), or waits at a prompt until the test's timeout. So, unless the site set
plm_rsh_agent or plm_rsh_args itself (an OMPI_MCA_ variable in hc's environment, or a
line in Open MPI's parameter files), hc adds `--mca plm_rsh_args` with:

- `-F <ssh.config_file>` where that file exists;
- `-o BatchMode=yes` (no prompt: a prompt only waits for the timeout), `-o
  ConnectTimeout=<ssh.connect_timeout_s>`, `-o StrictHostKeyChecking=yes`
  (`accept-new` with `ssh.accept_new_host_keys`), as hc's own SSH behaves;
- `-o GlobalKnownHostsFile=<ssh.known_hosts[0]>` where hc names its own file (ssh keeps
  reading the user's and the config's files, as hc does), `-i` each of
  `ssh.identity_files`, `-l <ssh.user>` and `-p <ssh.port>` where set.

Open MPI splits that value at spaces, so a path with white space cannot be passed: it is
left out. What hc cannot know is left to the site, and documented in docs/bandwidth.md: which
network Open MPI's own traffic uses (`OMPI_MCA_oob_tcp_if_include`, and
`btl_tcp_if_include` for MPI programs such as nccl-tests), and a PATH on the nodes that
finds orted (`--prefix`, `OMPI_MCA_orte_prefix`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from healthcheck.core.config.schema import SshSettings

_DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
_PARAM_FILE_MAX = 1 << 20  # Open MPI's parameter files are a few lines


def rsh_args(ssh: SshSettings) -> str:
    """The ssh options that give mpirun's ssh hc's view of the nodes (see the module doc)."""
    words = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(ssh.connect_timeout_s))}",
             "-o", f"StrictHostKeyChecking={'accept-new' if ssh.accept_new_host_keys else 'yes'}"]
    config = _usable(ssh.config_file)
    if config and os.path.isfile(config):
        words = ["-F", config, *words]
    known = [_usable(p) for p in ssh.known_hosts if p != _DEFAULT_KNOWN_HOSTS]
    if known and known[0]:
        words += ["-o", f"GlobalKnownHostsFile={known[0]}"]
    for identity in ssh.identity_files:
        path = _usable(identity)
        if path:
            words += ["-i", path]
    if ssh.user and _usable(ssh.user):
        words += ["-l", ssh.user]
    if ssh.port != 22:
        words += ["-p", str(ssh.port)]
    return " ".join(words)


def site_args(ssh: SshSettings, environ: Mapping[str, str], mpirun: str = "mpirun") -> tuple[str, ...]:
    """`--mca plm_rsh_args ...` for hc's mpirun, or nothing where the site set how mpirun uses ssh."""
    if site_sets(("plm_rsh_agent", "plm_rsh_args", "orte_rsh_agent", "pls_rsh_agent"), environ, mpirun):
        return ()
    return ("--mca", "plm_rsh_args", rsh_args(ssh))


def site_sets(params: Sequence[str], environ: Mapping[str, str], mpirun: str = "mpirun") -> bool:
    """Whether any of Open MPI's parameters is set by the site: an OMPI_MCA_ variable, or a
    line in a parameter file Open MPI reads (the user's, the installation's)."""
    if any(f"OMPI_MCA_{p}" in environ for p in params):
        return True
    wanted = re.compile(r"^\s*(?:" + "|".join(re.escape(p) for p in params) + r")\s*=", re.M)
    return any(wanted.search(_read_small(path)) for path in param_files(environ, mpirun))


def param_files(environ: Mapping[str, str], mpirun: str = "mpirun") -> list[str]:
    """Open MPI's parameter files, as its own lookup finds them: the user's, then the
    installation's (OPAL_PREFIX, beside mpirun's bin/, and Debian's /etc/openmpi)."""
    home = environ.get("HOME") or os.path.expanduser("~")
    files = [os.path.join(home, ".openmpi", "mca-params.conf")]
    prefixes = [environ.get("OPAL_PREFIX", "")]
    found = mpirun if os.sep in mpirun else _which(mpirun, environ.get("PATH", os.defpath))
    if found:
        prefixes.append(os.path.dirname(os.path.dirname(os.path.realpath(found))))
    files += [os.path.join(p, "etc", "openmpi-mca-params.conf") for p in prefixes if p]
    files.append("/etc/openmpi/openmpi-mca-params.conf")
    return list(dict.fromkeys(files))


def _which(name: str, path: str) -> str | None:
    for d in path.split(os.pathsep):
        candidate = os.path.join(d or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _read_small(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(_PARAM_FILE_MAX).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _usable(path: str | None) -> str:
    """path expanded (~, $VAR), or '' where Open MPI's split at spaces would cut it."""
    if not path:
        return ""
    expanded = os.path.expanduser(os.path.expandvars(path))
    return "" if any(c.isspace() for c in expanded) else expanded
