"""Python API over the integration-test rig scripts in this directory (for pytest).

The rig is a handful of fake hosts on one machine: network namespaces on a private
bridge, each with its own sshd, hostname ``node<i>``, MTU and private tmpfs
(``netns-up.sh``), plus a private Slurm cluster with one slurmd inside each host
(``slurm-up.sh``). Everything needs root; :func:`rig_available` says whether this
machine can run it and, if not, why (use the reason for ``pytest.skip``).

    from rig import NetnsRig, SlurmRig

    net = NetnsRig.up(hosts=4, mtus=[9000, 9000, 1500, 9000])
    try:
        print(net.exec("node3", ["ip", "-j", "link"]).stdout)
        net.set_mtu("node2", "eth0", 1500)
        net.local_bin("node1", "nvidia-smi", "#!/bin/sh\\necho stub\\n")
        net.fake_ib("node2", ["mlx5_0", "mlx5_1:Down:Disabled"])
        slurm = SlurmRig.up(net, prolog="/path/to/prolog.sh",
                            extra_conf=["SchedulerParameters=nohold_on_prolog_fail"])
        try:
            slurm.scontrol("update", "nodename=node3", "state=drain", "reason=hc: test")
            slurm.wait_for(lambda: slurm.sinfo_nodes()["node3"][0] == "drained")
        finally:
            slurm.down()
    finally:
        net.down()

Every subprocess has a timeout, every wait is bounded; failures raise :class:`RigError`
(:class:`RigTimeout` for timeouts) with the command's output in the message.
Defaults do not collide with the shared recipe in /work/shared/rig (prefix ``hct``,
bridge ``hctbr0``, subnet ``10.98.0``, slurmctld port 16917, state under
``/tmp/hc-test-rig``); all of them can be overridden (arguments or ``HC_RIG_*`` /
``HC_SLURM_*`` environment variables, see the scripts' headers).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

SCRIPTS = Path(__file__).resolve().parent
DEFAULT_NETNS_DIR = "/tmp/hc-test-rig/netns"
DEFAULT_SLURM_DIR = "/tmp/hc-test-rig/slurm"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
IP = shutil.which("ip", path=SYSTEM_PATH) or "/usr/sbin/ip"
TC = shutil.which("tc", path=SYSTEM_PATH) or "/usr/sbin/tc"

T = TypeVar("T")

__all__ = [
    "Host",
    "NetnsRig",
    "Result",
    "RigError",
    "RigTimeout",
    "SlurmRig",
    "rig_available",
    "run",
    "wait_for",
]


class RigError(RuntimeError):
    """A rig command failed or the rig is not in the expected state."""


class RigTimeout(RigError, TimeoutError):
    """A rig command or a wait did not finish in time."""


@dataclass(frozen=True)
class Result:
    """Outcome of one command: exit status and decoded output."""

    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def check(self) -> Result:
        """Return self, or raise RigError (with the output) when rc != 0."""
        if self.rc != 0:
            raise RigError(f"{_fmt_argv(self.argv)} exited {self.rc}\n{self._outputs()}")
        return self

    def _outputs(self) -> str:
        return f"--- stdout\n{self.stdout[-3000:]}--- stderr\n{self.stderr[-3000:]}"


def _fmt_argv(argv: Sequence[str]) -> str:
    s = " ".join(argv)
    return s if len(s) < 300 else s[:297] + "..."


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 30,
    input: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    check: bool = False,
) -> Result:
    """Run a command with a timeout; never raises for a non-zero exit unless check."""
    argv = tuple(str(a) for a in argv)
    try:
        p = subprocess.run(
            argv,
            check=False,
            env=dict(env) if env is not None else None,
            input=input,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            cwd=cwd,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise RigTimeout(
            f"{_fmt_argv(argv)} did not finish within {timeout}s\n"
            f"--- stdout\n{out[-3000:]}--- stderr\n{err[-3000:]}"
        ) from None
    except FileNotFoundError as e:
        raise RigError(f"{argv[0]}: not found ({e})") from None
    res = Result(argv, p.returncode, p.stdout, p.stderr)
    return res.check() if check else res


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 20.0,
    poll: float = 0.2,
    what: str | None = None,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that value.

    Raises RigTimeout after ``timeout`` seconds, naming ``what`` and the last value
    (or the last ignored exception). Exceptions of the types in ``ignore`` count as
    "not yet" (e.g. ``ignore=(RigError,)`` while a daemon restarts).
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = predicate()
        except ignore as e:
            last = e
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            desc = what or getattr(predicate, "__name__", repr(predicate))
            raise RigTimeout(f"timed out after {timeout}s waiting for {desc}; last value: {last!r}")
        time.sleep(poll)


def _alive(pid: int | None) -> bool:
    """True when the process exists and is not a zombie (PID 1 here reaps late)."""
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _which(name: str) -> str | None:
    path = os.environ.get("PATH", "") + ":" + SYSTEM_PATH
    return shutil.which(name, path=path)


def _base_env() -> dict[str, str]:
    """os.environ with /usr/sbin etc. on PATH and no Slurm job context inherited.

    A test run inside a Slurm allocation would otherwise pass SLURM_JOB_ID & co. to
    srun/sbatch, which then think they run inside that (foreign) job.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))
    }
    path = env.get("PATH", "")
    missing = [d for d in SYSTEM_PATH.split(":") if d not in path.split(":")]
    env["PATH"] = ":".join([p for p in [path, *missing] if p])
    return env


# --------------------------------------------------------------------------------------
# availability
# --------------------------------------------------------------------------------------

