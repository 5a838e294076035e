"""The tool-based bandwidth tests between two nodes of a deep sweep, as building blocks:
2-node nccl-tests under Open MPI (`NCCL_ALGO=RING` by default) and ib_write_bw from HCA i
of one node to HCA i of the other. Each runs one test between the given members and
returns a `PairMeasurement`; neither ever raises: what went wrong is a result whose `why`
is one line naming the member (or the members, where the tool cannot tell which).

nccl-tests (`nccl_tests_pair`): `mpirun -np <members x gpus> --host a:G,b:G --map-by
ppr:G:node --bind-to none -x ... <bin_dir>/<collective>_perf -g 1 -b MIN -e MAX -f F -w W
-n N -c 1`: one rank per GPU, as nccl-tests' multi-node docs run it, ranks 0..G-1 on the
first member. The variables are `bandwidth.nccl_tests.env` then `bandwidth.pairs.nccl_env`
(CUDA_DEVICE_ORDER=PCI_BUS_ID first, as on one node), handed on with `-x`. The output of
every rank is read (rank 0 prints the table; the rank that fails prints the failure) with
the node-local reader (`probes.bw.nccl_attempt_from_text`). Open MPI reaches the members
its own way (ssh, or Slurm inside an allocation; its MCA settings come from hc's
environment, e.g. OMPI_MCA_btl_tcp_if_include); its ssh gets hc's view of the nodes
(`--mca plm_rsh_args`, runners/ompi.py) unless the site set plm_rsh_agent/args itself.

ib_write_bw (`ib_write_bw_pair`): over SSH, the compute HCA ports Active on both members
(selected as on one node: the fabric's ib.hcas, hca_types, link_layer; matched by device
and port name) are tested at once, port i on `port_base + i`: a server on members[0], a
client on members[1] connecting to members[0]'s address (the host name SSH connects to),
each side NUMA-pinned and, with use_cuda, on a GPU of its HCA's NUMA node, as on one node
(probes/ib_write_bw.py builds both command lines and runs the attempt, the client started
again while the server is not listening yet). Each server writes its pid to a file under
/tmp first; a server still running after its client is done (no client came) is killed
by that pid, and every such file is removed at the end. Both sides run under timeouts
(the fabric's `timeout_s`, within the test's). The floor of a port is
`per_hca_min_gbps`, or `rate_fraction` x the slower of the two ports' rates (x2
bidirectional), the node-local rule. Each tested port's error counters are read on both
members before and after (sysfs over SSH, as on one node): a counter that rose by more
than the fabric's `bandwidth.counters_max_rise` allows on either member makes the port
"failed" (evidence against the pair's link), naming the member, port, counter and rise;
counters that could not be read are noted (`counters_unknown`), never a failure.

One call is one measurement: running a short test again (`bandwidth.repeats`) is the
sweep's, as for the torch test. Both use members[0]'s fabric for the pair, as the torch
pair test does.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from healthcheck.bandwidth.judge import best_at, floors, size_range
from healthcheck.core.facts import ProbeContext, ProbeError
from healthcheck.core.inputs import middle_cut
from healthcheck.core.units import format_size, parse_size
from healthcheck.parsers.bandwidth_common import BandwidthSample
from healthcheck.parsers.perftest import loopback_floor
from healthcheck.probes.bw import TAIL, nccl_attempt_from_text, nccl_binary
from healthcheck.probes.ib_write_bw import (
    MARGIN_S,
    SHORT_TIMEOUT_S,
    HcaNode,
    PortPlan,
    counter_rises_of,
    is_compute_port,
    missing_tools,
    port_plans,
    run_attempt,
)
from healthcheck.runners.launch import launch, mpirun_launch
from healthcheck.runners.ompi import site_args
from healthcheck.runners.ssh import MAX_SESSIONS, SshConnection, SshError, resolve_target

if TYPE_CHECKING:
    from healthcheck.core.config import Config
    from healthcheck.parsers.bandwidth_common import BandwidthAttempt
    from healthcheck.parsers.perftest import IbWriteBwAttempt, IbWriteBwHca
    from healthcheck.runners.launch import LaunchResult

Tool = Literal["nccl_tests", "ib_write_bw"]  # bandwidth.pairs.tests' names
# what became of a test (or of one HCA port of an ib_write_bw test):
#   passed          measured, at or above its floor (or, with no floor set, clean: the sweep compares peers)
#   short           measured, below its floor                                   -- evidence
#   hung            started, then stopped at hc's timeout                       -- evidence
#   wrong           nccl-tests counted wrong or out-of-bounds elements          -- evidence
#   failed          the tool's own failure: NCCL/CUDA error, a rank killed, an HCA failure
#                   (QP to RTR, completion error, ...)                          -- evidence
#   misconfigured   ran, but says nothing about the nodes: lone ranks, a wrong rank count,
#                   output hc cannot read, a floor size never measured, no floor to judge by
#   not-run         could not run: a member unreachable, a tool missing, the launcher refusing (or
#                   starting no rank before the timeout), the side channel refused, the test's time spent
#   not-applicable  nothing to test: no GPU (nccl-tests), no compute HCA on either (ib_write_bw)
ToolOutcome = Literal["passed", "short", "hung", "wrong", "failed", "misconfigured", "not-run", "not-applicable"]
PASSED: dict[str, bool | None] = {"passed": True, "short": False, "hung": False, "wrong": False, "failed": False,
                                  "misconfigured": None, "not-run": None, "not-applicable": None}
# the outcome of a pair tested on several HCA ports: the first of these any port had
_WORST_FIRST: tuple[ToolOutcome, ...] = ("hung", "failed", "wrong", "short", "misconfigured", "not-run", "passed",
                                     "not-applicable")
EVIDENCE_MAX = 8000  # characters of evidence kept per measurement
_WHY_MAX = 500  # a why is one line, at most this long
_SAID = 300  # characters of the last line a launcher or rank said, in a why
_PID_DIR = "/tmp"  # where each ib_write_bw server hc starts writes its pid file (on members[0])
_MPI_TAG = "<stdout>:", "<stderr>:", "<stddiag>:"  # mpirun --tag-output's labels: a line with one is a rank's
# Open MPI 4's first line where the program is not on the node (a name on PATH; a path it cannot execute)
_NOT_FOUND = ("unable to find the specified executable", "as it could not access")


class HcaSample(msgspec.Struct, frozen=True, omit_defaults=True):
    """One HCA port tested between the two members of an ib_write_bw pair test."""

    hca: str  # "mlx5_0/1": the device and port, the same name on both members
    gbits: float | None = None  # BW average at the size run (Gb/s); None: no result
    floor_gbps: float | None = None  # its floor; None: the port's rate is unknown and no per_hca_min_gbps is set
    outcome: ToolOutcome = "passed"
    failure: str | None = None  # why it did not pass, one line naming the member where the tool tells which
    # member node -> error counter -> how much it rose during the test (members and counters that rose only)
    counter_rises: dict[str, dict[str, int]] = {}
    counters_unknown: str | None = None  # why the counters of a member were not read before or after

    @property
    def ratio(self) -> float | None:
        """Gb/s over the floor (1.0: at the floor), where both are known."""
        if self.gbits is None or not self.floor_gbps:
            return None
        return self.gbits / self.floor_gbps


class PairMeasurement(msgspec.Struct, frozen=True, omit_defaults=True):
    """One tool-based test between nodes, for the sweep to turn into a pair result.

    value (compared by the sweep, in `unit`):
      nccl_tests   the best busbw (GB/s, either placement) at the judged size: the largest
                   size the fabric sets a pair floor for (bandwidth.<collective>.pair), else
                   the largest size asked for; `threshold` is that floor (None: none set).
      ib_write_bw  the lowest ratio of a port's Gb/s to its floor (1.0 = at the floor) over
                   the ports measured; `threshold` is 1.0. Each port's Gb/s is in `hcas`.
    passed: True (outcome passed: a clean run at or above its floor, or with no floor set,
    in which case `value` is for the sweep's comparison with peers), False (evidence
    against the pair: short, hung, wrong, failed), None (could not judge: misconfigured,
    not-run, not-applicable).
    """

    tool: Tool
    members: tuple[str, ...]
    outcome: ToolOutcome
    passed: bool | None = None
    value: float | None = None
    unit: str = ""  # "GB/s" (busbw) | "x floor"
    threshold: float | None = None  # what value was judged against
    limit_key: str = ""  # the fabric key that set the threshold
    kind: str = ""  # what was measured: "all_reduce 1G", "ib_write_bw 8M"
    samples: tuple[BandwidthSample, ...] = ()  # nccl_tests: every size and placement measured
    hcas: tuple[HcaSample, ...] = ()  # ib_write_bw: every port tested (or that could not be)
    hung: bool = False  # stopped at hc's timeout (nccl-tests: last_size_bytes is where)
    last_size_bytes: int | None = None  # nccl_tests: the last size it printed a row for
    why: str = ""  # one line, naming the member(s); empty when it passed
    notes: tuple[str, ...] = ()  # how it ran where that is worth knowing (ports tested on one member only, ...)
    argv: tuple[str, ...] = ()  # nccl_tests: mpirun's command line (ib_write_bw: each side's is in the evidence)
    env: dict[str, str] = {}  # the variables hc set for it
    duration_s: float = 0.0
    evidence: str = ""  # the end of what the tools printed, at most EVIDENCE_MAX characters


def _measurement(tool: Tool, members: Sequence[str], outcome: ToolOutcome, why: str = "", **fields: Any
                 ) -> PairMeasurement:
    evidence = fields.pop("evidence", "")
    return PairMeasurement(tool=tool, members=tuple(members), outcome=outcome, passed=PASSED[outcome],
                           why=_one_line(why), evidence=evidence[-EVIDENCE_MAX:], **fields)


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _WHY_MAX else line[:_WHY_MAX - 3] + "..."


def _who(members: Sequence[str]) -> str:
    return ",".join(members)


# ------------------------------------------------------------------------------ nccl-tests


def nccl_tests_pair(config: Config, members: Sequence[str], *, collective: str, sizes: Sequence[int | str],
                    gpus: int, timeout_s: float) -> PairMeasurement:
    """`<collective>_perf` across the members under mpirun, one rank per GPU (`gpus` on each);
    `sizes` (bytes or "1G") and the fabric's pair floors set -b/-e/-f. Never raises."""
    members = tuple(members)
    start = time.monotonic()
    try:
        return _nccl_tests_pair(config, members, collective, sizes, gpus, timeout_s)
    except Exception as exc:  # one test's surprise is this test's result, not the sweep's end
        return _measurement("nccl_tests", members, "not-run", f"{_who(members)}: nccl-tests: "
                            f"{type(exc).__name__}: {exc}", duration_s=round(time.monotonic() - start, 3))


