"""Launchers whose ranks never started: torchrun agents on this node with no Python child
(`find_launchers`), their py-spy stack (waiting in the rendezvous or the store's creation)
and who listens on their rendezvous port here (/proc/net/tcp{,6}, the socket's inode found
among /proc/PID/fd, bounded in time). A foreign process on that port keeps the store from
starting while every agent waits on it: the port-taken hang."""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Mapping, Sequence

from healthcheck.core.inputs import clip
from healthcheck.diagnose.nodeschema import LauncherProcess, PortHolder
from healthcheck.diagnose.procs import (
    GONE_STATES,
    MAX_CMDLINE,
    ProcInfo,
    children_map,
    in_other_netns,
    inspect_process,
    is_python,
    own_lineage,
    own_netns,
)
from healthcheck.diagnose.stackdump import dump_stack, process_main_thread, resolve_py_spy
from healthcheck.parsers.py_spy import PySpyDump
from healthcheck.runners.proctree import all_pids, read_small

AGENT_COMMANDS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
_ENDPOINT_FLAGS = ("--rdzv-endpoint", "--rdzv_endpoint")
_ADDR_FLAGS = ("--master-addr", "--master_addr")
_PORT_FLAGS = ("--master-port", "--master_port")
_RDZV_WORDS = ("rendezvous", "tcpstore", "_create_tcp_store", "_create_c10d_store", "store")
MAX_LAUNCHERS = 16
MAX_FD_SCAN_S = 2.0  # the socket -> process search, over every process's fds


def _flag_value(argv: Sequence[str], flags: tuple[str, ...]) -> str | None:
    """The value of the first of `flags` on a command line (`--flag value` or `--flag=value`)."""
    for i, a in enumerate(argv):
        for f in flags:
            if a == f and i + 1 < len(argv):
                return argv[i + 1]
            if a.startswith(f + "="):
                return a[len(f) + 1:]
    return None


def launcher_endpoint(argv: Sequence[str]) -> tuple[str, int | None]:
    """(endpoint as given, its port) from a torchrun command line; ("", None) when it names none."""
    endpoint = _flag_value(argv, _ENDPOINT_FLAGS)
    if endpoint:
        host, sep, port = endpoint.rpartition(":")
        return endpoint, (int(port) if sep and port.isdigit() and host else None)
    addr, port_s = _flag_value(argv, _ADDR_FLAGS), _flag_value(argv, _PORT_FLAGS)
    if port_s and port_s.isdigit():
        return f"{addr or '127.0.0.1'}:{port_s}", int(port_s)
    return "", None


def runs_agent(pid: int, proc: str = "/proc") -> bool:
    """The process `pid` runs a torchrun (its command line names one)."""
    parent_cmd = (read_small(f"{proc}/{pid}/cmdline", MAX_CMDLINE) or b"").replace(b"\0", b" ")
    return any(a.encode() in parent_cmd for a in AGENT_COMMANDS)


def listening_inodes(port: int, proc: str = "/proc") -> set[str]:
    """Socket inodes listening on TCP `port` in this process's network namespace."""
    out: set[str] = set()
    for name in ("tcp", "tcp6"):
        data = read_small(f"{proc}/net/{name}", 4 << 20) or b""
        for line in data.decode("ascii", errors="replace").splitlines()[1:]:
            inode = _listener_inode(line, port)
            if inode is not None:
                out.add(inode)
    return out


def _listener_inode(line: str, port: int) -> str | None:
    """The socket inode of one /proc/net/tcp line where it listens on `port`, else None."""
    f = line.split()
    if len(f) < 10 or f[3] != "0A":  # 0A: LISTEN
        return None
    _, _, hexport = f[1].rpartition(":")
    try:
        return f[9] if int(hexport, 16) == port else None
    except ValueError:
        return None


def socket_owner(inodes: set[str], proc: str = "/proc", budget_s: float = MAX_FD_SCAN_S) -> int | None:
    """The pid holding one of these socket inodes (the first found; None within the budget)."""
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    until = time.monotonic() + budget_s
    for pid in all_pids(proc):
        if time.monotonic() > until:
            return None
        if _holds_any(pid, wanted, proc):
            return pid
    return None