_AVAILABLE: dict[bool, tuple[bool, str]] = {}


def rig_available(need_slurm: bool = False) -> tuple[bool, str]:
    """(True, "") when this machine can run the rig, else (False, reason).

    Checks root, the tools the scripts use, that network namespaces, veth pairs and
    bridges can actually be created (inside a throw-away namespace, so the machine's
    network is untouched) and, with ``need_slurm``, the Slurm and munge binaries.
    The answer is cached per process.
    """
    if need_slurm in _AVAILABLE:
        return _AVAILABLE[need_slurm]
    _AVAILABLE[need_slurm] = ans = _probe(need_slurm)
    return ans


def _probe(need_slurm: bool) -> tuple[bool, str]:
    if os.uname().sysname != "Linux":
        return False, "not Linux"
    if os.geteuid() != 0:
        return False, "not root"
    tools = [
        ("ip", "iproute2"),
        ("nsenter", "util-linux"),
        ("unshare", "util-linux"),
        ("setsid", "util-linux"),
        ("findmnt", "util-linux"),
        ("ssh-keygen", "openssh-client"),
        ("sshd", "openssh-server"),
    ]
    for tool, pkg in tools:
        if not _which(tool):
            return False, f"{tool} not installed ({pkg}; run tests/rig/install.sh)"
    ns = f"hctprobe{os.getpid()}"
    try:
        r = run(["ip", "netns", "add", ns], timeout=10)
        if not r.ok:
            return False, f"cannot create network namespaces: {r.stderr.strip() or r.rc}"
        try:
            r = run(
                ["ip", "-n", ns, "link", "add", "p0", "type", "veth", "peer", "name", "p1"],
                timeout=10,
            )
            if not r.ok:
                return False, f"cannot create veth pairs: {r.stderr.strip() or r.rc}"
            r = run(["ip", "-n", ns, "link", "add", "pbr", "type", "bridge"], timeout=10)
            if not r.ok:
                return False, f"cannot create bridges: {r.stderr.strip() or r.rc}"
        finally:
            run(["ip", "netns", "del", ns], timeout=10)
    except RigError as e:
        return False, f"cannot create network namespaces: {e}"
    if need_slurm:
        for tool in ("slurmctld", "slurmd", "munged", "sinfo", "srun", "sbatch", "scontrol"):
            if not _which(tool):
                return False, f"{tool} not installed (slurm-wlm/munge; run tests/rig/install.sh)"
    return True, ""


# --------------------------------------------------------------------------------------
# network-namespace hosts
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Host:
    """One fake host. ``pid`` (the anchor) is what to nsenter; sshd may come and go."""

    name: str
    addr: str
    netns: str
    mtu: int
    index: int
    dir: Path
    port: int = 22
    ib_addr: str | None = None
    ib_mtu: int | None = None

    @property
    def pid(self) -> int:
        """Pid of the `sleep infinity` that holds this host's namespaces."""
        pid = _read_pid(self.dir / "anchor.pid")
        if not pid or not _alive(pid) or not _exe(pid).endswith("/sleep"):
            raise RigError(f"host {self.name} is gone (anchor pid {pid})")
        return pid

    @property
    def sshd_pid(self) -> int | None:
        """Pid of this host's sshd, or None when it is not running."""
        pid = _read_pid(self.dir / "sshd.pid")
        return pid if pid and _alive(pid) and _exe(pid) == "/usr/sbin/sshd" else None


HostRef = Host | str


