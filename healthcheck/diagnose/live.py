"""Live collections -> evidence (`hc diagnose pids|job`).

`collect.collect_node` runs on each node and returns a `NodeCollection` (the rank
processes, their /proc state and py-spy stacks, the debug files each rank was told to
write, NCCL RAS); this module merges the nodes' collections into the `JobEvidence` the
classifier reads, the same structure `sources.py` fills from saved files:

* each rank process -> a RankEvidence: rank, host, pid, local rank, world size, the GPU
  from CUDA_VISIBLE_DEVICES, alive and its state (a stopped (T) rank is a stuck rank's
  evidence), the parsed py-spy stack, or why there is none with the fix (py-spy missing,
  ptrace refused);
* ranks the world size says exist that no node that answered holds are `missing` (a dead
  rank candidate, named); where a node did not answer they may be there, and are not;
* the debug files the ranks were given (NCCL_DEBUG_FILE, Flight Recorder dumps,
  torchelastic error files) are read where reachable, bounded (MAX_DEBUG_FILES files,
  MAX_DEBUG_BYTES each, MAX_DEBUG_TOTAL in all), and parsed through sources.read_data,
  exactly as `hc diagnose logs` parses them;
* RAS replies become RasReply; node errors (py-spy missing, a pid gone, no ranks) and nodes
  that did not answer are `unreadable` with why;
* each node's kernel events in the job's window (collect.KernelLog) become the evidence's
  kernel events (source `host: /dev/kmsg`), so the rules read them as they read a saved
  kernel log: an Xid -> gpu-failure, an OOM kill whose pid is a rank's -> dead-rank. A
  rank the OOM killer took is gone, so its pid is no live rank's: an OOM kill of a
  process the kernel puts in this job's memory cgroup, or of a Python process, is given
  to the rank missing from the job when exactly one is (its pid and host then those of
  the kill); an OOM kill the kernel puts in another job's cgroup, or one of an unknown
  process while no rank is missing, is not this job's evidence. A kernel log a node could
  not read is `unreadable` with why.

Also the Slurm side of `hc diagnose job`: `scontrol -o show job` parsed (`parse_job`), the
per-node collector command over `srun --overlap` (`srun_collect_argv`) and the debug file
fetch script (`fetch_argv` / `parse_fetched`). Running the commands is the caller's: this
layer takes callables, so it stays below the CLI and the Slurm client.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import datetime as _dt
import os
import re
import shlex
import stat
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import msgspec

from healthcheck.core import typed
from healthcheck.core.inputs import clip
from healthcheck.diagnose.evidence import JobEvidence, KernelEvent, Launcher, RasReply, Unreadable
from healthcheck.diagnose.nodeschema import KernelLine, NodeCollection, RankProcess
from healthcheck.diagnose.procs import PYTHON_NAME
from healthcheck.diagnose.sampling import SamplingSpec
from healthcheck.diagnose.sources import Collected, link_task_exits, read_data

MiB = 1024 * 1024
MAX_DEBUG_FILES = 256  # debug files read per job (the rest are listed as not read)
MAX_DEBUG_BYTES = 16 * MiB  # of one file (the first bytes: an NCCL log's init and first errors)
MAX_DEBUG_TOTAL = 256 * MiB  # in all
_STACK_ERRORS = ("py-spy-missing", "ptrace-denied", "py-spy-timeout", "py-spy-failed", "deadline")

# fetch a node's files in one command: a header line per file, then its bytes in base64
_FETCH_SCRIPT = ('n=$1; shift; for f in "$@"; do if [ -f "$f" ] && [ -r "$f" ]; then '
                 'printf "==hc-file== %s %s\\n" "$(wc -c < "$f" | tr -d " ")" "$f"; '
                 'head -c "$n" -- "$f" | base64 | tr -d "\\n"; echo; '
                 'elif [ -e "$f" ]; then printf "==hc-unreadable== %s\\n" "$f"; '
                 'else printf "==hc-missing== %s\\n" "$f"; fi; done')
# the same, keeping a file's LAST n bytes: a job's output has its failure at the end
_FETCH_TAIL_SCRIPT = _FETCH_SCRIPT.replace('head -c "$n"', 'tail -c "$n"')

FileFetcher = Callable[[str, list[str]], dict[str, "bytes | str"]]
"""(host, paths) -> {path: the file's first bytes, or why it could not be read}."""
OutputFetcher = Callable[[str, list[str]], dict[str, "bytes | str"]]
"""(host, paths) -> {path: the file's LAST bytes, or why}: a job's stdout/stderr."""
MAX_OUTPUT_BYTES = 8 * MiB  # of a job's stdout/stderr: its end, where a failure is
NO_SUCH_FILE = "no such file on the node"
MAX_RANK_OUTPUT_BYTES = 1 * MiB  # of one rank's own stdout/stderr file
MAX_RANK_OUTPUTS = 64  # rank output files read per job (their ends: 64 MiB at most)
FETCH_PARALLEL = 16  # nodes whose files are fetched at once


@dataclass
class NodeAnswer:
    """What one node gave: its collection, or why there is none (it did not answer).
    (Not the kernel's NodeResult, which is a node's checks: this is one helper's reply.)"""

    host: str
    collection: NodeCollection | None = None
    why: str = ""  # set when collection is None
    seconds: float | None = None


@dataclass
class DebugFile:
    host: str
    path: str
    rank: int | None
    kind: str  # "nccl-debug", "flight-recorder", "error-file"


@dataclass
class LiveResult:
    collected: Collected
    missing: list[int] = field(default_factory=list)  # ranks no node that answered holds
    files: list[DebugFile] = field(default_factory=list)


def gpu_of(r: RankProcess) -> str:
    """The GPU a rank uses as far as its environment says: CUDA_VISIBLE_DEVICES' entry for
    its local rank (torch's cuda:LOCAL_RANK), or the only one."""
    value = (r.cuda_visible_devices or "").strip()
    if not value:
        return ""
    devs = [d.strip() for d in value.split(",") if d.strip()]
    if len(devs) == 1:
        return f"GPU {devs[0]}"
    if r.local_rank is not None and 0 <= r.local_rank < len(devs):
        return f"GPU {devs[r.local_rank]} (CUDA_VISIBLE_DEVICES={clip(value, 60)}, local rank {r.local_rank})"
    return f"CUDA_VISIBLE_DEVICES={clip(value, 60)}"


def _stack_error(c: NodeCollection, r: RankProcess) -> str:
    for e in c.errors:
        if e.kind in _STACK_ERRORS and (e.pid == r.pid or (e.pid is None and e.kind == "py-spy-missing")):
            return e.message + (f"; fix: {e.fix}" if e.fix else "")
    if r.stack is None and c.py_spy is None:
        return "no stack: py-spy was not run on this node"
    return ""


def debug_files_of(c: NodeCollection) -> list[DebugFile]:
    out = []
    for r in c.ranks:
        d = r.debug_files
        for kind, path in (("nccl-debug", d.nccl_debug), ("flight-recorder", d.flight_recorder),
                           ("error-file", d.elastic_error)):
            if path:
                out.append(DebugFile(c.host, path, r.rank, kind))
    return out


def local_fetcher(host: str, paths: list[str], max_bytes: int = MAX_DEBUG_BYTES,
                  tail: bool = False) -> dict[str, bytes | str]:
    """Read files on this machine: regular files only, never blocking, the first max_bytes
    (the last ones with tail)."""
    out: dict[str, bytes | str] = {}
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            out[p] = NO_SUCH_FILE if isinstance(exc, FileNotFoundError) \
                else f"cannot read: {exc.strerror or exc}"
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                out[p] = "not a regular file"
                continue
            if tail and st.st_size > max_bytes:
                os.lseek(fd, st.st_size - max_bytes, os.SEEK_SET)
            chunks, left = [], max_bytes
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            out[p] = b"".join(chunks)
        except OSError as exc:
            out[p] = f"cannot read: {exc.strerror or exc}"
        finally:
            os.close(fd)
    return out


def fetch_hosts(fetch: FileFetcher, wanted: dict[str, list[str]]) -> dict[str, dict[str, bytes | str]]:
    """fetch(host, paths) on every host at once (FETCH_PARALLEL at most): a job's nodes
    answer in the time of the slowest, not of their sum (each is an srun step or an SSH
    command). A fetcher's failure is its node's, never the diagnosis's: each of that
    node's paths then says why."""

    def one(host: str) -> dict[str, bytes | str]:
        try:
            return fetch(host, wanted[host])
        except Exception as exc:
            return {p: f"fetch failed: {clip(str(exc) or type(exc).__name__, 200)}" for p in wanted[host]}

    if len(wanted) <= 1:
        return {host: one(host) for host in wanted}

    with ThreadPoolExecutor(max_workers=min(FETCH_PARALLEL, len(wanted)), thread_name_prefix="hc-fetch") as pool:
        return dict(zip(wanted, pool.map(one, wanted), strict=True))


def fetch_argv(paths: Sequence[str], max_bytes: int = MAX_DEBUG_BYTES, tail: bool = False) -> list[str]:
    """One shell command that prints every file's first max_bytes (last with tail), base64,
    with a header."""
    return ["sh", "-c", _FETCH_TAIL_SCRIPT if tail else _FETCH_SCRIPT, "hc-fetch", str(int(max_bytes)), *paths]


def parse_fetched(text: str, paths: Sequence[str]) -> dict[str, bytes | str]:
    """fetch_argv's output -> {path: bytes | why}; a path it never mentions: why."""
    out: dict[str, bytes | str] = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("==hc-missing== "):
            out[line[len("==hc-missing== "):]] = NO_SUCH_FILE
        elif line.startswith("==hc-unreadable== "):
            out[line[len("==hc-unreadable== "):]] = "not a readable regular file (permissions, or a directory)"
        elif line.startswith("==hc-file== "):
            _, size, path = line.split(" ", 2)
            body = lines[i + 1] if i + 1 < len(lines) else ""
            i += 1
            try:
                out[path] = base64.b64decode(body, validate=True)
            except (binascii.Error, ValueError):
                out[path] = "unreadable transfer (base64)"
        i += 1
    for p in paths:
        out.setdefault(p, "the node's answer did not include it (cut by the time or size limit?)")
    return out


def evidence_from_nodes(nodes: Iterable[NodeAnswer | NodeCollection], *, job: str,
                        fetch: FileFetcher | None = None, now: _dt.datetime | None = None,
                        max_files: int = MAX_DEBUG_FILES, max_total: int = MAX_DEBUG_TOTAL,
                        outputs: Sequence[tuple[str, str]] = (),
                        output_fetch: OutputFetcher | None = None,
                        rank_output_fetch: OutputFetcher | None = None) -> LiveResult:
    """Merge the nodes' collections into evidence (see the module's docstring). `fetch`
    reads a node's debug files (None: they are listed as not read); `outputs` are the job's
    own stdout/stderr as (host, path), read through `output_fetch` (their ends) and parsed
    as `hc diagnose logs` parses a saved job output: what a rank printed as it died (gloo's
    size mismatch, a Python traceback) is seen only there. `rank_output_fetch` reads each
    rank's own stdout/stderr file, where it has one (its last MAX_RANK_OUTPUT_BYTES)."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    results = [n if isinstance(n, NodeAnswer) else NodeAnswer(n.host, n) for n in nodes]
    ev = JobEvidence(job=job, collected_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    col = Collected(evidence=ev)
    silent: list[str] = []
    unranked: list[tuple[NodeCollection, RankProcess]] = []
    files: list[DebugFile] = []
    for n in results:
        c = n.collection
        if c is None:
            silent.append(n.host)
            ev.unreadable.append(Unreadable(n.host, f"node did not answer: {n.why or 'no reason given'}"))
            continue
        ev.inputs += 1
        for r in c.ranks:
            if r.rank is None:
                unranked.append((c, r))
                continue
            _add_rank(col, c, r, r.rank)
        for e in c.errors:
            if e.kind in _STACK_ERRORS and e.pid is not None:
                continue  # on the rank's record (stack_error)
            where = f"{c.host}" + (f": pid {e.pid}" if e.pid is not None else "")
            ev.unreadable.append(Unreadable(where, e.message + (f"; fix: {e.fix}" if e.fix else "")))
        if c.ras is not None and c.ras.status is not None and c.ras.outcome == "ok":
            ev.ras.append(RasReply(source=f"{c.host}: NCCL RAS {c.ras.address}", status=c.ras.status, host=c.host))
        files.extend(debug_files_of(c))
        for a in c.launchers:
            h = a.port_holder
            ev.launchers.append(Launcher(
                source=f"{c.host}: pid {a.pid} ({clip(a.command, 120)})", host=c.host, pid=a.pid,
                endpoint=a.endpoint, port=a.port, waiting_in=a.waiting_in,
                holder_pid=h.pid if h else None, holder_command=h.command if h else "",
                holder_is_launcher=bool(h and h.is_launcher), listening=h is not None))
    for c, r in unranked:  # a process named by hand without a rank variable: a rank of its own
        rank = max(ev.ranks, default=-1) + 1
        _add_rank(col, c, r, rank)
        ev.unreadable.append(Unreadable(f"{c.host}: pid {r.pid}", f"no rank variable (RANK, SLURM_PROCID, ...): "
                                        f"listed as rank {rank}"))
    # ranks the world size says exist that no answering node holds
    sizes = [r.world_size for r in ev.ranks.values() if r.world_size]
    missing: list[int] = []
    if sizes:
        world = max(sizes)
        missing = [r for r in range(world) if r not in ev.ranks]
        for rank in missing:
            rec = ev.rank(rank)
            if silent:
                rec.stack_error = f"not found; it may run on the node(s) that did not answer: {', '.join(silent)}"
            else:
                rec.alive = False
                rec.state = "missing"
                rec.world_size = world
                rec.stack_error = (f"no process of rank {rank} on any node of the job (world size {world}): "
                                 "it exited or was killed")
                rec.sources.append("live collection: " + ", ".join(n.host for n in results if n.collection))
    _kernel_events(col, results, missing if not silent else [])
    _read_debug_files(col, files, fetch, now.year, max_files, max_total)
    _read_outputs(col, outputs, output_fetch, now.year)
    _read_rank_outputs(col, results, {p for _, p in outputs}, rank_output_fetch, now.year)
    link_task_exits(col)  # srun's `task 1: Killed` in the output, as `hc diagnose logs` reads it
    ev.ranks = dict(sorted(ev.ranks.items()))
    return LiveResult(col, missing if not silent else [], files)


def _add_rank(col: Collected, c: NodeCollection, r: RankProcess, rank: int) -> None:
    ev = col.evidence
    if rank in ev.ranks and ev.ranks[rank].pid is not None:
        prev = ev.ranks[rank]
        ev.unreadable.append(Unreadable(f"{c.host}: pid {r.pid}", f"a second process claims rank {rank} "
                                        f"(also pid {prev.pid} on {prev.host}): ignored"))
        return
    stack = None
    if r.stack is not None:
        stack = next((p for p in r.stack.processes if p.pid == r.pid), None) or \
            (r.stack.processes[0] if r.stack.processes else None)
    e = ev.rank(rank)
    e.host = r.host or c.host
    e.pid = r.pid
    e.local_rank = r.local_rank
    e.world_size = r.world_size
    e.master_addr = r.master_addr or ""  # its launch, as startup.py compares the ranks'
    e.master_port = r.master_port
    e.gpu = gpu_of(r)
    e.alive = r.state not in ("Z", "X")
    e.state = r.state_name
    e.stack = stack
    e.stack_error = "" if stack is not None else _stack_error(c, r)
    e.samples = list(r.samples)
    e.sources.append(f"{e.host}: pid {r.pid} ({r.state_name}" + (f", py-spy {r.py_spy_mode}" if r.py_spy_mode
                                                                  else "") + ")")
    col.pid_ranks[r.pid] = rank


def _python_name(name: str) -> bool:
    # torch names its main thread pt_main_thread, and the kernel reports that name
    return bool(PYTHON_NAME.match(name)) or name.startswith("pt_")


def _kernel_events(col: Collected, results: list[NodeAnswer], missing: list[int]) -> None:
    """The nodes' kernel events -> evidence (see the module's docstring)."""
    ev = col.evidence
    ooms: list[tuple[str, str, KernelLine]] = []  # unmatched OOM kills that may be the job's
    for n in results:
        c = n.collection
        if c is None or c.kernel is None:
            continue
        k = c.kernel
        if k.since is not None:  # the window every node read its kernel log from: the job's start
            ev.window_start = k.since if ev.window_start is None else min(ev.window_start, k.since)
        if k.note:
            ev.unreadable.append(Unreadable(f"{c.host}: kernel log" + (f" ({k.source})" if k.source else ""),
                                            k.note))
        source = f"{c.host}: {k.source or 'kernel log'}"
        job_pids = {p for r in c.ranks for p in (r.pid, *r.helpers)}
        for e in k.events:
            if e.kind == "oom-kill" and e.pid not in col.pid_ranks:
                if e.job is not None and c.job_id is not None and e.job != c.job_id:
                    continue  # the kernel says it was another job's
                if e.pid not in job_pids and e.job is None and not (missing and _python_name(e.process)):
                    continue  # nothing says it was this job's
                if e.pid not in job_pids:
                    ooms.append((c.host, source, e))
            ev.kernel.append(KernelEvent(source=source, line=e.line, kind=e.kind, text=e.text, host=c.host,
                                         pid=e.pid, time=e.time, xid=e.xid, pci_bus_id=e.pci_bus_id))
    victims = {e.pid for _, _, e in ooms}
    if len(missing) == 1 and len(victims) == 1:
        host, source, e = ooms[0]
        rank = missing[0]
        rec = ev.rank(rank)
        assert e.pid is not None
        rec.pid, rec.host = e.pid, host
        rec.sources.append(f"{source}:{e.line}")
        col.pid_ranks[e.pid] = rank


def _read_debug_files(col: Collected, files: list[DebugFile], fetch: FileFetcher | None, year: int,
                      max_files: int, max_total: int) -> None:
    ev = col.evidence
    if not files:
        return
    seen: set[tuple[str, str]] = set()
    todo: list[DebugFile] = []
    for f in files:
        if (f.host, f.path) in seen:
            continue
        seen.add((f.host, f.path))
        if len(todo) >= max_files:
            ev.unreadable.append(Unreadable(f"{f.host}:{f.path}", f"more than {max_files} debug files: not read"))
            continue
        todo.append(f)
    if fetch is None:
        for f in todo:
            ev.unreadable.append(Unreadable(f"{f.host}:{f.path}", "not fetched (no way to reach the node's files)"))
        return
    by_host: dict[str, list[DebugFile]] = {}
    for f in todo:
        by_host.setdefault(f.host, []).append(f)
    budget = max_total
    fetched = fetch_hosts(fetch, {host: [f.path for f in fs] for host, fs in by_host.items()})
    for host, fs in by_host.items():
        got = fetched[host]
        for f in fs:
            source = f"{host}:{f.path}"
            data = got.get(f.path, "not fetched")
            if isinstance(data, str):
                if data == NO_SUCH_FILE:
                    continue  # a path the rank was given but has not written (yet): nothing was left unread
                ev.unreadable.append(Unreadable(source, f"{f.kind}: {data}"))
                continue
            if len(data) > budget:
                ev.unreadable.append(Unreadable(source, f"over the {max_total} bytes of debug files read in all"))
                continue
            budget -= len(data)
            ev.inputs += 1
            read_data(source, data, col, year, rank=f.rank)


def _read_outputs(col: Collected, outputs: Sequence[tuple[str, str]], fetch: OutputFetcher | None,
                  year: int) -> None:
    ev = col.evidence
    by_host: dict[str, list[str]] = {}
    for host, path in dict.fromkeys(outputs):
        by_host.setdefault(host, []).append(path)
    fetched = fetch_hosts(fetch, by_host) if fetch is not None else {}
    for host, paths in by_host.items():
        got = fetched[host] if fetch is not None else {p: "not fetched (no way to reach the node's files)"
                                                        for p in paths}
        for path in paths:
            data = got.get(path, "not fetched")
            source = f"{host}:{path}"
            if isinstance(data, str):
                ev.unreadable.append(Unreadable(source, f"job output: {data}"))
                continue
            if len(data) >= MAX_OUTPUT_BYTES:  # its end only: the first line read may be cut
                data = data.split(b"\n", 1)[-1]
            ev.inputs += 1
            read_data(source, data, col, year)


def _read_rank_outputs(col: Collected, results: list[NodeAnswer], seen: set[str], fetch: OutputFetcher | None,
                       year: int) -> None:
    """Each rank's own stdout/stderr file (RankProcess.outputs), its last
    MAX_RANK_OUTPUT_BYTES, parsed as that rank's log: torch's warnings and a dying rank's
    traceback are there. Bounded: MAX_RANK_OUTPUTS files; an empty or absent one is not
    listed (nothing was printed, nothing was left unread)."""
    if fetch is None:
        return
    todo = _rank_outputs(col, results, seen)
    fetched = fetch_hosts(fetch, {host: [p for p, _ in files] for host, files in todo.items()})
    for host, files in todo.items():
        got = fetched[host]
        for path, rank in files:
            data = got.get(path, NO_SUCH_FILE)
            if isinstance(data, str):
                if data != NO_SUCH_FILE:
                    col.evidence.unreadable.append(Unreadable(f"{host}:{path}", f"rank output: {data}"))
                continue
            if len(data) >= MAX_RANK_OUTPUT_BYTES:  # its end only: the first line read may be cut
                data = data.split(b"\n", 1)[-1]
            if data.strip():
                col.evidence.inputs += 1
                _read_rank_output(col, f"{host}:{path}", data, year, rank)


def _rank_outputs(col: Collected, results: list[NodeAnswer], seen: set[str]) -> dict[str, list[tuple[str, int | None]]]:
    """host -> the rank output files to read there (path, rank): the first MAX_RANK_OUTPUTS
    not read already; how many more there were is said, not dropped in silence."""
    todo: dict[str, list[tuple[str, int | None]]] = {}
    taken = left = 0
    for n in results:
        for r in n.collection.ranks if n.collection is not None else ():
            for path in r.outputs:
                if path in seen:
                    continue
                seen.add(path)
                if taken >= MAX_RANK_OUTPUTS:
                    left += 1
                    continue
                taken += 1
                todo.setdefault(n.host, []).append((path, r.rank))
    if left:
        col.evidence.unreadable.append(Unreadable("rank outputs", f"{left} more rank output file(s) not read "
                                                                  f"(at most {MAX_RANK_OUTPUTS} are)"))
    return todo


def _read_rank_output(col: Collected, source: str, data: bytes, year: int, rank: int | None) -> None:
    """A rank's output parsed as its log; one that holds nothing hc reads (a job's own
    progress lines) is ordinary output, not a file left unread."""
    before = len(col.evidence.unreadable)
    read_data(source, data, col, year, rank=rank)
    new = col.evidence.unreadable[before:]
    col.evidence.unreadable[before:] = [u for u in new if not (u.source == source and "content" in u.why)]


# ---------------------------------------------------------------------------- Slurm


class SlurmJob(msgspec.Struct, frozen=True, omit_defaults=True):
    """What `scontrol -o show job ID` says of a job (the parts a diagnosis needs)."""

    job_id: str
    state: str = ""  # RUNNING, PENDING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    nodes: str = ""  # NodeList (a hostlist)
    num_tasks: int | None = None
    start: str = ""
    end: str = ""
    stdout: str = ""
    stderr: str = ""
    name: str = ""
    reason: str = ""
    batch_host: str = ""  # where a batch job's script runs, and its StdOut/StdErr are written

    @property
    def running(self) -> bool:
        return self.state in ("RUNNING", "SUSPENDED", "COMPLETING", "STOPPED")

    @property
    def start_epoch(self) -> float | None:
        """StartTime as epoch seconds, less a minute for clocks that disagree; None when
        Slurm gave none. scontrol prints the controller's local time with no zone: read as
        this machine's (a site runs one zone)."""

        try:
            when = datetime.datetime.strptime(self.start, "%Y-%m-%dT%H:%M:%S")
        except ValueError:
            return None
        return when.timestamp() - 60.0

    @property
    def output_files(self) -> list[str]:
        return list(dict.fromkeys(p for p in (self.stdout, self.stderr) if p and p not in ("(null)", "/dev/null")))


