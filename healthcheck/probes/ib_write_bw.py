"""ib_write_bw loopback on this node (deep tier): every Active compute HCA port writes to
itself through the HCA, a perftest server and its client on the same node.

How it runs (the practice of Azure HPC health checks' check_ib_bw_gdr and NVIDIA's
ngc_rdma_test):

* the compute HCAs are selected as the ib probes and checks do (the fabric's `ib.hcas`
  globs, `ib.hca_types`, `ib.link_layer`); their ports come from sysfs (`ibstat` over
  SSH). A port that is not Active is not tested, only recorded (`skipped`): ib.port_state
  judges it;
* every port is tested at once, each with its own side-channel port: the i-th Active
  compute port (sorted by HCA, then port) listens on `port_base + i`;
* server `ib_write_bw -d DEV -i PORT -p TCPPORT -F --report_gbits -s SIZE -n ITERS
  [-q QPS] [-b] [-x GID] [--use_cuda=GPU]`, client the same plus `localhost`; both under
  `numactl -N <node> -m <node>` when the HCA's `device/numa_node` is >= 0 and numactl
  works (tried once per NUMA node with `true`); otherwise unpinned, with a note saying why;
* `--use_cuda` picks a GPU on the HCA's NUMA node (the k-th HCA of a node gets the k-th
  GPU of that node, GPUs in PCI bus order as CUDA_DEVICE_ORDER=PCI_BUS_ID numbers them;
  NUMA nodes from /sys/bus/pci/devices/<bus id>/numa_node). Where that cannot be told
  (the HCA's node unknown, no GPU listed on it) the GPU is the HCA's index (modulo the GPU
  count), noted;
* perftest's client makes one connect() attempt and gives up with `Couldn't connect to
  HOST:PORT` when its server is not listening yet: the client is started again, with
  short sleeps, for up to CONNECT_WINDOW_S while the server still runs, instead of a
  blind sleep before it. Server and client each run under their own timeout (the
  fabric's `timeout_s`, bounded by what is left of the probe's budget); a server that
  never got a client is killed at its timeout by the runner, which kills its process
  group, so hc only ever kills what it started;
* a port whose BW average falls short of its floor (`loopback_floor`) runs again, up to
  `bandwidth.repeats` attempts in all; a failure or a hang is not re-run;
* the ports' error counters are read before and after the test (the ib probes' sysfs
  reading; `grep` over SSH), and every counter that rose is kept with the port.

Every command goes through `ctx.runner`, so the same code runs agentless over SSH (where
files are read with `cat`/`ls`, ports come from `ibstat`, and at most half the SSH
connection's sessions run at once: a server holds one while its client needs another).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from healthcheck.core.config.schema import IbCounterLimits, IbLimits
from healthcheck.core.errors import ParseError
from healthcheck.core.facts import ProbeContext, ProbeError, provides
from healthcheck.core.units import parse_size
from healthcheck.parsers.ib_common import IbPort, IbPorts, is_compute
from healthcheck.parsers.perftest import (
    IbWriteBwAttempt,
    IbWriteBwHca,
    IbWriteBwLoopback,
    PerftestFailure,
    PerftestFailureKind,
    PerftestRun,
    loopback_floor,
    parse_perftest,
)
from healthcheck.probes.ib import ib_counters_sysfs, ib_ports_sysfs, sysfs_counters_over_shell
from healthcheck.probes.ib_agentless import ib_ports_ibstat
from healthcheck.runners.base import CommandResult, Runner
from healthcheck.runners.ssh import MAX_SESSIONS

TOOL = "ib_write_bw"
SYSFS_IB = "/sys/class/infiniband"
NVIDIA_GPUS = "/proc/driver/nvidia/gpus"  # one directory per GPU the driver bound, named by PCI bus id
PCI_DEVICES = "/sys/bus/pci/devices"
HOST = "localhost"
CONNECT_WINDOW_S = 20.0  # how long a client is started again while its server is not listening yet
FIRST_SLEEP_S, MAX_SLEEP_S = 0.05, 0.5  # between those starts, doubling
MARGIN_S = 4.0  # kept from the probe's budget: a killed command's group is reaped within ~2 s
SERVER_GRACE_S = 3.0  # a server still running this long after its client is stopped (where hc can)
SHORT_TIMEOUT_S = 10.0  # a file read over SSH, `numactl ... true`, `ib_write_bw --version`
TAIL = 3000  # characters of each side's output kept as evidence
# the error counters whose rise is recorded: those the fabric can limit, and three more
ERROR_COUNTERS = (*IbCounterLimits.__struct_fields__, "port_rcv_constraint_errors",
                  "port_xmit_constraint_errors", "VL15_dropped")


def is_compute_port(port: IbPort, ib: IbLimits) -> bool:
    """Whether the port is a compute HCA's, as the fabric's ib section names them."""
    return is_compute(port, ib.hcas, ib.hca_types, ib.link_layer)


class HcaNode:
    """Files and counters of the node: read here (under ctx.root), or through the runner over SSH."""

    def __init__(self, ctx: ProbeContext, local: bool) -> None:
        self.ctx = ctx
        self.local = local

    def read(self, path: str) -> str | None:
        if self.local:
            try:
                return self.ctx.path(path).read_text(errors="replace").strip()
            except OSError:
                return None
        result = self.ctx.runner.run(("cat", path), timeout_s=SHORT_TIMEOUT_S)
        return result.stdout.strip() if result.ok else None

    def listdir(self, path: str) -> list[str]:
        if self.local:
            try:
                return sorted(p.name for p in self.ctx.path(path).iterdir())
            except OSError:
                return []
        result = self.ctx.runner.run(("ls", "-1", path), timeout_s=SHORT_TIMEOUT_S)
        return sorted(line.strip() for line in result.stdout.splitlines() if line.strip()) if result.ok else []

    def ports(self) -> IbPorts:
        return ib_ports_sysfs(self.ctx) if self.local else ib_ports_ibstat(self.ctx)

    def counters(self, ports: list[IbPort]) -> dict[str, dict[str, int] | str]:
        """Port name -> its error counters, or why they could not be read."""

        out: dict[str, dict[str, int] | str] = {}
        if self.local:
            try:
                found = {p.name: p.counters for p in ib_counters_sysfs(self.ctx).ports}
            except ProbeError as exc:
                return {p.name: exc.message for p in ports}
            for p in ports:
                counters = {k: v for k, v in found.get(p.name, {}).items() if k in ERROR_COUNTERS}
                out[p.name] = counters or f"no error counter readable in {SYSFS_IB}/{p.ca}/ports/{p.port}/counters"
            return out
        for p in ports:
            try:
                got = sysfs_counters_over_shell(self.ctx, p.ca, p.port, "").counters
            except ProbeError as exc:
                out[p.name] = exc.message
                continue
            counters = {k: v for k, v in got.items() if k in ERROR_COUNTERS}
            out[p.name] = counters or f"no error counter readable in {SYSFS_IB}/{p.ca}/ports/{p.port}/counters"
        return out


@dataclass
class PortPlan:
    """How one port is tested: its fact so far and both command lines."""

    hca: IbWriteBwHca
    size: int = 0  # bytes (-s): the row judged
    server: tuple[str, ...] = ()
    client: tuple[str, ...] = ()
    attempts: list[IbWriteBwAttempt] = field(default_factory=list)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _where_hc_looked(ctx: ProbeContext, local: bool) -> str:
    if not local:
        return "the PATH of an SSH session on the node"
    env = getattr(ctx.runner, "env", None)
    path = (env if env is not None else os.environ).get("PATH", "")
    return f"$PATH ({path})"


def missing_tools(ctx: ProbeContext, local: bool) -> str | None:
    """Why ib_write_bw cannot be started, or None (any exit of `--version` will do)."""
    result = ctx.runner.run((TOOL, "--version"), timeout_s=SHORT_TIMEOUT_S)
    if result.not_found:
        return (f"{TOOL} (perftest) not found in {_where_hc_looked(ctx, local)}: install perftest "
                "(the perftest package, or MLNX_OFED/DOCA) on the node")
    if result.error:
        return f"{TOOL} could not be started: {result.error}"
    return None


def _pin(ctx: ProbeContext, numa: int | None, env: Mapping[str, str], cache: dict[int, str | None]
         ) -> tuple[tuple[str, ...], str | None]:
    """The numactl prefix for NUMA node `numa`, or () and why the port runs unpinned."""
    if numa is None:
        return (), "unpinned: the HCA's NUMA node is unknown (device/numa_node is -1 or unreadable)"
    prefix = ("numactl", "-N", str(numa), "-m", str(numa))
    if numa not in cache:
        extra: dict[str, Any] = {"env": dict(env)} if env else {}
        result = ctx.runner.run((*prefix, "true"), timeout_s=SHORT_TIMEOUT_S, **extra)
        if result.not_found:
            cache[numa] = "unpinned: numactl not found"
        elif not result.ok:
            said = (result.stderr or result.stdout or result.error or "").strip().splitlines()
            cache[numa] = f"unpinned: `{' '.join(prefix)} true` failed" + (f": {said[-1][:200]}" if said else "")
        else:
            cache[numa] = None
    why = cache[numa]
    return ((), why) if why else (prefix, None)


def _gpus(node: HcaNode) -> list[int | None]:
    """The NUMA node of each GPU the driver bound, in CUDA's PCI_BUS_ID order (None: unknown)."""
    ids = sorted(node.listdir(NVIDIA_GPUS), key=str.lower)
    out = []
    for bus_id in ids:
        numa = _int(node.read(f"{PCI_DEVICES}/{bus_id.lower()}/numa_node"))
        out.append(numa if numa is not None and numa >= 0 else None)
    return out