def _nccl_tests_pair(config: Config, members: tuple[str, ...], collective: str, sizes: Sequence[int | str],
                     gpus: int, timeout_s: float) -> PairMeasurement:

    who = _who(members)
    if gpus <= 0:
        return _measurement("nccl_tests", members, "not-applicable", f"{who}: no GPU to run nccl-tests on")
    bw = config.for_node(members[0]).limits.bandwidth
    settings = bw.nccl_tests
    if not settings.enabled:
        return _measurement("nccl_tests", members, "not-applicable",
                            f"{who}: nccl-tests is disabled in the fabric (bandwidth.nccl_tests.enabled)")
    wanted = floors(bw, collective, "pair")
    asked = [parse_size(s) if isinstance(s, str) else int(s) for s in sizes]
    lo, hi, factor = size_range(asked + [f.size_bytes for f in wanted])
    judged = wanted[-1].size_bytes if wanted else max(asked or [hi])
    floor = next((f for f in wanted if f.size_bytes == judged), None)
    program = (nccl_binary(settings.bin_dir, collective), "-g", "1", "-b", str(lo), "-e", str(hi), "-f", str(factor),
               "-w", str(settings.warmup), "-n", str(settings.iters), "-c", "1")
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", **settings.env, **bw.pairs.nccl_env}
    ranks = len(members) * gpus
    # ranks 0..gpus-1 on members[0] and so on; unbound, so NCCL picks the cores near each GPU
    spec = mpirun_launch(program, np=ranks, hosts=[f"{m}:{gpus}" for m in members],
                         allow_run_as_root=os.geteuid() == 0,
                         extra=(*site_args(config.main.ssh, os.environ), "--map-by", f"ppr:{gpus}:node",
                                "--bind-to", "none"), env=env)
    result = launch(spec, timeout_s=min(timeout_s, settings.timeout_s))
    common: dict[str, Any] = dict(tool="nccl_tests", members=members, kind=f"{collective} {format_size(judged)}",
                                  argv=spec.argv, env=env, duration_s=round(result.duration_s, 3),
                                  unit="GB/s", threshold=floor.gbytes_per_s if floor else None,
                                  limit_key=floor.key if floor else "")
    if result.not_found:
        return _measurement(outcome="not-run", why=f"{who}: {spec.argv[0]} not found on this machine "
                            "(Open MPI runs nccl-tests between nodes)", **common)
    if result.error:
        return _measurement(outcome="not-run", why=f"{who}: {result.error}", **common)
    text = _all_ranks(result)
    attempt = nccl_attempt_from_text(text, collective, argv=spec.argv, env=env, expected_ranks=ranks,
                                     duration_s=round(result.duration_s, 3), returncode=result.returncode,
                                     hung=result.timed_out, output_tail=text[-TAIL:])
    common["evidence"] = _nccl_evidence(result, env, text)
    common["samples"] = tuple(s for s in attempt.samples if s.collective == collective)
    common["last_size_bytes"] = attempt.last_size_bytes
    common["value"] = best_at(attempt.samples, collective, judged)
    outcome, why = _nccl_outcome(result, attempt, members, gpus, collective, settings.bin_dir)
    if outcome is None:  # a clean run: judged at its size
        value = common["value"]
        if value is None:
            outcome, why = "misconfigured", f"{who}: {collective}_perf never measured {format_size(judged)}"
        elif floor is not None and value < floor.gbytes_per_s:
            outcome, why = "short", (f"{who}: {collective} busbw {value:g} GB/s at {format_size(judged)}, "
                                     f"below the pair floor {floor.gbytes_per_s:g} ({floor.key})")
        else:
            outcome = "passed"
    return _measurement(outcome=outcome, why=why, hung=outcome == "hung", **common)


