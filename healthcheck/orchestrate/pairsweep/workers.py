"""`WorkerTransport`: the torch pair tests of one deep sweep through persistent workers: one `hc bw serve` per
node (bandwidth/serve.py), started the first time a test needs the node and kept for the
rest of the sweep, so torch's import and the device's set-up are paid once per node
instead of once per test (`bandwidth.pairs.persistent_workers`). It is started the way
the fabric's pairs are (`bandwidth.pairs.launcher`): over hc's own SSH (ssh/stream.py),
or by srun or mpirun running one task on the node (process_stream.py): srun as a step of
the allocation hc runs in, else as a one-node allocation of its own (whole node, bounded
wait, a time limit from the sweep's bound where the partition allows) held while the
worker lives (the sweep, or until it idles out) and cancelled if srun had to be killed or
hc is stopped (orchestrate/allocations.py); mpirun with the node as its one host. Every test's
rank and rendezvous come with its request (the first member: its address over SSH, the
node's name as the launcher knows it otherwise), never from the launcher.

A TorchOutcome (transport.py): rank 0's samples, or None and one line naming the
member; never an exception, since one test's surprise must not end the sweep. Where a
member's hc has no `bw serve` (a rolling upgrade), that test goes the per-test way
(the transport the sweep's launcher starts per test: ssh.py, launched.py). A test
sends each member its request (rank i: the members' order, rank 0's host the
rendezvous) and waits for every reply within the test's timeout. A worker that could not
start, did not answer in time, ended, or answered with an error is closed and started
afresh when a later test needs its node: a hung collective cannot be recovered inside
the process, and a new process costs one start-up, which is what the old way paid on
every test. A node's worker serves one test at a time; a test takes its members' workers
in name order, so two tests sharing a node wait for each other instead of deadlocking.

Retiring a worker ends it before its node serves another test. One that answered (an
error) reads its input: end of input ends it. One that did not answer is still inside the
test (its partner hung, or it did): it reads nothing, and would keep its rendezvous, the
pair port on the test's first node among it, until its own timeouts ran out, minutes into
the tests after it. It is killed at once, with its process group: over SSH by the group's
id on the node (`_END_GROUP`: the group its ready line named, its `timeout` wrapper's), a
launcher's by killing the launcher's tree here. Retiring waits until it is gone (bounded);
one that is not is named, and its node's next test is ERROR saying so, not started on a
port that may be taken.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from healthcheck.core import typed
from healthcheck.orchestrate.allocations import OwnJob, needs_own_job
from healthcheck.orchestrate.pairsweep.launched import launch_env, launcher_said, serve_spec
from healthcheck.orchestrate.pairsweep.plan import PairPlan, node_address
from healthcheck.orchestrate.pairsweep.transport import PairTransport, SweepSamples, TorchOutcome
from healthcheck.runners.process_stream import ProcessStream
from healthcheck.runners.ssh import SshConnection, SshError

if TYPE_CHECKING:
    from healthcheck.core.config import Config
    from healthcheck.runners.line_stream import LineStream

_PREFIX = b"hc-bw-serve "
GONE_WAIT_S = 5.0  # after SIGKILL, for a worker's process group to be gone from its node
# SIGKILL the process group $1 and wait until none of it is left (dash's kill: no `--`, no `-s`)
_END_GROUP = ('kill -KILL "-$1" 2>/dev/null; i=0; while kill -0 "-$1" 2>/dev/null; do '
              f'[ "$i" -ge {int(GONE_WAIT_S * 10)} ] && {{ echo "process group $1 still there '
              f'{GONE_WAIT_S:g} s after SIGKILL" >&2; exit 1; }}; i=$((i+1)); sleep 0.1; done')
LIFETIME_MAX_S = 86400.0


class _Ready(msgspec.Struct):
    ready: bool
    pid: int = 0
    pgid: int = 0  # its process group on the node (an older worker's ready line lacks it)
    error: str = ""


class _Reply(msgspec.Struct):
    id: str
    exit: int
    error: str = ""
    report: SweepSamples | None = None  # what a reply carries that a test reads


@dataclass
class _Worker:
    """One node's `hc bw serve`: its stream (and SSH connection), and whether it may serve again."""

    node: str
    lock: threading.Lock = field(default_factory=threading.Lock)  # one test at a time
    swap: threading.Lock = field(default_factory=threading.Lock)  # stream and cancel change together
    conn: SshConnection | None = None
    stream: LineStream | None = None
    pid: int = 0
    pgid: int = 0  # its process group on its node, over SSH (0: not known, an older worker's)
    starts: int = 0
    lacks_serve: bool = False  # the node's hc predates `hc bw serve` (a rolling upgrade): tests start per test
    job: OwnJob | None = None  # the allocation srun asked for (outside hc's own): cancelled unless srun ended it
    command: str = ""  # how it was last started (the launcher's command line, or the one run over SSH)
    said: str = ""  # what it printed when it last failed to start, whole: the test's evidence
    leftover: LineStream | None = None  # a retired worker not known to be gone (it may hold the pair port)

    def usable(self) -> bool:
        return self.stream is not None and not self.stream.ended

    def retire(self, in_test: bool = False) -> str:
        """End the worker (module doc): end of input, or at once by force where it is
        `in_test` (it never answered: it reads no input); a later test starts a new one.
        What the run should hear: srun's allocation cancelled, a worker not gone, else ''."""
        with self.swap:  # close() may retire it beside a test that is still running
            stream, self.stream = self.stream, None
            job, self.job = self.job, None
        if stream is None:
            return ""
        killed = stream.close(0.0 if in_test else 3.0)
        left = stream.still_running()
        if left and (self.conn is None or self.pgid > 1):  # what can be checked again: before the next test
            self.leftover = stream
        self.pgid = 0
        if left:
            left = f"its worker (pid {self.pid}) was retired but may still run: {left}"
        if job is None:
            return left
        return "; ".join(filter(None, (left, job.settle(None if killed else stream.exit_status()))))

    def still_there(self) -> str:
        """'' once no retired worker of this node may still run (ended again where it can be)."""
        if self.leftover is None:
            return ""
        left = self.leftover.still_running()
        if not left:
            self.leftover = None
            return ""
        return f"its worker retired from an earlier test (pid {self.pid}) is still there: {left}"