def _holds_any(pid: int, targets: set[str], proc: str) -> bool:
    """One of the process's file descriptors points at one of `targets`."""
    try:
        fds = os.listdir(f"{proc}/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"{proc}/{pid}/fd/{fd}") in targets:
                return True
        except OSError:
            continue
    return False


def waiting_in(stack: PySpyDump | None, pid: int) -> str | None:
    """Its main thread's innermost rendezvous/store frame: "fn (file.py:12)"."""
    main = process_main_thread(stack, pid) if stack else None
    if main is None:
        return None
    for fr in main.frames:  # innermost first
        where = f"{fr.name} {fr.file}".lower()
        if any(w in where for w in _RDZV_WORDS):
            return f"{fr.name} ({os.path.basename(fr.file)}:{fr.line})" if fr.line is not None else fr.name
    return None


def is_agent_command(command: str) -> bool:
    """A command line that runs torchrun (its program or module among its first words)."""
    argv = command.split(" ")
    return any(a in argv[:3] or any(w.endswith("/" + a) for w in argv[:2]) for a in AGENT_COMMANDS)


def _rankless_agents(procs: list[ProcInfo], *, own: str | None, same_netns: bool,
                     only: Collection[int] | None) -> list[ProcInfo]:
    """The torchrun agents among `procs` (among `only` where given; in this netns) with no Python child."""
    children = children_map(procs)
    by_pid = {q.pid: q for q in procs}
    agents = []
    for q in procs:
        if only is not None and q.pid not in only:
            continue
        if q.state in GONE_STATES or not is_python(q) or not is_agent_command(q.command):
            continue
        if same_netns and in_other_netns(q, own):
            continue
        if any(c in by_pid and is_python(by_pid[c]) for c in children.get(q.pid, [])):
            continue  # it started its workers: they are the ranks
        agents.append(q)
    return agents


def _port_holder(port: int, agents: list[ProcInfo], by_pid: Mapping[int, ProcInfo], proc: str,
                 until: float) -> PortHolder | None:
    """Who listens on `port` here: a process (a fellow agent hosting its store, or a foreign
    one), a listener whose process was not found, or None where nothing listens."""
    owner = socket_owner(listening_inodes(port, proc), proc,
                         budget_s=max(0.2, min(MAX_FD_SCAN_S, until - time.monotonic())))
    if owner is None and not listening_inodes(port, proc):
        return None
    o = by_pid.get(owner) if owner is not None else None
    is_agent = o is not None and o.pid in {a.pid for a in agents} or (
        o is not None and any(a in o.command for a in AGENT_COMMANDS))
    return PortHolder(port=port, pid=owner, command=clip(o.command, 200) if o else "", is_launcher=is_agent)


def find_launchers(host: str, *, py_spy: str | None, timeout_s: float, proc: str = "/proc",
                   same_netns: bool = True, only: Collection[int] | None = None) -> list[LauncherProcess]:
    """The torchrun agents on this node (this netns; among `only` where given) that have no
    Python child: launchers whose ranks never started, with their stack and who holds their
    rendezvous port."""
    until = time.monotonic() + timeout_s
    own = own_netns(proc)
    mine = own_lineage(proc)
    procs = [q for q in (inspect_process(x, proc, with_environ=False) for x in all_pids(proc) if x not in mine)
             if q]
    by_pid = {q.pid: q for q in procs}
    agents = _rankless_agents(procs, own=own, same_netns=same_netns, only=only)
    binary = resolve_py_spy(py_spy) if py_spy else None
    out: list[LauncherProcess] = []
    for q in agents[:MAX_LAUNCHERS]:
        endpoint, port = launcher_endpoint(q.command.split(" "))
        dump = None
        if binary and time.monotonic() < until:
            dump = dump_stack(binary, q.pid, q.state, timeout_s=max(0.5, min(5.0, until - time.monotonic())))
        holder = _port_holder(port, agents, by_pid, proc, until) if port is not None else None
        stack = dump.stack if dump else None
        out.append(LauncherProcess(pid=q.pid, host=host, state=q.state, command=clip(q.command, 1000),
                                   endpoint=endpoint, port=port, stack=stack, waiting_in=waiting_in(stack, q.pid),
                                   port_holder=holder))
    return out