def _all_ranks(result: LaunchResult) -> str:
    """Every rank's output, rank 0 first (it prints the table; a failing rank prints its own
    failure), then mpirun's own lines (its banners: slots, daemons, a rank killed)."""
    parts = [*result.ranks.get(0, [])]
    for rank in sorted(set(result.ranks) | set(result.rank_stderr)):
        parts += ([] if rank == 0 else result.ranks.get(rank, [])) + result.rank_stderr.get(rank, [])
    own = [line for line in (result.stdout + "\n" + result.stderr).splitlines()
           if not any(tag in line for tag in _MPI_TAG)]
    return "\n".join(parts + own)


def _nccl_outcome(result: LaunchResult, attempt: BandwidthAttempt, members: tuple[str, ...], gpus: int,
                  collective: str, bin_dir: str | None) -> tuple[ToolOutcome | None, str]:
    """How a run ended, in the node-local check's order; (None, "") for a clean run."""

    who = _who(members)
    program = f"{collective}_perf"
    if attempt.hung:
        if not result.ranks.get(0):  # no rank had started: mpirun itself never got going
            said = _said(result.stderr.splitlines() + result.stdout.splitlines(), members)
            return "not-run", (f"{who}: mpirun started no rank within {attempt.duration_s:g}s"
                               + (f": {said}" if said else ""))
        reached = format_size(attempt.last_size_bytes) if attempt.last_size_bytes else "no size"
        return "hung", f"{who}: {program} hung: stopped after {attempt.duration_s:g}s, last size reached: {reached}"
    if attempt.failures:
        return "failed", f"{who}: {program} failed: {attempt.failures[0]}"
    if attempt.misconfigured:
        said = _said(result.stderr.splitlines(), members)
        if any(m in attempt.misconfigured for m in _NOT_FOUND):
            node = _mpi_node(result.stderr + "\n" + result.stdout) or who
            return "not-run", (f"{node}: {program} (nccl-tests) not found in "
                               f"{bin_dir or 'the PATH of the ranks mpirun starts there'}; set "
                               "bandwidth.nccl_tests.bin_dir or install nccl-tests")
        if attempt.misconfigured.startswith("the launcher refused"):
            return "not-run", f"{who}: {attempt.misconfigured}" + (f" ({said})" if said and said not in
                                                                   attempt.misconfigured else "")
        return "misconfigured", f"{who}: {attempt.misconfigured}"
    bad = (attempt.wrong or 0) + (attempt.out_of_bounds or 0)
    if bad:
        return "wrong", f"{who}: {program}: {bad} wrong or out-of-bounds values"
    if attempt.returncode not in (0, None) and not attempt.samples:
        failed = [f"{members[r // gpus] if r // gpus < len(members) else '?'} (rank {r}) exited {c}"
                  for r, c in sorted(result.exit_codes.items()) if c != 0]
        said = _said(result.stderr.splitlines(), members)
        return "misconfigured", (f"{who}: mpirun exited {attempt.returncode} with no result"
                                 + (f": {'; '.join(failed[:3])}" if failed else "") + (f": {said}" if said else ""))
    return None, ""