class WorkerPool:
    """Every node's persistent worker for one sweep; `close()` ends them all."""

    def __init__(self, config: Config, plan: PairPlan, nodes: int) -> None:
        self.config = config
        self.plan = plan
        # a node takes part in at most every test of the sweep; the wrapper's limit is a backstop
        # (the worker ends on its own at the end of input, idle, or a hung collective)
        self.lifetime_s = min(LIFETIME_MAX_S, plan.pairs.timeout_s * (nodes + 16))
        self.idle_s = max(600.0, 4 * plan.pairs.timeout_s)
        self._lock = threading.Lock()
        self._workers: dict[str, _Worker] = {}
        self._closed = False
        self.notes: list[str] = []  # for the run: allocations cancelled (or not) after srun was killed

    # -- one test

    def run_test(self, members: Sequence[str], master: str) -> TorchOutcome | None:
        """The torch sweep across members on their workers; rank 0's samples, or None and
        why; None alone where a member's hc has no `bw serve` (the caller starts the test
        the old way, `hc bw allreduce` on every member)."""
        workers = [self._worker(n) for n in members]
        held: list[_Worker] = []
        try:
            for w in sorted(workers, key=lambda w: w.node):
                w.lock.acquire()
                held.append(w)
            if any(w.lacks_serve for w in workers):
                self._fall_back(workers)
                return None
            if self._closed:
                return TorchOutcome(None, f"{members[0]}: the sweep is ending")
            outcome = self._run(members, workers, master)
            if any(w.lacks_serve for w in workers):
                self._fall_back(workers)
                return None
            return outcome
        finally:
            for w in held:
                w.lock.release()

    def _retire(self, w: _Worker, in_test: bool = False) -> None:
        said = w.retire(in_test)
        if said:
            self.notes.append(f"{w.node}: {said}")

    def _fall_back(self, workers: list[_Worker]) -> None:
        """Before the test is started per test on every member (a member's hc has no `bw serve`).
        srun's per-test start asks for the members' nodes whole, which a partner's worker
        holds (an allocation of its own): those workers end first, and start again when a
        later test needs them. Steps, mpirun ranks and SSH sessions hold nothing."""
        for w in workers:
            if w.job is not None:
                self._retire(w)

    def _run(self, members: Sequence[str], workers: list[_Worker], master: str) -> TorchOutcome:
        started: dict[str, str] = {}
        threads = [threading.Thread(target=lambda w=w: started.__setitem__(w.node, self._ensure(w)), daemon=True)
                   for w in workers if not w.usable()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.plan.pairs.timeout_s + self.config.main.ssh.connect_timeout_s + self.plan.pairs.reply_grace_s)
        failed = [f"{w.node}: {started.get(w.node) or 'the worker did not start in time'}"
                  for w in workers if not w.usable()]
        if failed:
            said = "\n".join(f"{w.node}:\n{w.said}" for w in workers if not w.usable() and w.said)
            return TorchOutcome(None, "; ".join(failed), said)
        test_id = uuid.uuid4().hex[:16]
        replies: dict[int, _Reply | str] = {}
        # past the test's timeout: for the reply of a rank that gave up (bandwidth.pairs.reply_grace_s)
        deadline = time.monotonic() + self.plan.pairs.timeout_s + self.plan.pairs.reply_grace_s

        def one(rank: int, w: _Worker) -> None:
            replies[rank] = self._ask(w, test_id, rank, len(members), master, deadline)

        threads = [threading.Thread(target=one, args=(r, w), daemon=True) for r, w in enumerate(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()) + 5)
        problems = []
        for rank, w in enumerate(workers):
            got = replies.get(rank, "no reply")
            if isinstance(got, str) or got.exit != 0:
                # never reused after a failure: the next test starts it afresh. No reply: it is
                # still inside the test, where it reads no input (killed at once)
                self._retire(w, in_test=isinstance(got, str))
                problems.append(f"{w.node}: {got if isinstance(got, str) else got.error or f'exit {got.exit}'}")
        first = replies.get(0)
        samples = first.report.samples if isinstance(first, _Reply) and first.report is not None else None
        if not samples:
            return TorchOutcome(None, "; ".join(problems) or "the torch sweep printed no result")
        return TorchOutcome(samples, "; ".join(problems))

    def _ask(self, w: _Worker, test_id: str, rank: int, world: int, master: str, deadline: float) -> _Reply | str:
        """Send w its request and wait for the reply with test_id; a str says why none came."""
        plan = self.plan
        request = {"id": test_id, "rank": rank, "world_size": world, "master_addr": master,
                   "master_port": plan.pairs.port, "collectives": [plan.collective], "sizes": list(plan.sizes),
                   "iters": plan.torch.iters, "warmup": plan.torch.warmup, "check": True,
                   "timeout_s": float(max(5, int(plan.pairs.timeout_s) - 10))}
        stream = w.stream
        if stream is None or not stream.send_line(msgspec.json.encode(request)):
            return f"the worker (pid {w.pid}) is gone: {stream.stderr_tail() if stream else ''}".rstrip(": ")
        while True:
            line = stream.read_line(deadline, lambda text: text.startswith(_PREFIX))
            if line is None:
                if stream.ended:
                    said = stream.stderr_tail()
                    return f"the worker (pid {w.pid}) ended" + (f": {said}" if said else "")
                return f"no reply within {plan.pairs.timeout_s:g}s"
            try:
                reply = typed.decode_json(line[len(_PREFIX):], _Reply)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # not a reply (a stale ready line, a torn write): keep reading
            if reply.id == test_id:
                return reply

    # -- workers

    def _worker(self, node: str) -> _Worker:
        with self._lock:
            return self._workers.setdefault(node, _Worker(node))

    def _ensure(self, w: _Worker) -> str:
        """Start w's worker (the caller holds w.lock); '' when it is ready, else why not."""
        self._retire(w)
        w.said = ""
        left = w.still_there()
        if left:  # it may hold the pair port: a test started beside it would meet EADDRINUSE
            return left
        plan = self.plan
        kind = plan.pairs.launcher
        remote_hc = self.config.main.slurm.remote_hc if kind == "srun" else self.config.main.ssh.remote_hc
        argv = (remote_hc, "bw", "serve", "--backend", plan.torch.backend, "--idle-timeout", f"{self.idle_s:g}")
        started = self._start_ssh(w, argv) if kind == "ssh" else self._start_launched(w, argv)
        if started:
            return started
        if self._closed:  # close() ran while this one started: it would be left running
            self._retire(w)
            return "the sweep is ending"
        assert w.stream is not None
        w.starts += 1
        line = w.stream.read_line(time.monotonic() + plan.pairs.timeout_s, lambda text: text.startswith(_PREFIX))
        ready = None
        if line is not None:
            try:
                ready = typed.decode_json(line[len(_PREFIX):], _Ready)
            except (msgspec.DecodeError, msgspec.ValidationError):
                ready = None
        if ready is None or not ready.ready:
            w.said = f"$ {w.command}\n{w.stream.stderr_text()}"
            why = (ready.error if ready else "") or self._last_words(w) or (
                "no answer within the test's timeout" if line is None and not w.stream.ended
                else "it ended before it was ready")
            self._retire(w)
            w.lacks_serve = "No such command 'serve'" in why + w.said
            return f"`{remote_hc} bw serve` did not start: {why}"
        w.pid = ready.pid
        if kind == "ssh" and w.conn is not None and ready.pgid > 1:
            w.pgid = ready.pgid
            w.stream.end_with(functools.partial(_end_group, w.conn, w.pgid, self.config.main.ssh.connect_timeout_s))
        return ""

    def _last_words(self, w: _Worker) -> str:
        """The line of what w's worker (or its launcher) printed on stderr that says most."""
        assert w.stream is not None
        if self.plan.pairs.launcher != "mpirun":
            return w.stream.stderr_tail()
        return launcher_said("mpirun", w.stream.stderr_text(), [w.node])

    def _start_ssh(self, w: _Worker, argv: tuple[str, ...]) -> str:
        """Open w's stream over hc's own SSH; '' when it started, else why not."""

        w.command = " ".join(argv)
        try:
            if w.conn is None:
                w.conn = SshConnection(w.node, self.config.main.ssh)
            w.conn.connect()
            w.stream = w.conn.open_stream(argv, lifetime_s=self.lifetime_s, env=dict(self.plan.torch.env))
        except SshError as exc:
            return exc.message
        except Exception as exc:  # one node's surprise is this test's ERROR, not the sweep's end
            return f"{type(exc).__name__}: {exc}"
        return ""

    def _start_launched(self, w: _Worker, argv: tuple[str, ...]) -> str:
        """Start w's worker as one srun or mpirun task on its node; '' when it started, else why not."""

        kind = self.plan.pairs.launcher
        env = launch_env(os.environ)
        # a job of hc's own outside an allocation: held at most as long as the worker may live
        job = OwnJob(self.config.main.slurm, env, "pair", self.lifetime_s) if needs_own_job(kind, env) else None
        spec, _ = serve_spec(self.config, self.plan, w.node, argv, env,
                             job.name if job is not None else f"hc-pair-{uuid.uuid4().hex[:12]}",
                             time_args=job.srun_args() if job is not None else ())
        w.command = " ".join(spec.argv)
        try:
            stream = ProcessStream.start(w.node, spec, env)
        except Exception as exc:  # one node's surprise is this test's ERROR, not the sweep's end
            if job is not None:
                job.release()  # srun never ran: it asked for nothing
            if isinstance(exc, FileNotFoundError):
                return f"{spec.argv[0]} not found (bandwidth.pairs.launcher: {kind})"
            return f"{kind}: {type(exc).__name__}: {exc}"
        with w.swap:
            w.stream = stream
            w.job = job
        return ""

    def release(self, node: str) -> None:
        """End `node`'s worker now, between tests (a job took the node: no more tests there)."""
        with self._lock:
            w = self._workers.get(node)
        if w is not None:
            with w.lock:
                self._retire(w)

    def starts(self) -> dict[str, int]:
        """How many times each node's worker was started (1: it served the whole sweep)."""
        with self._lock:
            return {n: w.starts for n, w in self._workers.items()}

    def close(self) -> None:
        """End every worker and close every connection (in parallel; each waits a moment)."""
        self._closed = True
        with self._lock:
            workers = list(self._workers.values())

        def end(w: _Worker) -> None:
            self._retire(w)
            left = w.still_there()  # one more try for a worker retired earlier that was not gone
            if left:
                self.notes.append(f"{w.node}: {left}")
            if w.conn is not None:
                w.conn.close()

        threads = [threading.Thread(target=end, args=(w,), daemon=True) for w in workers]
        for t in threads:
            t.start()
        # a wedged srun: 3 s for its exit, kill_tree's 2 + 2 s, 2 s to reap, then scancel
        for t in threads:
            t.join(10 + self.config.main.slurm.command_timeout_s + 5)