def _argv(settings: Any, device: str, port: int, tcp_port: int, size: int, gpu: int | None) -> tuple[str, ...]:
    argv = [TOOL, "-d", device, "-i", str(port), "-p", str(tcp_port), "-F", "--report_gbits",
            "-s", str(size), "-n", str(settings.iters)]
    if settings.qps != 1:
        argv += ["-q", str(settings.qps)]
    if settings.bidirectional:
        argv.append("-b")
    if settings.gid_index is not None:
        argv += ["-x", str(settings.gid_index)]
    if gpu is not None:
        argv.append(f"--use_cuda={gpu}")
    return tuple(argv)


def port_plans(ctx: ProbeContext, node: HcaNode, ports: list[IbPort], size: int, env: Mapping[str, str]
               ) -> list[PortPlan]:
    """Each port's plan: its fact so far (a port that cannot run says why) and both command lines."""
    settings = ctx.limits.bandwidth.ib_write_bw
    gpus = _gpus(node) if settings.use_cuda else []
    on_node: dict[int, list[int]] = {}  # NUMA node -> its GPUs' indices
    for index, numa in enumerate(gpus):
        if numa is not None:
            on_node.setdefault(numa, []).append(index)
    taken: dict[int, int] = {}  # NUMA node -> HCAs given one of its GPUs so far
    pins: dict[int, str | None] = {}
    plans = []
    for index, p in enumerate(ports):
        notes: list[str] = []
        numa = _int(node.read(f"{SYSFS_IB}/{p.ca}/device/numa_node"))
        numa = numa if numa is not None and numa >= 0 else None
        floor, setting = loopback_floor(settings.per_hca_min_gbps, settings.rate_fraction, settings.bidirectional,
                                        p.rate_gbps)
        tcp_port = settings.port_base + index
        hca = IbWriteBwHca(device=p.ca, port=p.port, tcp_port=tcp_port, rate_gbps=p.rate_gbps,
                           link_layer=p.link_layer, numa_node=numa, floor_gbps=floor, floor_setting=setting)
        if tcp_port > 65535:
            plans.append(PortPlan(msgspec.structs.replace(hca, not_run=(
                f"no side-channel port for it: bandwidth.ib_write_bw.port_base {settings.port_base} + {index} "
                "is above 65535"))))
            continue
        gpu = None
        if settings.use_cuda:
            if not gpus:
                plans.append(PortPlan(msgspec.structs.replace(hca, not_run=(
                    f"bandwidth.ib_write_bw.use_cuda is set but the NVIDIA driver lists no GPU ({NVIDIA_GPUS})"))))
                continue
            if numa is not None and on_node.get(numa):
                k = taken.get(numa, 0)
                taken[numa] = k + 1
                gpu = on_node[numa][k % len(on_node[numa])]
            else:
                gpu = index % len(gpus)
                where = "unknown" if numa is None else f"{numa}, and no GPU is known to be on it"
                notes.append(f"GPU {gpu} chosen by the HCA's index (its NUMA node is {where})")
        prefix, unpinned = _pin(ctx, numa, env, pins)
        if unpinned:
            notes.append(unpinned)
        server = (*prefix, *_argv(settings, p.ca, p.port, tcp_port, size, gpu))
        hca = msgspec.structs.replace(hca, pinned=bool(prefix), gpu=gpu, notes=tuple(notes))
        plans.append(PortPlan(hca, size, server, (*server, HOST)))
    return plans