def _mpi_node(text: str) -> str | None:
    """The `Node: X` an Open MPI banner names (where the executable was not found)."""
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and key.strip() == "Node" and value.strip():
            return value.strip()
    return None


def _said(lines: Iterable[str], members: Sequence[str]) -> str:
    """The last line naming a member, else the last line with a word in it; bounded."""
    words = [line.strip() for line in lines if any(c.isalnum() for c in line)]
    naming = [line for line in words if any(m in line for m in members)]
    return (naming or words or [""])[-1][-_SAID:]


def _nccl_evidence(result: LaunchResult, env: dict[str, str], text: str) -> str:
    variables = " ".join(f"{k}={v}" for k, v in sorted(env.items()))
    ended = "killed at hc's timeout" if result.timed_out else f"exit {result.returncode}"
    head = f"$ {variables + ' ' if variables else ''}{' '.join(result.argv)}  ({ended}, {result.duration_s:.1f}s)\n"
    return head + text[-(EVIDENCE_MAX - len(head)):]


# ------------------------------------------------------------------------------ ib_write_bw


def ib_write_bw_pair(config: Config, members: Sequence[str], *, timeout_s: float) -> PairMeasurement:
    """ib_write_bw from each compute HCA port of members[0] (server) to the same port of
    members[1] (client), every port at once over SSH. Never raises."""
    members = tuple(members)
    start = time.monotonic()
    try:
        if len(members) != 2:
            return _measurement("ib_write_bw", members, "not-run",
                                f"{_who(members)}: ib_write_bw pairs HCAs of exactly two nodes, not {len(members)}")
        return _ib_write_bw_pair(config, members, timeout_s)
    except Exception as exc:  # one test's surprise is this test's result, not the sweep's end
        return _measurement("ib_write_bw", members, "not-run", f"{_who(members)}: ib_write_bw: "
                            f"{type(exc).__name__}: {exc}", duration_s=round(time.monotonic() - start, 3))


