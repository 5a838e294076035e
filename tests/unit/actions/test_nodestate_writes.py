"""hc's node state is written atomically but not fsynced (issue 22: two journal commits a
write, twice a prologue): safe because every reader takes an empty or garbled file as no
mark, which is what a crash can leave. Reports and other files stay durable."""

from __future__ import annotations

import pytest

from healthcheck.actions.nodestate import NodeState
from healthcheck.core import atomic


@pytest.fixture
def fsyncs(monkeypatch):
    calls: list[int] = []
    real = atomic.os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(atomic.os, "fsync", counting)
    return calls


def test_the_node_state_is_written_without_fsync(tmp_path, fsyncs):
    state = NodeState(tmp_path, "node1")
    state.mark_job_start("7", 1000.0)
    state.set_kernel_log_cursor(2000.0)
    assert state.record_run(False, ["hc.E002"]) == 1
    assert fsyncs == []
    assert (state.job_start("7"), state.kernel_log_cursor()) == (1000.0, 2000.0)
    assert not [p for p in (tmp_path / "node1").rglob("*.tmp")]


def test_other_files_are_still_fsynced_with_their_directory(tmp_path, fsyncs):
    atomic.write_atomic(tmp_path / "report.json", b"{}\n")
    assert len(fsyncs) == 2  # the file, then the directory holding its new name


@pytest.mark.parametrize("content", ["", "\x00\x00\x00", "12.5e", '{"consecutive": '])
def test_what_a_crash_can_leave_reads_as_no_mark(tmp_path, content):
    state = NodeState(tmp_path, "node1")
    (tmp_path / "node1" / "jobs").mkdir(parents=True)
    (tmp_path / "node1" / "jobs" / "7").write_text(content)
    (tmp_path / "node1" / "kernel-log-cursor").write_text(content)
    (tmp_path / "node1" / "errors.json").write_text(content)
    assert state.job_start("7") is None  # the epilogue asks Slurm instead
    assert state.kernel_log_cursor() is None  # since boot: after a crash, a new boot
    assert state.record_run(False, ["hc.E002"]) == 1  # counting starts again