def read_perftest_output(text: str) -> tuple[PerftestRun | None, str | None]:
    """(the run, None), or (None, why it says nothing hc can judge) for what one side printed."""
    if not text.strip():
        return None, None
    try:
        run = parse_perftest(text)
    except ParseError as exc:
        return None, str(exc)
    if run.incomplete:  # `hc parse` reads a box alone; a run hc started needs its title, rows or error
        return None, f"perftest: {run.incomplete}"
    return run, None


def _text(result: CommandResult) -> str:
    return result.stdout + ("\n" + result.stderr if result.stderr else "")


def _refused(result: CommandResult) -> bool:
    """perftest's client found no server listening: "Couldn't connect to HOST:PORT", no result."""
    if result.timed_out or "Couldn't connect to " not in result.stdout + result.stderr:
        return False
    run, _ = read_perftest_output(_text(result))
    return run is not None and not run.rows and any(f.kind is PerftestFailureKind.CONNECT for f in run.failures)


def _side(name: str, result: CommandResult | None, argv: tuple[str, ...], extra: str = "") -> str:
    if result is None:
        return f"--- {name}{extra}: $ {' '.join(argv)}  (did not return)\n"
    ended = "killed at its timeout" if result.timed_out else f"exit {result.returncode}"
    if result.not_found or result.error:
        ended = result.error or "not found"
    text = _text(result).strip("\n")
    cut = "...\n" if len(text) > TAIL else ""
    return f"--- {name}{extra}: $ {' '.join(argv)}  ({ended})\n{cut}{text[-TAIL:]}\n"