class _Member:
    """One member over SSH: its connection, a probe context on it, its HCA ports."""

    def __init__(self, node: str, config: Config, limits: Any, timeout_s: float) -> None:
        self.node = node
        self.conn: SshConnection = SshConnection(node, config.main.ssh)  # SshError: a name it cannot take
        self.ctx = ProbeContext(runner=self.conn, transport="ssh", timeout_s=timeout_s, limits=limits)
        self.files = HcaNode(self.ctx, local=False)

    def close(self) -> None:
        self.conn.close()


def _ib_write_bw_pair(config: Config, members: tuple[str, ...], timeout_s: float) -> PairMeasurement:
    start = time.monotonic()
    deadline = start + timeout_s
    who = _who(members)
    limits = config.for_node(members[0]).limits
    settings = limits.bandwidth.ib_write_bw
    size = parse_size(settings.size)
    common: dict[str, Any] = dict(tool="ib_write_bw", members=members, kind=f"ib_write_bw {format_size(size)}",
                                  unit="x floor", threshold=1.0,
                                  limit_key=("bandwidth.ib_write_bw.per_hca_min_gbps"
                                             if settings.per_hca_min_gbps is not None
                                             else "bandwidth.ib_write_bw.rate_fraction"))

    def done(outcome: ToolOutcome, why: str = "", **fields: Any) -> PairMeasurement:
        return _measurement(outcome=outcome, why=why, duration_s=round(time.monotonic() - start, 3),
                            **{**common, **fields})

    if not settings.enabled:
        return done("not-applicable", f"{who}: ib_write_bw is disabled in the fabric (bandwidth.ib_write_bw.enabled)")
    sides: list[_Member] = []
    try:
        for node in members:
            try:
                side = _Member(node, config, limits, min(SHORT_TIMEOUT_S, timeout_s))
                sides.append(side)
                side.conn.connect()
            except SshError as exc:
                return done("not-run", f"{node}: {exc.message}")
        server, client = sides
        address = resolve_target(members[0], config.main.ssh).hostname
        active: list[dict[tuple[str, int], Any]] = []
        compute_any = False
        for side in sides:
            try:
                found = side.files.ports()
            except ProbeError as exc:
                return done("not-run", f"{side.node}: the HCA ports could not be listed: {exc.message}")
            compute = [p for p in found.ports if is_compute_port(p, limits.ib)]
            compute_any = compute_any or bool(compute)
            active.append({(p.ca, p.port): p for p in compute if p.state == "Active"})
        both = sorted(set(active[0]) & set(active[1]))
        notes = tuple(f"{side.node}: {ca}/{port} is Active here only, not tested"
                      for side, mine, theirs in ((server, active[0], active[1]), (client, active[1], active[0]))
                      for ca, port in sorted(set(mine) - set(theirs)))
        if not both:
            if not compute_any:
                return done("not-applicable", f"{who}: no compute HCA port on either member")
            return done("not-run", f"{who}: no compute HCA port is Active on both members", notes=notes)
        for side in sides:
            missing = missing_tools(side.ctx, local=False)
            if missing:
                return done("not-run", f"{side.node}: {missing}", notes=notes)
        tested = [[active[i][k] for k in both] for i in range(2)]
        before = [_counters(side, ports) for side, ports in zip(sides, tested, strict=True)]
        hcas, attempts, argv_env = _run_ports(server, client, address, both, active, size, settings, deadline)
        after = [_counters(side, ports) for side, ports in zip(sides, tested, strict=True)]
        max_rise = msgspec.structs.asdict(limits.bandwidth.counters_max_rise)
        samples = tuple(_with_counters(_hca_sample(h, attempts.get(h.name), settings.use_cuda, members),
                                       sides, before, after, max_rise) for h in hcas)
        if any(v is not None for v in max_rise.values()):  # a limit the unread counters leave unjudged
            notes += tuple(f"{s.hca}: error counters unknown, bandwidth.counters_max_rise not judged: "
                           f"{s.counters_unknown}" for s in samples if s.counters_unknown)
        return _ib_result(done, members, samples, hcas, attempts, notes, argv_env)
    finally:
        for side in sides:
            side.close()