def _end_group(conn: SshConnection, pgid: int, connect_s: float) -> str:
    """Kill a worker's process group on its node and wait until it is gone (bounded);
    '' then, else why not."""
    result = conn.run(("sh", "-c", _END_GROUP, "sh", str(pgid)), timeout_s=GONE_WAIT_S + connect_s + 2)
    if result.ok:
        return ""
    said = result.stderr.strip()[-300:]
    return (f"killing its process group {pgid} on the node: "
            + (result.error or said or ("no answer" if result.timed_out else f"exit {result.returncode}")))


class WorkerTransport:
    """Every torch test of a sweep on the members' persistent workers (one WorkerPool);
    a test whose member's hc has no `bw serve` goes through `per_test`, the transport the
    sweep's launcher starts `hc bw allreduce` with."""

    def __init__(self, config: Config, plan: PairPlan, pool: WorkerPool, per_test: PairTransport) -> None:
        self.config = config
        self.plan = plan
        self.pool = pool
        self.per_test = per_test

    def run(self, members: Sequence[str]) -> TorchOutcome:
        try:
            # a launcher names nodes its own way (srun: Slurm's names, mpirun: through Open
            # MPI's own ssh); hc's ssh config, which neither reads, must not decide where
            # ranks meet (nor refuse a ProxyCommand it cannot follow)
            master = members[0] if self.plan.pairs.launcher != "ssh" else node_address(self.config, members[0])
        except SshError as exc:
            return TorchOutcome(None, exc.message)
        got = self.pool.run_test(members, master)
        if got is not None:
            return got
        return self.per_test.run(members)  # a member's hc has no `bw serve`: hc bw allreduce per member

    def release(self, node: str) -> None:
        self.pool.release(node)

    def close(self) -> list[str]:
        """End every worker; what the run should hear: what could not be ended, and the nodes
        whose worker was started again after a failed test."""
        restarted = sorted(n for n, k in self.pool.starts().items() if k > 1)
        self.pool.close()
        notes = [f"bandwidth between nodes: {note}" for note in self.pool.notes]
        if restarted:
            notes.append(f"bandwidth between nodes: torch workers started again after a failed test on "
                         f"{', '.join(restarted[:20])}" + (" ..." if len(restarted) > 20 else ""))
        return notes + self.per_test.close()