def run_attempt(ctx: ProbeContext, plan: PortPlan, env: Mapping[str, str], timeout_s: float,
                cut: bool, *, client_runner: Runner | None = None, stop_server: Callable[[], None] | None = None,
                names: tuple[str, str] = ("server", "client")) -> IbWriteBwAttempt:
    """One server and its client; the client is started again while the server is not listening yet.

    Between two nodes (orchestrate/pairsweep/tools.py) the server runs through ctx.runner and the
    client through `client_runner`, and `stop_server` ends a server still running
    SERVER_GRACE_S after its client finished (none came: it would wait for its timeout);
    `names` label each side in the evidence.
    """
    extra: dict[str, Any] = {"env": dict(env)} if env else {}
    run_client = (client_runner or ctx.runner).run
    box: dict[str, CommandResult] = {}

    def serve() -> None:
        box["server"] = ctx.runner.run(plan.server, timeout_s=timeout_s, **extra)

    start = time.monotonic()
    end = start + timeout_s
    server = threading.Thread(target=serve, name=f"hc-ib_write_bw-server-{plan.hca.name}", daemon=True)
    server.start()
    tries, sleep = 0, FIRST_SLEEP_S
    while True:
        tries += 1
        client = run_client(plan.client, timeout_s=max(end - time.monotonic(), 0.5), **extra)
        if not _refused(client) or not server.is_alive():
            break
        now = time.monotonic()
        if now + sleep - start > CONNECT_WINDOW_S or now + sleep >= end - 1.0:
            break
        time.sleep(sleep)
        sleep = min(sleep * 2, MAX_SLEEP_S)
    if stop_server is not None:
        server.join(min(SERVER_GRACE_S, max(end - time.monotonic(), 0.0)))
        if server.is_alive():
            stop_server()
    server.join(max(end - time.monotonic(), 0.0) + MARGIN_S)
    served = box.get("server")
    duration = time.monotonic() - start

    size = plan.size
    client_run, client_unparsable = read_perftest_output(_text(client))
    server_run, _ = read_perftest_output(_text(served)) if served is not None else (None, None)
    rows = client_run.rows_at(size) if client_run is not None else ()
    if not rows and server_run is not None:
        rows = server_run.rows_at(size)
    avg = sum(r.bw_avg_gbits for r in rows) / len(rows) if rows else None
    failures: dict[PerftestFailure, None] = {}
    # the client's errors first (it measures), unless it only found no server: then the server's say why
    refused = _refused(client)
    for run in ((server_run, client_run) if refused else (client_run, server_run)):
        if run is not None:
            failures.update(dict.fromkeys(run.failures))
    unreadable = None
    if not rows and not failures and not client.timed_out:
        if client_unparsable:
            unreadable = f"{TOOL} printed nothing hc understands ({client_unparsable})"
        elif not _text(client).strip():
            unreadable = f"the client printed nothing (exit {client.returncode})"
    tail = (_side(names[0], served, plan.server)
            + _side(names[1], client, plan.client, f" (start {tries})" if tries > 1 else ""))
    return IbWriteBwAttempt(
        server_argv=plan.server, client_argv=plan.client, env=dict(env), rows=rows,
        avg_gbits=round(avg, 6) if avg is not None else None, failures=tuple(failures),
        client_returncode=client.returncode, server_returncode=served.returncode if served else None,
        hung=client.timed_out and not cut, cut_short=client.timed_out and cut,
        server_timed_out=served is None or served.timed_out, connect_tries=tries, duration_s=round(duration, 3),
        unreadable=unreadable, output_tail=tail)