def _run_ports(server: _Member, client: _Member, address: str, both: list[tuple[str, int]],
               active: list[dict[tuple[str, int], Any]], size: int, settings: Any, deadline: float
               ) -> tuple[list[IbWriteBwHca], dict[str, IbWriteBwAttempt], dict[str, str]]:
    """Every port at once: the server side's plan with the client side's command line
    (its own pinning and GPU) aimed at the server's address; servers hc started are
    stopped by pid once their client is done, and their pid files removed."""

    env = {**({"CUDA_DEVICE_ORDER": "PCI_BUS_ID"} if settings.use_cuda else {}), **settings.env}
    serving = port_plans(server.ctx, server.files, [active[0][k] for k in both], size, env)
    connecting = port_plans(client.ctx, client.files, [active[1][k] for k in both], size, env)
    token = uuid.uuid4().hex[:12]
    plans: list[tuple[PortPlan, str]] = []
    hcas: list[IbWriteBwHca] = []
    for mine, theirs in zip(serving, connecting, strict=True):
        rates = [r for r in (mine.hca.rate_gbps, theirs.hca.rate_gbps) if r]
        rate = min(rates) if rates else None
        floor, setting = loopback_floor(settings.per_hca_min_gbps, settings.rate_fraction, settings.bidirectional,
                                        rate)
        not_run = next((f"{side.node}: {p.hca.not_run}" for side, p in ((server, mine), (client, theirs))
                        if p.hca.not_run), None)
        notes = tuple(f"{side.node}: {n}" for side, p in ((server, mine), (client, theirs)) for n in p.hca.notes)
        hca = msgspec.structs.replace(mine.hca, rate_gbps=rate, floor_gbps=floor, floor_setting=setting, notes=notes,
                                      not_run=not_run)
        hcas.append(hca)
        if not_run:
            continue
        pid_file = f"{_PID_DIR}/hc-ib_write_bw-{token}-{hca.tcp_port}.pid"
        # the server's own pid, written before it execs into (numactl then) ib_write_bw
        wrapped = ("sh", "-c", 'echo $$ > "$0" && exec "$@"', pid_file, *mine.server)
        plans.append((PortPlan(hca, size, wrapped, (*theirs.server, address)), pid_file))
    attempts: dict[str, IbWriteBwAttempt] = {}
    # a server and the stop command take a session of members[0]'s connection, a client one of members[1]'s
    slots = threading.Semaphore(max(1, MAX_SESSIONS - 1))
    names = (f"server on {server.node}", f"client on {client.node}")

    def one(plan: Any, pid_file: str) -> None:
        with slots:
            left = deadline - time.monotonic() - MARGIN_S
            timeout = min(settings.timeout_s, max(left, 1.0))
            attempts[plan.hca.name] = run_attempt(
                server.ctx, plan, env, timeout, cut=timeout < settings.timeout_s, client_runner=client.conn,
                stop_server=lambda: _stop_servers(server, [pid_file]), names=names)

    threads = [threading.Thread(target=one, args=(plan, pid_file), name=f"hc-pair-ib_write_bw-{plan.hca.name}",
                                daemon=True) for plan, pid_file in plans]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join(max(deadline - time.monotonic(), 0.0) + MARGIN_S)
    finally:
        if plans:
            _stop_servers(server, [pid_file for _, pid_file in plans])
    return hcas, attempts, env