_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9/:_]*)=(\S*)")


def parse_job(text: str, job_id: str) -> SlurmJob | None:
    """`scontrol -o show job ID` -> SlurmJob (the first record whose JobId matches; an array
    or het job prints several), None when none does."""
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        if fields.get("JobId") != str(job_id) and not line.startswith(f"JobId={job_id} "):
            continue
        tasks = fields.get("NumTasks", "")
        return SlurmJob(job_id=str(job_id), state=fields.get("JobState", ""),
                        nodes="" if fields.get("NodeList") in (None, "(null)") else fields.get("NodeList", ""),
                        num_tasks=int(tasks) if tasks.isdigit() else None,
                        start=fields.get("StartTime", ""), end=fields.get("EndTime", ""),
                        stdout=fields.get("StdOut", ""), stderr=fields.get("StdErr", ""),
                        name=fields.get("JobName", ""), reason=fields.get("Reason", ""),
                        batch_host="" if fields.get("BatchHost") in (None, "(null)") else fields["BatchHost"])
    return None


def collect_args(job_id: str, *, timeout_s: float, ras: bool = False, native: bool = False,
                 since: float | None = None, sampling: SamplingSpec | None = None) -> list[str]:
    """The helper's arguments (`hc diagnose collect ...`) for one node of the job; `since`
    (epoch seconds, the job's start): the kernel log's window on every node; `sampling`:
    the stack sampling every node does (None: the helper's default)."""
    args = ["diagnose", "collect", "--job", str(job_id), "--timeout", f"{timeout_s:g}", *sampling_args(sampling)]
    if since is not None:
        args += ["--since", f"{since:.3f}"]
    if ras:
        args.append("--ras")
    if native:
        args.append("--native")
    return args