def _short(attempt: IbWriteBwAttempt, floor: float | None) -> bool:
    """Whether running again could change the verdict: a plain shortfall, nothing else."""
    if attempt.failures or attempt.hung or attempt.cut_short or attempt.unreadable:
        return False
    return floor is not None and attempt.avg_gbits is not None and attempt.avg_gbits < floor


def _run_port(ctx: ProbeContext, plan: PortPlan, env: Mapping[str, str], deadline: float,
              slots: threading.Semaphore) -> None:
    bw = ctx.limits.bandwidth
    with slots:
        for _ in range(bw.repeats):
            left = deadline - time.monotonic()
            if left < 1 and plan.attempts:
                break
            timeout = min(bw.ib_write_bw.timeout_s, max(left, 1.0))
            attempt = run_attempt(ctx, plan, env, timeout, cut=timeout < bw.ib_write_bw.timeout_s)
            plan.attempts.append(attempt)
            if not _short(attempt, plan.hca.floor_gbps):
                break


def counter_rises_of(before: dict[str, int] | str | None, after: dict[str, int] | str | None
                     ) -> tuple[dict[str, int], str | None]:
    """How much each error counter rose between two reads, or why that cannot be told."""
    if isinstance(before, str) or before is None:
        return {}, f"before the test: {before or 'not read'}"
    if isinstance(after, str) or after is None:
        return {}, f"after the test: {after or 'not read'}"
    # a counter that went down was reset (or wrapped) meanwhile: no rise to tell
    return {k: after[k] - v for k, v in sorted(before.items()) if k in after and after[k] > v}, None


def _loopback(ctx: ProbeContext, local: bool) -> IbWriteBwLoopback:
    settings = ctx.limits.bandwidth.ib_write_bw
    size = parse_size(settings.size)
    fact = IbWriteBwLoopback(size_bytes=size, bidirectional=settings.bidirectional, use_cuda=settings.use_cuda)
    if not settings.enabled:
        return fact
    deadline = time.monotonic() + ctx.timeout_s - MARGIN_S
    node = HcaNode(ctx, local)
    found = node.ports()
    compute = [p for p in found.ports if is_compute_port(p, ctx.limits.ib)]
    active = sorted((p for p in compute if p.state == "Active"), key=lambda p: (p.ca, p.port))
    skipped = tuple(f"{p.name}: {p.state}/{p.phys_state}" for p in compute if p.state != "Active")
    skipped += tuple(f"unreadable: {e}" for e in found.errors)
    fact = msgspec.structs.replace(fact, skipped=skipped)
    if not active:
        return fact
    missing = missing_tools(ctx, local)
    if missing:
        return msgspec.structs.replace(fact, missing=missing)
    env = {**({"CUDA_DEVICE_ORDER": "PCI_BUS_ID"} if settings.use_cuda else {}), **settings.env}
    plans = port_plans(ctx, node, active, size, env)
    before = node.counters(active)
    slots = threading.Semaphore(len(plans) if local else _ssh_ports_at_once())
    threads = []
    for plan in plans:
        if plan.hca.not_run is None:
            t = threading.Thread(target=_run_port, args=(ctx, plan, env, deadline, slots),
                                 name=f"hc-ib_write_bw-{plan.hca.name}", daemon=True)
            t.start()
            threads.append(t)
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0.0) + MARGIN_S)
    after = node.counters(active)
    hcas = []
    for plan in plans:
        rises, unknown = counter_rises_of(before.get(plan.hca.name), after.get(plan.hca.name))
        hcas.append(msgspec.structs.replace(plan.hca, attempts=tuple(plan.attempts), counter_rises=rises,
                                            counters_unknown=unknown))
    return msgspec.structs.replace(fact, hcas=tuple(hcas))


def _ssh_ports_at_once() -> int:
    """Ports tested at once over one SSH connection: a server and its client take a session each."""

    return max(1, MAX_SESSIONS // 2)


@provides("ib_write_bw_loopback", "ssh", exclusive=True)
def ib_write_bw_loopback_over_ssh(ctx: ProbeContext) -> IbWriteBwLoopback:
    """Agentless: the same loopback, every file read and command run through the SSH runner."""
    return _loopback(ctx, local=False)


@provides("ib_write_bw_loopback", exclusive=True)
def ib_write_bw_loopback(ctx: ProbeContext) -> IbWriteBwLoopback:
    """ib_write_bw loopback on every Active compute HCA port of this node, all at once."""
    return _loopback(ctx, local=True)