class NetnsRig:
    """N namespace hosts made by netns-up.sh. Use :meth:`up` / :meth:`attach`."""

    def __init__(self, rig_dir: str | os.PathLike[str], prefix: str, bridge: str) -> None:
        self.dir = Path(rig_dir)
        self.prefix = prefix
        self.bridge = bridge
        inv = json.loads((self.dir / "inventory.json").read_text())
        self.hosts: list[Host] = [
            Host(
                name=h["name"],
                addr=h["addr"],
                netns=h["netns"],
                mtu=int(h["mtu"]),
                index=i + 1,
                dir=self.dir / h["name"],
                port=int(h.get("port", 22)),
                ib_addr=h.get("ib_addr"),
                ib_mtu=h.get("ib_mtu"),
            )
            for i, h in enumerate(inv)
        ]
        self._by_name = {h.name: h for h in self.hosts}
        self.up_output = ""  # netns-up.sh's summary line (with its timing)

    # -- lifecycle -----------------------------------------------------------------
    @staticmethod
    def _script_env(
        rig_dir: str | None, prefix: str | None, bridge: str | None, subnet: str | None = None
    ) -> dict[str, str]:
        env = _base_env()
        env["HC_RIG_DIR"] = rig_dir or env.get("HC_RIG_DIR", DEFAULT_NETNS_DIR)
        env["HC_RIG_PREFIX"] = prefix or env.get("HC_RIG_PREFIX", "hct")
        env["HC_RIG_BRIDGE"] = bridge or env.get("HC_RIG_BRIDGE", "hctbr0")
        if subnet:
            env["HC_RIG_SUBNET"] = subnet
        return env

    @classmethod
    def up(
        cls,
        hosts: int = 4,
        mtus: Sequence[int] | None = None,
        ib_mtu: int | None = None,
        *,
        rig_dir: str | None = None,
        prefix: str | None = None,
        subnet: str | None = None,
        bridge: str | None = None,
        timeout: float = 60,
    ) -> NetnsRig:
        """Bring up ``hosts`` hosts (tearing down a previous rig with the same prefix).

        ``mtus``: eth0 MTU per host (the last value repeats; default: $HC_RIG_MTUS or
        9000 everywhere). ``ib_mtu``: also create a fabric network with ``ib0``.
        """
        env = cls._script_env(rig_dir, prefix, bridge, subnet)
        env["HC_RIG_HOSTS"] = str(hosts)
        if mtus is not None:
            env["HC_RIG_MTUS"] = " ".join(str(int(m)) for m in mtus)
        if ib_mtu is not None:
            env["HC_RIG_IB_MTU"] = str(int(ib_mtu))
        r = run([str(SCRIPTS / "netns-up.sh")], env=env, timeout=timeout)
        if not r.ok:
            run([str(SCRIPTS / "netns-down.sh")], env=env, timeout=60)
            raise RigError(f"netns-up.sh failed (rc {r.rc})\n{r._outputs()}")
        rig = cls(env["HC_RIG_DIR"], env["HC_RIG_PREFIX"], env["HC_RIG_BRIDGE"])
        rig.up_output = r.stdout.strip()
        return rig

    @classmethod
    def attach(
        cls, rig_dir: str | None = None, prefix: str | None = None, bridge: str | None = None
    ) -> NetnsRig:
        """Use a rig that is already up (e.g. started by hand with netns-up.sh)."""
        env = cls._script_env(rig_dir, prefix, bridge)
        return cls(env["HC_RIG_DIR"], env["HC_RIG_PREFIX"], env["HC_RIG_BRIDGE"])

    def down(self, clean: bool = False, timeout: float = 60) -> None:
        """Stop everything in the hosts and delete namespaces, veths and bridges."""
        env = self._script_env(str(self.dir), self.prefix, self.bridge)
        env["HC_RIG_CLEAN"] = "1" if clean else "0"
        run([str(SCRIPTS / "netns-down.sh")], env=env, timeout=timeout, check=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -- files and names -------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    @property
    def ssh_config(self) -> Path:
        return self.dir / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def client_key(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def inventory(self) -> Path:
        return self.dir / "inventory.json"

    @property
    def local_dir(self) -> Path:
        """Same path in every host, a private tmpfs in each (empty in the root ns)."""
        return self.dir / "local"

    def host(self, host: HostRef) -> Host:
        if isinstance(host, Host):
            return host
        try:
            return self._by_name[host]
        except KeyError:
            raise RigError(f"no host {host!r} in rig (have {self.names})") from None

    # -- running things inside a host ------------------------------------------------
    def nsenter_argv(
        self, host: HostRef, net: bool = True, uts: bool = True, mnt: bool = True
    ) -> list[str]:
        """``nsenter -t <anchor> -n -u -m`` prefix to run something inside ``host``."""
        argv = ["nsenter", "-t", str(self.host(host).pid)]
        argv += (["-n"] if net else []) + (["-u"] if uts else []) + (["-m"] if mnt else [])
        return [*argv, "--"]

    def exec(
        self,
        host: HostRef,
        argv: Sequence[str] | str,
        env: Mapping[str, str] | None = None,
        timeout: float = 30,
        input: str | None = None,
        inherit_env: bool = True,
        check: bool = False,
    ) -> Result:
        """Run ``argv`` inside ``host`` (its network, UTS and mount namespaces).

        A string is run with ``/bin/sh -c``. The environment is this process's (or
        just PATH/HOME/LANG with ``inherit_env=False``) with the host's
        ``local/bin`` first on PATH, updated with ``env``. The working directory is
        ``/`` (entering a mount namespace resets it).
        """
        if isinstance(argv, str):
            argv = ["/bin/sh", "-c", argv]
        base = (
            _base_env()
            if inherit_env
            else {"PATH": SYSTEM_PATH, "HOME": "/root", "LANG": os.environ.get("LANG", "C.UTF-8")}
        )
        base["PATH"] = f"{self.local_dir / 'bin'}:{base['PATH']}"
        base.update(env or {})
        return run(
            [*self.nsenter_argv(host), *argv], env=base, timeout=timeout, input=input, check=check
        )

    def write_file(
        self, host: HostRef, path: str | os.PathLike[str], content: str, mode: int = 0o644
    ) -> str:
        """Write ``content`` to ``path`` as seen inside ``host`` (its mount namespace).

        Inside ``local_dir`` this is private to the host; elsewhere (e.g. /tmp) the
        file system is shared with the machine and the other hosts.
        """
        script = 'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"'
        self.exec(
            host,
            ["/bin/sh", "-c", script, "sh", str(path), f"{mode:o}"],
            input=content,
            check=True,
            timeout=10,
        )
        return str(path)

    def local_bin(self, host: HostRef, name: str, content: str, mode: int = 0o755) -> str:
        """Install a per-host stand-in executable ``local/bin/<name>`` in ``host``.

        It is first on PATH for :meth:`exec`, for SSH sessions (sshd SetEnv) and for
        anything that prepends ``local/bin`` (e.g. a Slurm hook wrapper). Returns its
        path (valid inside that host only).
        """
        if "/" in name or not name:
            raise ValueError(f"bad executable name {name!r}")
        return self.write_file(host, self.local_dir / "bin" / name, content, mode)

    def clear_local_bin(self, host: HostRef) -> None:
        bindir = self.local_dir / "bin"
        self.exec(
            host,
            ["/bin/sh", "-c", f'rm -rf "{bindir}"/* && mkdir -p "{bindir}"'],
            check=True,
            timeout=10,
        )

    # -- network knobs -------------------------------------------------------------------
    def set_mtu(self, host: HostRef, iface: str, mtu: int) -> None:
        run(
            ["ip", "-n", self.host(host).netns, "link", "set", iface, "mtu", str(int(mtu))],
            timeout=10,
            check=True,
        )

    def set_link(self, host: HostRef, iface: str, up: bool) -> None:
        run(
            ["ip", "-n", self.host(host).netns, "link", "set", iface, "up" if up else "down"],
            timeout=10,
            check=True,
        )

    def throttle(self, host: HostRef, rate: str = "100mbit") -> None:
        """Slow ``host``'s eth0 both ways: tbf on its eth0 and on its veth peer in the
        root namespace (what reaches the host). :meth:`reset` removes both."""
        h = self.host(host)
        tbf = ["root", "tbf", "rate", rate, "burst", "1mbit", "latency", "100ms"]
        run([TC, "-n", h.netns, "qdisc", "replace", "dev", "eth0", *tbf], timeout=10, check=True)
        run([TC, "qdisc", "replace", "dev", f"{self.prefix}v{h.index}", *tbf], timeout=10, check=True)

    def throttle_link(self, a: HostRef, b: HostRef, rate: str = "100mbit") -> None:
        """Slow only the traffic between ``a`` and ``b``: a veth pair of their own
        (``lk<index>`` in each), /32 routes to each other's eth0 address through it (the
        addresses stay the same) and tbf on both ends. The rig's kernel offers no
        classful qdisc, so per-destination shaping on eth0 is not possible. :meth:`reset`
        deletes the pair."""
        ha, hb = self.host(a), self.host(b)
        la, lb = f"lk{hb.index}", f"lk{ha.index}"
        run([IP, "link", "add", la, "netns", ha.netns, "type", "veth", "peer", "name", lb, "netns", hb.netns],
            timeout=10, check=True)
        tbf = ["root", "tbf", "rate", rate, "burst", "1mbit", "latency", "100ms"]
        for h, link, peer in ((ha, la, hb), (hb, lb, ha)):
            run([IP, "-n", h.netns, "link", "set", link, "mtu", str(h.mtu), "up"], timeout=10, check=True)
            run([IP, "-n", h.netns, "route", "add", f"{peer.addr}/32", "dev", link, "src", h.addr],
                timeout=10, check=True)
            run([TC, "-n", h.netns, "qdisc", "replace", "dev", link, *tbf], timeout=10, check=True)

    def links(self, host: HostRef) -> dict[str, dict[str, Any]]:
        """``ip -j link`` inside the host, keyed by interface name."""
        r = run(["ip", "-n", self.host(host).netns, "-j", "link"], timeout=10, check=True)
        return {link["ifname"]: link for link in json.loads(r.stdout)}

    # -- sshd --------------------------------------------------------------------------
    def stop_sshd(self, host: HostRef, timeout: float = 10) -> None:
        """Stop the host's sshd (its pid file; exe checked). The host itself stays."""
        h = self.host(host)
        pid = h.sshd_pid
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        wait_for(
            lambda: not _alive(pid),
            timeout=timeout,
            poll=0.05,
            what=f"sshd {pid} on {h.name} to exit",
        )

    def start_sshd(self, host: HostRef, timeout: float = 10) -> int:
        """(Re)start the host's sshd with its original config; return its pid."""
        h = self.host(host)
        if h.sshd_pid:
            return h.sshd_pid
        (h.dir / "sshd.pid").unlink(missing_ok=True)
        with open(h.dir / "sshd.log", "a") as log:
            p = subprocess.run(
                [
                    *self.nsenter_argv(h),
                    "/usr/sbin/sshd",
                    "-f",
                    str(h.dir / "sshd_config"),
                    "-E",
                    str(h.dir / "sshd.log"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                timeout=timeout,
                check=False,
            )
        if p.returncode != 0:
            raise RigError(
                f"sshd on {h.name} did not start (rc {p.returncode}); see {h.dir}/sshd.log"
            )

        def listening() -> bool:
            try:
                with socket.create_connection((h.addr, h.port), timeout=1):
                    return True
            except OSError:
                return False

        wait_for(
            lambda: h.sshd_pid and listening(),
            timeout=timeout,
            poll=0.05,
            what=f"sshd on {h.name} to listen",
        )
        return h.sshd_pid or 0

    @contextmanager
    def extra_sshd(
        self, host: HostRef, port: int, workdir: Path, *, host_key: Path, host_cert: Path | None = None,
        timeout: float = 10,
    ) -> Iterator[int]:
        """A second sshd inside ``host`` on ``port``, with its own host key (and a host
        certificate: ``ssh-keygen -s CA -h``), the host's users and keys otherwise; its
        pid while the block runs, stopped (by pid, exe checked) after it. The host's own
        sshd on :22 is left alone."""
        h = self.host(host)
        workdir.mkdir(parents=True, exist_ok=True)
        config, pid_file, log = workdir / f"sshd-{port}.conf", workdir / f"sshd-{port}.pid", workdir / f"sshd-{port}.log"
        lines = []
        for line in (h.dir / "sshd_config").read_text().splitlines():
            word = line.split(" ", 1)[0]
            if word not in ("Port", "HostKey", "PidFile", "HostCertificate"):
                lines.append(line)
        lines += [f"Port {port}", f"HostKey {host_key}", f"PidFile {pid_file}"]
        if host_cert is not None:
            lines.append(f"HostCertificate {host_cert}")
        config.write_text("\n".join(lines) + "\n")
        pid_file.unlink(missing_ok=True)
        p = run([*self.nsenter_argv(h), "/usr/sbin/sshd", "-f", str(config), "-E", str(log)], timeout=timeout)
        if p.rc != 0:
            raise RigError(f"extra sshd on {h.name}:{port} did not start (rc {p.rc}): {p.stderr.strip()}")

        def listening() -> bool:
            try:
                with socket.create_connection((h.addr, port), timeout=1):
                    return True
            except OSError:
                return False

        def sshd_pid() -> int | None:
            pid = _read_pid(pid_file)
            return pid if pid and _alive(pid) and _exe(pid) == "/usr/sbin/sshd" else None

        def stop() -> None:
            pid = sshd_pid()
            if pid:
                os.kill(pid, signal.SIGTERM)
                wait_for(lambda: not _alive(pid), timeout=timeout, poll=0.05, what=f"sshd {pid} to exit")

        try:
            wait_for(lambda: sshd_pid() and listening(), timeout=timeout, poll=0.05,
                     what=f"extra sshd on {h.name}:{port} to listen")
            yield sshd_pid() or 0
        finally:
            stop()

    def ssh_client(self, host: HostRef, timeout: float = 5):  # -> paramiko.SSHClient
        """A connected paramiko client with strict host keys (rig known_hosts only)."""
        import paramiko  # local import: only tests that use SSH need it

        h = self.host(host)
        c = paramiko.SSHClient()
        c.load_host_keys(str(self.known_hosts))
        c.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            c.connect(
                h.addr,
                port=h.port,
                username="root",
                key_filename=str(self.client_key),
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                allow_agent=False,
                look_for_keys=False,
            )
        except BaseException:
            c.close()
            raise
        return c

    def ssh_argv(self, host: HostRef) -> list[str]:
        """argv prefix for the OpenSSH client: ``ssh -F <ssh_config> <name>``."""
        return ["ssh", "-F", str(self.ssh_config), self.host(host).name]

    # -- fake InfiniBand -------------------------------------------------------------------
    def fake_ib(self, host: HostRef, specs: Iterable[str]) -> Path:
        """Fake HCAs in ``host`` (see fake-ib.sh; spec ``ca[:state[:phys[:rate]]]``).

        Returns the fake ``infiniband`` directory; edit files under it (state,
        counters/...) and the change shows through live.
        """
        h = self.host(host)
        specs = list(specs)
        if not specs:
            self.clear_fake_ib(h)
            return self.fake_ib_dir(h)
        env = self._script_env(str(self.dir), self.prefix, self.bridge)
        run([str(SCRIPTS / "fake-ib.sh"), h.name, *specs], env=env, timeout=30, check=True)
        return self.fake_ib_dir(h)

    def clear_fake_ib(self, host: HostRef) -> None:
        h = self.host(host)
        env = self._script_env(str(self.dir), self.prefix, self.bridge)
        run([str(SCRIPTS / "fake-ib.sh"), h.name, "--clear"], env=env, timeout=30, check=True)

    def fake_ib_dir(self, host: HostRef) -> Path:
        return self.host(host).dir / "fake-sysclass" / "infiniband"

    # -- back to the state right after up() -------------------------------------------------
    def reset(self) -> None:
        """Undo what tests typically change: MTUs/link state/tc qdiscs of eth0 and
        ib0, a stopped sshd, fake IB, stand-ins in local/bin. Raises RigError when a
        host itself is gone (then the rig must be brought up again)."""
        for h in self.hosts:
            h.pid  # noqa: B018 - raises when the host is gone
            if (h.dir / "fake-sysclass").exists():
                self.clear_fake_ib(h)
            ifaces = [("eth0", h.mtu, f"{self.prefix}v{h.index}")]
            if h.ib_mtu:
                ifaces.append(("ib0", int(h.ib_mtu), f"{self.prefix}f{h.index}"))
            # stand-ins go first: a test may have left a hanging `ip` in local/bin, which
            # is first on PATH inside the host; system tools are called by full path
            inner = [f'rm -rf "{self.local_dir}/bin"/*; mkdir -p "{self.local_dir}/bin"',
                     # a "slow link" test's own veth pairs (throttle_link); deleting one end deletes both
                     f"for l in $({IP} -o link show | sed -n 's/^[0-9]*: \\(lk[0-9]*\\)@.*/\\1/p'); "
                     f"do {IP} link del $l 2>/dev/null; done"]
            for iface, mtu, peer in ifaces:
                inner.append(f"{IP} link set {iface} mtu {mtu} up")
                # a "slow node" test may have added tbf on both ends
                inner.append(f"{TC} qdisc del dev {iface} root 2>/dev/null")
                run([TC, "qdisc", "del", "dev", peer, "root"], timeout=10)
            self.exec(h, ["/bin/sh", "-c", "; ".join(inner) + "; true"], timeout=15, check=True)
            if not h.sshd_pid:
                self.start_sshd(h)


# --------------------------------------------------------------------------------------
# Slurm
# --------------------------------------------------------------------------------------

_DEFAULT_SLURM_CONFIG: dict[str, Any] = {
    "prolog": "hook",
    "epilog": "hook",
    "healthcheck": None,
    "hc_interval": 0,
    "prolog_flags": "Alloc",
    "prolog_epilog_timeout": None,
    "extra_conf": (),
    "gpus": 0,
    "cpus": 2,
    "nodes": None,
    "slurmd_timeout": 30,
    "message_timeout": 10,
}


def _hook_value(v: str | os.PathLike[str] | None) -> str:
    if v is None:
        return "none"
    v = str(v)
    if v in ("hook", "none"):
        return v
    p = Path(v)
    if not p.is_absolute():
        raise ValueError(f"hook program must be an absolute path, 'hook' or None (got {v!r})")
    return str(p)


class SlurmRig:
    """A private Slurm cluster made by slurm-up.sh. Use :meth:`up`."""

    def __init__(
        self,
        slurm_dir: str | os.PathLike[str],
        netns_rig: NetnsRig | None,
        config: Mapping[str, Any],
        ctld_port: int,
        slurmd_port: int,
    ) -> None:
        self.dir = Path(slurm_dir)
        self.netns_rig = netns_rig
        self.config: dict[str, Any] = dict(config)
        self.baseline: dict[str, Any] = dict(config)
        self.ctld_port = ctld_port
        self.slurmd_port = slurmd_port
        self.up_output = ""

    # -- lifecycle -----------------------------------------------------------------
    @classmethod
    def up(
        cls,
        netns_rig: NetnsRig | None = None,
        *,
        prolog: str | os.PathLike[str] | None = "hook",
        epilog: str | os.PathLike[str] | None = "hook",
        healthcheck: str | os.PathLike[str] | None = None,
        hc_interval: int = 0,
        prolog_flags: str | None = "Alloc",
        prolog_epilog_timeout: int | None = None,
        extra_conf: Sequence[str] | str = (),
        gpus: int = 0,
        cpus: int = 2,
        nodes: int | None = None,
        slurmd_timeout: int = 30,
        message_timeout: int = 10,
        slurm_dir: str | None = None,
        ctld_port: int | None = None,
        slurmd_port: int | None = None,
        timeout: float = 60,
    ) -> SlurmRig:
        """Start munged + slurmctld + one slurmd per node; return when all are idle.

        ``netns_rig``: run slurmd inside its hosts (None: localhost mode, several
        slurmd in the root namespace). Hooks: ``"hook"`` = the recording hook,
        ``None`` = not configured, or an absolute path (it runs as root inside the
        node with no PATH; the health check also without SLURM_CONF).
        ``extra_conf``: lines appended to slurm.conf. ``slurmd_timeout``,
        ``message_timeout``: SlurmdTimeout and MessageTimeout (a test of a node that
        stops answering waits about two thirds of the first plus the second for
        slurmctld to mark it not responding).
        """
        env = _base_env()
        rig = cls(
            slurm_dir or env.get("HC_SLURM_DIR", DEFAULT_SLURM_DIR),
            netns_rig,
            {
                "prolog": prolog,
                "epilog": epilog,
                "healthcheck": healthcheck,
                "hc_interval": hc_interval,
                "prolog_flags": prolog_flags,
                "prolog_epilog_timeout": prolog_epilog_timeout,
                "extra_conf": tuple([extra_conf] if isinstance(extra_conf, str) else extra_conf),
                "gpus": gpus,
                "cpus": cpus,
                "nodes": nodes,
                "slurmd_timeout": slurmd_timeout,
                "message_timeout": message_timeout,
            },
            int(ctld_port or env.get("HC_SLURM_CTLD_PORT", 16917)),
            int(slurmd_port or env.get("HC_SLURM_SLURMD_PORT", 17101)),
        )
        rig._start(timeout)
        return rig

    def _start(self, timeout: float = 60) -> None:
        c = self.config
        env = _base_env()
        env.update(
            {
                "HC_SLURM_DIR": str(self.dir),
                "HC_SLURM_NETNS_DIR": str(self.netns_rig.dir) if self.netns_rig else "",
                "HC_SLURM_CTLD_PORT": str(self.ctld_port),
                "HC_SLURM_SLURMD_PORT": str(self.slurmd_port),
                "HC_SLURM_PROLOG": _hook_value(c["prolog"]),
                "HC_SLURM_EPILOG": _hook_value(c["epilog"]),
                "HC_SLURM_HEALTHCHECK": _hook_value(c["healthcheck"]),
                "HC_SLURM_HC_INTERVAL": str(int(c["hc_interval"] or 0)),
                "HC_SLURM_PROLOG_FLAGS": c["prolog_flags"] or "",
                "HC_SLURM_EXTRA_CONF": "\n".join(c["extra_conf"]),
                "HC_SLURM_GPUS": str(int(c["gpus"] or 0)),
                "HC_SLURM_CPUS": str(int(c["cpus"])),
                "HC_SLURM_SLURMD_TIMEOUT": str(int(c["slurmd_timeout"])),
                "HC_SLURM_MESSAGE_TIMEOUT": str(int(c["message_timeout"])),
                "HC_SLURM_TIMEOUT": str(int(max(5, timeout - 5))),
            }
        )
        if c["prolog_epilog_timeout"] is not None:
            env["HC_SLURM_PROLOG_EPILOG_TIMEOUT"] = str(int(c["prolog_epilog_timeout"]))
        else:
            env.pop("HC_SLURM_PROLOG_EPILOG_TIMEOUT", None)
        if c["nodes"] is not None:
            env["HC_SLURM_NODES"] = str(int(c["nodes"]))
        else:
            env.pop("HC_SLURM_NODES", None)
        r = run([str(SCRIPTS / "slurm-up.sh")], env=env, timeout=timeout)
        if not r.ok:
            raise RigError(f"slurm-up.sh failed (rc {r.rc})\n{r._outputs()}")
        self.up_output = r.stdout.strip()

    def down(self, clean: bool = False, timeout: float = 60) -> None:
        """Cancel all jobs, stop the daemons (pid files; exe checked)."""
        env = _base_env()
        env.update({"HC_SLURM_DIR": str(self.dir), "HC_SLURM_CLEAN": "1" if clean else "0"})
        run([str(SCRIPTS / "slurm-down.sh")], env=env, timeout=timeout, check=True)

    def reconfigure(self, timeout: float = 60, **changes: Any) -> None:
        """Restart the cluster with some knobs of :meth:`up` changed (about 1 s).

        Restarting (not ``scontrol reconfigure``) gives clean state: no jobs, all
        nodes idle, job ids from 1. :meth:`reset` goes back to the baseline config.
        """
        unknown = set(changes) - set(_DEFAULT_SLURM_CONFIG)
        if unknown:
            raise TypeError(f"unknown Slurm rig knobs: {sorted(unknown)}")
        if "extra_conf" in changes and isinstance(changes["extra_conf"], str):
            changes["extra_conf"] = (changes["extra_conf"],)
        if "extra_conf" in changes:
            changes["extra_conf"] = tuple(changes["extra_conf"])
        self.down(timeout=timeout)
        self.config.update(changes)
        self._start(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def alive(self) -> bool:
        """slurmctld, munged and every slurmd process are running."""
        pids = [self.dir / "run" / "slurmctld.pid", self.dir / "run" / "munged.pid"]
        pids += [self.dir / "run" / f"slurmd-{n}.pid" for n in self.nodes]
        return all(_alive(_read_pid(p)) for p in pids)

    # -- environment ---------------------------------------------------------------------
    @property
    def slurm_conf(self) -> Path:
        return self.dir / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """What a client needs: SLURM_CONF and a PATH with the Slurm tools."""
        return {"SLURM_CONF": str(self.slurm_conf), "PATH": _base_env()["PATH"]}

    def environ(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """Full environment for a subprocess talking to this cluster."""
        env = _base_env()
        env.update(self.env)
        env.update(extra or {})
        return env

    @property
    def jobs_dir(self) -> Path:
        """Default working/output directory of jobs (batch output: <jobid>.out)."""
        return self.dir / "jobs"

    @property
    def nodes(self) -> list[str]:
        if self.netns_rig is not None:
            n = self.config["nodes"] or len(self.netns_rig.hosts)
            return self.netns_rig.names[:n]
        return [f"node{i}" for i in range(1, (self.config["nodes"] or 4) + 1)]

    # -- commands ------------------------------------------------------------------------
    def run(
        self,
        argv: Sequence[str],
        timeout: float = 30,
        check: bool = False,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        """Run a client command (cwd = jobs_dir, SLURM_CONF set)."""
        return run(
            argv,
            env=self.environ(env),
            timeout=timeout,
            check=check,
            input=input,
            cwd=self.jobs_dir,
        )

    def scontrol(self, *args: str, check: bool = True, timeout: float = 30) -> Result:
        return self.run(["scontrol", *args], timeout=timeout, check=check)

    def sinfo_nodes(self) -> dict[str, tuple[str, str]]:
        """{node: (state, reason)} from ``sinfo -h -N -o '%N|%T|%E'``.

        state is sinfo's long form (idle, drained, draining, down*, idle*, ...);
        reason is "none" when there is none.
        """
        r = self.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], timeout=15, check=True)
        out: dict[str, tuple[str, str]] = {}
        for line in r.stdout.splitlines():
            if line.strip():
                node, state, reason = line.split("|", 2)
                out[node] = (state, reason)
        return out

    def squeue(self) -> list[dict[str, str]]:
        """Jobs in the queue: [{"jobid", "state", "reason", "nodes", "name"}]."""
        r = self.run(["squeue", "-h", "-o", "%i|%T|%r|%N|%j"], timeout=15, check=True)
        jobs = []
        for line in r.stdout.splitlines():
            if line.strip():
                jobid, state, reason, nodes, name = line.split("|", 4)
                jobs.append(
                    {"jobid": jobid, "state": state, "reason": reason, "nodes": nodes, "name": name}
                )
        return jobs

    def job(self, jobid: int | str) -> dict[str, str]:
        """``scontrol -o show job`` as a dict ({} once the job is forgotten)."""
        r = self.scontrol("-o", "show", "job", str(jobid), check=False, timeout=15)
        if not r.ok:
            if "Invalid job id" in r.stderr:
                return {}
            r.check()
        return dict(
            re.findall(
                r"(?:^|\s)([A-Za-z][\w:/]*)=(.*?)(?=\s+[A-Za-z][\w:/]*=|\s*$)", r.stdout.strip()
            )
        )

    def sbatch(
        self,
        *args: str,
        wrap: str | None = None,
        script: str | os.PathLike[str] | None = None,
        timeout: float = 30,
    ) -> int:
        """Submit a batch job; return its id. Output goes to jobs_dir/<id>.out unless
        ``-o``/``--output`` is given (never into the caller's cwd)."""
        argv = ["sbatch", "--parsable"]
        if not any(a == "-o" or a.startswith(("-o", "--output")) for a in args):
            argv.append(f"--output={self.jobs_dir}/%j.out")
        if not any(a == "-D" or a.startswith(("-D", "--chdir")) for a in args):
            argv.append(f"--chdir={self.jobs_dir}")
        argv += args
        if wrap is not None:
            argv += ["--wrap", wrap]
        elif script is not None:
            argv.append(str(script))
        r = self.run(argv, timeout=timeout, check=True)
        return int(r.stdout.strip().split(";")[0])

    def srun(self, *args: str, timeout: float = 60, check: bool = False) -> Result:
        return self.run(["srun", *args], timeout=timeout, check=check)

    def scancel(self, *jobids: int | str, wait: float = 20) -> None:
        """Cancel the given jobs (all when none given) and wait until they are gone."""
        ids = [str(j) for j in jobids] or [j["jobid"] for j in self.squeue()]
        if not ids:
            return
        self.run(["scancel", "--full", *ids], timeout=15)
        wait_for(
            lambda: not {j["jobid"] for j in self.squeue()} & set(ids),
            timeout=wait,
            what=f"jobs {ids} to leave the queue",
        )

    def drain(self, node: str, reason: str) -> None:
        self.scontrol("update", f"nodename={node}", "state=drain", f"reason={reason}")

    def resume(self, node: str) -> None:
        self.scontrol("update", f"nodename={node}", "state=resume")

    def release_requeued(self, jobid: int | str) -> None:
        """Make a requeued job start now.

        A requeued job (e.g. after a prolog failure) is held (unless
        SchedulerParameters=nohold_on_prolog_fail) and gets BeginTime = now + ~121 s;
        release it (a "not held" answer is fine) and move its start time to now.
        """
        self.scontrol("release", str(jobid), check=False)
        self.scontrol("update", f"jobid={jobid}", "StartTime=now")

    # -- waiting -------------------------------------------------------------------------
    @staticmethod
    def wait_for(
        predicate: Callable[[], T],
        timeout: float = 20.0,
        poll: float = 0.2,
        what: str | None = None,
        ignore: tuple[type[BaseException], ...] = (),
    ) -> T:
        """Bounded polling; see the module-level :func:`wait_for`."""
        return wait_for(predicate, timeout=timeout, poll=poll, what=what, ignore=ignore)

    def wait_node_state(
        self, node: str, state: str | Iterable[str], timeout: float = 20.0
    ) -> tuple[str, str]:
        """Wait until sinfo shows ``node`` in (one of) ``state``; return (state, reason)."""
        want = {state} if isinstance(state, str) else set(state)

        def check() -> tuple[str, str] | None:
            cur = self.sinfo_nodes().get(node)
            return cur if cur and cur[0] in want else None

        return wait_for(check, timeout=timeout, what=f"{node} in state {sorted(want)}")

    def wait_job_state(
        self, jobid: int | str, state: str | Iterable[str], timeout: float = 20.0
    ) -> dict[str, str]:
        """Wait until ``scontrol show job`` reports JobState in ``state``; return the job."""
        want = {state} if isinstance(state, str) else set(state)

        def check() -> dict[str, str] | None:
            j = self.job(jobid)
            return j if j.get("JobState") in want else None

        return wait_for(check, timeout=timeout, what=f"job {jobid} in state {sorted(want)}")

    # -- recording hooks -------------------------------------------------------------------
    @property
    def hooks_dir(self) -> Path:
        return self.dir / "hooks"

    def hook_fail(self, kind: str, node: str = "all", fail: bool = True) -> None:
        """Make the recording hook ``kind`` (prolog/epilog/healthcheck) exit 1 on
        ``node`` (or every node), or stop doing so."""
        if kind not in ("prolog", "epilog", "healthcheck"):
            raise ValueError(f"unknown hook kind {kind!r}")
        flag = self.hooks_dir / f"fail-{kind}-{node}"
        if fail:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    def hook_events(self) -> list[dict[str, str]]:
        """Recorded hook runs: [{"kind", "node", "job", "t"}] in file order."""
        try:
            text = (self.hooks_dir / "events.log").read_text()
        except FileNotFoundError:
            return []
        events = []
        for line in text.splitlines():
            if not line.strip():
                continue
            kind, *rest = line.split()
            ev = {"kind": kind}
            ev.update(kv.split("=", 1) for kv in rest if "=" in kv)
            events.append(ev)
        return events

    def hook_env(self, kind: str, node: str, jobid: int | str = "none") -> dict[str, str]:
        """Environment a recording hook saw (jobid "none" for the health check)."""
        text = (self.hooks_dir / f"{kind}-{node}-{jobid}.env").read_text()
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def log(self, name: str = "slurmctld") -> str:
        """A daemon log: "slurmctld", "munged" or "slurmd-<node>"."""
        try:
            return (self.dir / "log" / f"{name}.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # -- back to the baseline ------------------------------------------------------------
    def reset(self, timeout: float = 30) -> None:
        """Return to the state right after :meth:`up`: no jobs, every node idle,
        baseline config, no hook failure flags, empty hook event log. Restarts the
        cluster when the config was changed (:meth:`reconfigure`) or a daemon died."""
        if self.config != self.baseline or not self.alive():
            self.down()
            self.config = dict(self.baseline)
            self._start()
        else:
            self.scancel(wait=timeout)
            states = self.sinfo_nodes()
            for node, (state, _reason) in states.items():
                base = state.rstrip("*~#!%$@^-")
                if base in ("drained", "draining", "down", "drain", "fail", "failing"):
                    self.scontrol("update", f"nodename={node}", "state=resume", check=False)
            self.wait_for(
                lambda: all(s == "idle" for s, _ in self.sinfo_nodes().values()),
                timeout=timeout,
                what=f"all nodes idle (now {self.sinfo_nodes()})",
            )
        for flag in self.hooks_dir.glob("fail-*"):
            flag.unlink(missing_ok=True)
        for f in self.hooks_dir.glob("*.env"):
            f.unlink(missing_ok=True)
        (self.hooks_dir / "events.log").unlink(missing_ok=True)
