"""Big text logs read on several cores (diagnose/prefetch.py, issue 22): workers record each
file's pure calls, the parent reads every file in order answering them from the tapes.
Differential: with the size threshold at 0 (every file read by two workers too) every job
set gives the evidence, the logged sizes, the stamps and the diagnosis JSON of the serial
reading; a fixture-sized input forks nothing; a worker dies with its parent."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time

import msgspec
import pytest
from support import FIXTURES

from healthcheck.diagnose import prefetch, sources
from healthcheck.diagnose.loggednumbers import TEMPLATES_MAX, merge_logged, read_logged
from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import build, encode

NOW = dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc)


def _job_sets() -> list:
    roots = [FIXTURES / "diagnose", FIXTURES / "diagnose-field", FIXTURES / "h100-captures",
             FIXTURES / "diagnose-jobs" / "tuning"]
    return sorted(d for root in roots for d in root.iterdir() if d.is_dir())


def _read(path) -> bytes:
    col = collect([path], now=NOW)
    stamps = {source: (s.stamps, s.unlabelled, s.by_rank) for source, s in col.stamps.items()}
    whole = col.whole.evidence if col.whole is not None else None
    return msgspec.json.encode([col.evidence, col.logged, col.attempts, whole, repr(stamps)]) + encode(build(col))


@pytest.mark.parametrize("path", _job_sets(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_job_set_reads_the_same_on_two_workers(path, monkeypatch):
    serial = _read(path)
    monkeypatch.setattr(sources, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(sources, "worker_count", lambda sizes, big: 2 if len(sizes) >= 2 else 0)
    assert _read(path) == serial


def test_the_workers_answer_the_parents_calls(monkeypatch):
    """The comparison above compares something: the parent's pure calls are answered (a tape
    of another file's results, its guards waved through, gives another reading)."""
    path = FIXTURES / "diagnose-jobs" / "tuning" / "broadcast-source-plain-r0"
    serial = _read(path)
    monkeypatch.setattr(sources, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(sources, "worker_count", lambda sizes, big: 2)
    answered: list[str] = []
    real = prefetch.pure

    def counting(name, guard, compute):
        tape = prefetch._TAPE.get()
        if tape is not None and not tape.recording and tape.at < len(tape.calls):
            answered.append(name)
        return real(name, guard, compute)

    monkeypatch.setattr(sources, "pure", counting)
    assert _read(path) == serial
    assert answered.count("parsed") == 4  # rank0..3.log, each read by a worker

    def foreign(name, guard, compute):  # every file answered with rank0.log's first tape entries
        tape = prefetch._TAPE.get()
        if tape is None or tape.recording:
            return real(name, guard, compute)
        first = foreign.tapes.setdefault(name, None)
        if first is None:
            foreign.tapes[name] = real(name, guard, compute)
            return foreign.tapes[name]
        return first

    foreign.tapes = {}
    monkeypatch.setattr(sources, "pure", foreign)
    assert _read(path) != serial


def test_a_fixture_sized_input_forks_no_worker():
    assert prefetch.worker_count([100, 2_000], sources.PARALLEL_BYTES) == 0
    assert prefetch.worker_count([2 * sources.PARALLEL_BYTES], sources.PARALLEL_BYTES) == 0


def test_workers_are_bounded_by_the_free_cpus_the_files_and_the_knob(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.0, 0.0))
    monkeypatch.delenv(prefetch.WORKERS_ENV, raising=False)
    assert prefetch.worker_count([10, 10, 10], 1) == 3
    assert prefetch.worker_count([10] * 9, 1) == 4
    monkeypatch.setattr(os, "getloadavg", lambda: (1.8, 0.0, 0.0))  # two cores busy: two free
    assert prefetch.worker_count([10] * 9, 1) == 2
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 0.0, 0.0))  # none free: one process reads
    assert prefetch.worker_count([10] * 9, 1) == 0
    monkeypatch.setenv(prefetch.WORKERS_ENV, "1")
    assert prefetch.worker_count([10] * 9, 1) == 0
    monkeypatch.setenv(prefetch.WORKERS_ENV, "2")
    assert prefetch.worker_count([10] * 9, 1) == 2


def test_a_tape_out_of_step_is_computed_not_answered():
    tape = prefetch.recorded(lambda: [prefetch.pure("a", (1,), lambda: "A"), prefetch.pure("b", (2,), lambda: "B")]
                             and None)
    with prefetch.replaying(tape):
        assert prefetch.pure("a", (1,), lambda: "fresh") == "A"
        assert prefetch.pure("b", (3,), lambda: "fresh") == "fresh"  # another argument: computed
        assert prefetch.pure("b", (2,), lambda: "fresh") == "fresh"  # and every later call
    assert prefetch.pure("a", (1,), lambda: "none") == "none"


def test_logged_sizes_merged_per_file_are_the_ones_read_in_one(monkeypatch):
    monkeypatch.setattr("healthcheck.diagnose.loggednumbers.TEMPLATES_MAX", 3)
    texts = ["[rank0]: a 1\n[rank0]: b 2\n[rank1]: c 3\n", "[rank0]: b 9\n[rank0]: d 4\n[rank0]: e 5\n[rank2]: f 6\n",
             "[rank1]: c 7\n[rank0]: g 8\n"]
    serial: dict = {}
    merged: dict = {}
    for text in texts:
        read_logged(text, None, serial)
        part: dict = {}
        read_logged(text, None, part)
        merge_logged(merged, part)
    assert merged == serial and list(merged) == list(serial)
    assert len(merged[0]) == 3 and TEMPLATES_MAX != 3


_ORPHAN = """
import os, sys, time
from healthcheck.diagnose import prefetch
with prefetch.prefetched([0, 1], 2, lambda i: time.sleep(60)) as tapes:
    time.sleep(0.5)
    print(" ".join(str(c.pid) for c in __import__("multiprocessing").active_children()), flush=True)
    time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_dies_with_its_parent():
    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)


def test_a_killed_worker_leaves_its_files_to_the_parent(monkeypatch):
    """A worker gone mid-reading (the OOM killer) would leave a pool waiting for its tape for
    ever: the parent notices and reads the rest itself, with the serial result."""
    path = FIXTURES / "diagnose-jobs" / "tuning" / "broadcast-source-plain-r0"
    serial = _read(path)
    monkeypatch.setattr(sources, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(sources, "worker_count", lambda sizes, big: 2)
    monkeypatch.setattr(prefetch, "_POLL_S", 0.05)
    real = sources.read_data

    def dying(source, *args, **kwargs):
        if prefetch._TAPE.get() is not None and prefetch._TAPE.get().recording and source.endswith("rank1.log"):
            os._exit(1)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(sources, "read_data", dying)
    assert _read(path) == serial