# kill each pid file's process if it still is an ib_write_bw (never another process that took the pid), remove the file
_STOP = ('for f in "$@"; do p=$(cat "$f" 2>/dev/null) && case "$(tr "\\000" " " < /proc/$p/cmdline 2>/dev/null)" '
         'in *ib_write_bw*) kill "$p" 2>/dev/null;; esac; rm -f "$f"; done; true')


def _stop_servers(side: _Member, pid_files: list[str]) -> None:
    """Stop the servers hc started on the node, by the pid each wrote; remove their pid files."""

    side.conn.run(("sh", "-c", _STOP, "hc-stop", *pid_files), timeout_s=SHORT_TIMEOUT_S)


def _hca_sample(hca: IbWriteBwHca, attempt: IbWriteBwAttempt | None, use_cuda: bool,
                members: tuple[str, ...]) -> HcaSample:
    """One port's outcome, in the node-local check's order (bw.ib_write_bw)."""
    floor = hca.floor_gbps

    def sample(outcome: ToolOutcome, failure: str | None = None) -> HcaSample:
        gbits = attempt.avg_gbits if attempt is not None else None
        return HcaSample(hca.name, gbits, floor, outcome, failure)

    if hca.not_run:
        return sample("not-run", hca.not_run)
    if attempt is None:
        return sample("not-run", f"{_who(members)}: no ib_write_bw attempt finished within the test's time")
    broke = attempt.hca_failures(use_cuda)
    if attempt.hung:
        return sample("hung", f"{_who(members)}: ib_write_bw hung: stopped after {attempt.duration_s:g}s")
    if broke:
        f = broke[0]
        return sample("failed", f"{_side_of(attempt, f.message, members)}: ib_write_bw failed: {f.message} ({f.kind})")
    if attempt.cut_short:
        return sample("not-run", f"{_who(members)}: ib_write_bw stopped after {attempt.duration_s:g}s, when the "
                      "test's time was spent (no sign of a hang)")
    if attempt.failures or attempt.unreadable or attempt.avg_gbits is None:
        if attempt.failures:
            f = attempt.failures[0]
            why = f"{_side_of(attempt, f.message, members)}: ib_write_bw could not run: {f.message} ({f.kind})"
            if attempt.connect_tries > 1:
                why += f", after {attempt.connect_tries} client starts"
        else:
            why = f"{_who(members)}: " + (attempt.unreadable or (
                f"no ib_write_bw result row (client exit {attempt.client_returncode}, server exit "
                f"{attempt.server_returncode})"))
        return sample("not-run", why)
    if floor is None:
        return sample("misconfigured", f"{_who(members)}: the ports' rate is unknown, so no floor: set "
                      "bandwidth.ib_write_bw.per_hca_min_gbps")
    if attempt.avg_gbits < floor:
        return sample("short", f"{_who(members)}: {attempt.avg_gbits:g} Gb/s, floor {floor:g} Gb/s "
                      f"({hca.floor_setting})")
    return sample("passed")