def sampling_args(spec: SamplingSpec | None) -> list[str]:
    """The helper's sampling options for spec (none for None: its defaults)."""
    if spec is None:
        return []
    return ["--samples", str(spec.samples), "--window", f"{spec.window_s:g}", "--horizon", f"{spec.horizon_s:g}"]


def srun_collect_argv(srun: str, job_id: str, node: str, command: Sequence[str]) -> list[str]:
    """Run `command` as a step of job `job_id` on `node`, beside the job's own steps:
    --overlap (share the job's resources; Slurm 20.11+), --gres=none (no GPU binding, so the
    step never waits for the job's GPUs), one task; --quiet: the helper's JSON is the only
    stdout."""
    return [srun, "--overlap", f"--jobid={job_id}", f"--nodelist={node}", "--nodes=1", "--ntasks=1",
            "--ntasks-per-node=1", "--gres=none", "--quiet", "--kill-on-bad-exit=0", *command]


def remote_argv(remote_hc: str, args: Sequence[str]) -> list[str]:
    """`ssh.remote_hc` / `slurm.remote_hc` (a command, maybe with arguments) + args."""
    return [*shlex.split(remote_hc), *args]


def decode_node(host: str, stdout: str | bytes) -> NodeCollection | None:
    """The helper's JSON (the last line that decodes), None when there is none."""
    text = stdout.decode("utf-8", errors="replace") if isinstance(stdout, bytes) else stdout
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return typed.decode_json(line, NodeCollection)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
    return None