def _counters(side: _Member, ports: list[Any]) -> dict[str, dict[str, int] | str]:
    """The member's error counters of the ports (port name -> counters, or why not read); never raises."""
    try:
        return side.files.counters(ports)
    except Exception as exc:  # unreadable counters are a note, never the test's end
        return {p.name: f"{type(exc).__name__}: {exc}" for p in ports}


def _with_counters(sample: HcaSample, sides: list[_Member], before: list[dict[str, dict[str, int] | str]],
                   after: list[dict[str, dict[str, int] | str]], max_rise: dict[str, int | None]) -> HcaSample:
    """The port's counter rises on each member recorded; a rise above the fabric's
    bandwidth.counters_max_rise makes it "failed" (unless it already hung or failed)."""

    rises: dict[str, dict[str, int]] = {}
    unknown: list[str] = []
    over: list[str] = []
    for side, was, now in zip(sides, before, after, strict=True):
        rose, why = counter_rises_of(was.get(sample.hca), now.get(sample.hca))
        if why:
            unknown.append(f"{side.node}: {why}")
        if rose:
            rises[side.node] = rose
        for counter, rise in rose.items():
            most = max_rise.get(counter)
            if most is not None and rise > most:
                over.append(f"{side.node}: {sample.hca} {counter} rose by {rise} during the ib_write_bw test, "
                            f"more than {most} (bandwidth.counters_max_rise.{counter})")
    fields: dict[str, Any] = dict(counter_rises=rises, counters_unknown="; ".join(unknown) or None)
    if over and sample.outcome not in ("hung", "failed"):
        fields.update(outcome="failed", failure=_one_line("; ".join(over)))
    return msgspec.structs.replace(sample, **fields)


def _side_of(attempt: IbWriteBwAttempt, message: str, members: tuple[str, ...]) -> str:
    """The member whose side printed `message` (the evidence has the server's part, then the client's)."""
    tail = attempt.output_tail
    cut = tail.find(f"--- client on {members[1]}")
    server_part, client_part = (tail[:cut], tail[cut:]) if cut >= 0 else (tail, "")
    in_server, in_client = message in server_part, message in client_part
    if in_server and not in_client:
        return members[0]
    if in_client and not in_server:
        return members[1]
    return _who(members)


def _ib_result(done: Any, members: tuple[str, ...], samples: tuple[HcaSample, ...], hcas: list[IbWriteBwHca],
               attempts: dict[str, IbWriteBwAttempt], notes: tuple[str, ...], env: dict[str, str]
               ) -> PairMeasurement:
    outcome = next(o for o in _WORST_FIRST if any(s.outcome == o for s in samples))
    ratios = [r for r in (s.ratio for s in samples) if r is not None]
    value = round(min(ratios), 6) if ratios else None
    worst = [s for s in samples if s.outcome == outcome]
    why = ""
    if outcome != "passed":
        why = f"{worst[0].hca}: {worst[0].failure}" + (f" (and {len(worst) - 1} more ports)" if len(worst) > 1
                                                       else "")
    port_notes = tuple(f"{h.name}: {n}" for h in hcas for n in h.notes)
    # the evidence of the ports that did not pass first
    order = sorted(hcas, key=lambda h: next(s.outcome == "passed" for s in samples if s.hca == h.name))
    evidence = ""
    for h in order:
        a = attempts.get(h.name)
        if a is not None:
            piece = f"=== {h.name} (floor {h.floor_gbps} Gb/s)\n{a.output_tail}\n"
            evidence += middle_cut(piece, max(EVIDENCE_MAX // max(len(hcas), 1), 1500))
    return done(outcome, why, value=value, hcas=samples, hung=outcome == "hung", notes=notes + port_notes,
                evidence=evidence, env=env)

