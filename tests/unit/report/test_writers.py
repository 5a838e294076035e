"""Every file hc writes (reports, recordings, the audit log, the history database, the
hooks' reports) is written safely for whatever is at the path (issue 8, item 7).

Device nodes are never the machine's own: they are made with mknod inside tmp_path (as
root; the tests that need one skip otherwise), with /dev/full's and /dev/null's numbers,
so the old code, which renamed a JSON file over them, could only damage a copy.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from support import run_hc

from healthcheck.actions.audit import AuditLog
from healthcheck.core import atomic
from healthcheck.core.errors import HcError
from healthcheck.report import jsonio
from healthcheck.report.history import History

FULL = (1, 7)  # /dev/full: every write fails with ENOSPC
NULL = (1, 3)  # /dev/null

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")


def chardev(tmp_path: Path, name: str, numbers: tuple[int, int]) -> Path:
    path = tmp_path / name
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(*numbers))
    return path


def assert_chardev(path: Path, numbers: tuple[int, int]) -> None:
    st = os.lstat(path)
    assert stat.S_ISCHR(st.st_mode), f"{path} is no longer a character device"
    assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == numbers


def no_temp_files(directory: Path) -> bool:
    return not [p for p in directory.iterdir() if p.name.endswith(".tmp")]


class FifoReader:
    """Reads a FIFO to its end in a thread (so writing it does not block)."""

    def __init__(self, path: Path) -> None:
        self.data = b""
        self.opened = threading.Event()
        self.thread = threading.Thread(target=self._read, args=(path,), daemon=True)
        self.thread.start()

    def _read(self, path: Path) -> None:
        # O_NONBLOCK: open without waiting for a writer; until one comes, reads see EOF
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.opened.set()
        os.set_blocking(fd, True)
        chunks = []
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                # no writer yet (before hc opened it) or the writer closed: wait a little for more
                if chunks:
                    break
                threading.Event().wait(0.01)
                continue
            chunks.append(chunk)
        os.close(fd)
        self.data = b"".join(chunks)

    def result(self, timeout: float = 30) -> bytes:
        self.thread.join(timeout)
        return self.data


# ------------------------------------------------------------------ write_atomic


def test_every_writer_shares_one_write_atomic():
    # reports (-o), hc gpu record -o and the hooks import it from jsonio: the same function
    assert jsonio.write_atomic is atomic.write_atomic


def test_new_and_regular_files_are_replaced_atomically(tmp_path):
    path = tmp_path / "sub" / "r.json"
    atomic.write_atomic(path, b"one")
    atomic.write_atomic(path, b"two")
    assert path.read_bytes() == b"two" and stat.S_ISREG(os.lstat(path).st_mode)
    assert no_temp_files(path.parent)


@root_only
def test_a_full_device_is_an_error_and_stays_a_device(tmp_path):
    full = chardev(tmp_path, "full", FULL)
    with pytest.raises(HcError) as exc:
        atomic.write_atomic(full, b'{"report": 1}\n')
    assert "No space left on device" in str(exc.value) and "\n" not in str(exc.value)
    assert_chardev(full, FULL)
    assert no_temp_files(tmp_path)


@root_only
def test_a_null_device_is_written_in_place(tmp_path):
    null = chardev(tmp_path, "null", NULL)
    atomic.write_atomic(null, b"x" * 100_000)
    assert_chardev(null, NULL)
    assert no_temp_files(tmp_path)


def test_a_fifo_is_written_in_place_for_its_reader(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = FifoReader(fifo)
    assert reader.opened.wait(10)
    atomic.write_atomic(fifo, b"report\n" * 20_000)  # more than a pipe buffer: blocking writes
    assert reader.result() == b"report\n" * 20_000
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_fifo_without_a_reader_is_an_error_not_a_hang(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    exc = bounded(lambda: atomic.write_atomic(fifo, b"x"), fifo)
    assert isinstance(exc, HcError) and "nothing is reading it" in str(exc)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_symlink_is_refused_and_neither_it_nor_its_target_changes(tmp_path):
    target = tmp_path / "victim"
    target.write_text("precious")
    link = tmp_path / "r.json"
    link.symlink_to(target)
    dangling = tmp_path / "d.json"
    dangling.symlink_to(tmp_path / "nowhere")
    for path in (link, dangling):
        with pytest.raises(HcError, match="symbolic link"):
            atomic.write_atomic(path, b"{}")
        assert os.path.islink(path)
    assert target.read_text() == "precious" and not (tmp_path / "nowhere").exists()


def test_a_directory_block_device_or_socket_is_refused(tmp_path):
    import socket

    directory = tmp_path / "dir"
    directory.mkdir()
    with pytest.raises(HcError, match="directory"):
        atomic.write_atomic(directory, b"{}")
    assert directory.is_dir()
    sock_path = tmp_path / "s"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        with pytest.raises(HcError, match="socket"):
            atomic.write_atomic(sock_path, b"{}")
        assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    finally:
        sock.close()
    if os.geteuid() == 0:
        block = tmp_path / "blk"
        os.mknod(block, stat.S_IFBLK | 0o600, os.makedev(7, 200))  # a loop device number
        with pytest.raises(HcError, match="block device"):
            atomic.write_atomic(block, b"{}")
        assert stat.S_ISBLK(os.lstat(block).st_mode)


def test_descriptor_aliases_go_to_the_open_descriptor(tmp_path):
    target = tmp_path / "out"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"before|")
        atomic.write_atomic(f"/dev/fd/{fd}", b"report")  # at the descriptor's offset: appended
        atomic.write_atomic(f"/proc/self/fd/{fd}", b"|again")
    finally:
        os.close(fd)
    assert target.read_bytes() == b"before|report|again"
    assert atomic.fd_alias("/dev/stdout") == 1 and atomic.fd_alias("/dev/stderr") == 2
    assert atomic.fd_alias("/dev/fdx/1") is None and atomic.fd_alias("/tmp/dev/stdout") is None


# ---------------------------------------------------------------------- audit log


def test_audit_log_refuses_a_planted_symlink_loudly(tmp_path):
    target = tmp_path / "shadow"
    target.write_text("root:x:0:0\n")
    (tmp_path / "audit.jsonl").symlink_to(target)
    log = AuditLog(tmp_path / "audit.jsonl")
    with pytest.raises(OSError, match="symbolic link"):  # apply.py catches OSError
        log.append({"node": "n1", "action": "drain"})
    assert target.read_text() == "root:x:0:0\n"
    finding = log.failure_finding(scope="n1")
    assert finding is not None and finding.id == "hc.E008" and finding.status.value == "ERROR"
    assert "1 audit record not written" in finding.message and "symbolic link" in finding.message


def test_audit_log_appends_to_a_regular_file_and_reports_nothing(tmp_path):
    log = AuditLog(tmp_path / "sub" / "audit.jsonl")
    log.append({"k": 1})
    log.append({"k": 2})
    assert [r["k"] for r in log.read()] == [1, 2]
    assert log.failure_finding(scope="n1") is None


@root_only
def test_audit_log_on_a_full_device_fails_and_the_device_stays(tmp_path):
    full = chardev(tmp_path, "full", FULL)
    log = AuditLog(full)
    with pytest.raises(OSError, match="No space left on device"):
        log.append({"k": 1})
    assert_chardev(full, FULL)
    null = chardev(tmp_path, "null", NULL)
    AuditLog(null).append({"k": 1})  # an operator may send it to /dev/null on purpose
    assert_chardev(null, NULL)


def bounded(fn, fifo: Path, seconds: float = 10) -> BaseException | None:
    """Run `fn` in a thread; what it raised. If it is still blocked after `seconds` (an
    open() waiting for a FIFO's reader), become that reader so it ends, and fail."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        thread.join(10)
        os.close(fd)
        pytest.fail(f"writing {fifo} blocked waiting for a reader")
    return outcome[0]


def test_audit_log_fifo_without_reader_does_not_hang(tmp_path):
    fifo = tmp_path / "audit.fifo"
    os.mkfifo(fifo)
    exc = bounded(lambda: AuditLog(fifo).append({"k": 1}), fifo)
    assert isinstance(exc, OSError) and "nothing is reading it" in str(exc)


# ------------------------------------------------------------------- history path


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory", "chardev"])
def test_history_database_must_be_a_regular_file(tmp_path, kind):
    path = tmp_path / "history.sqlite"
    if kind == "symlink":
        path.symlink_to(tmp_path / "elsewhere.sqlite")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        if os.geteuid() != 0:
            pytest.skip("mknod needs root")
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(*NULL))
    with pytest.raises(HcError) as exc:
        History(path).last(1)
    assert "\n" not in str(exc.value) and str(path) in str(exc.value)
    assert not (tmp_path / "elsewhere.sqlite").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(("-wal", "-shm", "-journal"))]


# ------------------------------------------------------------------ hc -o, as run


def node_config(tmp_path: Path, mtu: int = 65536) -> Path:
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "t.yaml").write_text(f"net:\n  interfaces:\n    lo: {{mtu: {mtu}}}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text("default_fabric: t\n")
    return cfg


def hc_local(tmp_path: Path, *args: str, mtu: int = 65536):
    return run_hc("node", "--local", "--config", str(node_config(tmp_path, mtu)), *args,
                  env={"HC_NODE_NAME": "gpu017"})


def one_error_line(stderr: bytes) -> str:
    lines = [line for line in stderr.decode().splitlines() if line.startswith("hc: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr.decode(), stderr
    return lines[0]


def one_warning_line(stderr: bytes) -> str:
    text = stderr.decode()
    assert "hc: error:" not in text and "Traceback" not in text, text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("hc: warning:")]
    return line


@root_only
def test_output_to_a_full_device_keeps_a_fails_exit_2_and_says_so(tmp_path, validate_report):
    # the verdict's exit code wins: a FAIL whose -o is lost exited 4 (issue 18, B.7)
    full = chardev(tmp_path, "full", FULL)
    r = hc_local(tmp_path, "--output", str(full), mtu=1500)
    assert r.returncode == 2, r.stderr
    assert "No space left on device" in one_warning_line(r.stderr)
    assert b"hc.E008" in r.stdout and b"FAIL" in r.stdout  # the run finding, in the table shown
    r = hc_local(tmp_path, "--output", str(full), "--format", "json", mtu=1500)
    assert r.returncode == 2, r.stderr
    report = validate_report(r.stdout)
    assert report["status"] == "FAIL"
    (lost,) = [f for f in report["run_findings"] if f["id"] == "hc.E008"]
    assert lost["status"] == "ERROR" and str(full) in lost["message"] and "No space left" in lost["message"]
    assert_chardev(full, FULL)


@root_only
def test_output_to_a_full_device_on_a_pass_is_error_exit_3(tmp_path, validate_report):
    # never 0: the report that was asked for is lost; ERROR (3), as a lost audit record is
    full = chardev(tmp_path, "full", FULL)
    r = hc_local(tmp_path, "--output", str(full), "--format", "json")
    assert r.returncode == 3, r.stderr
    assert "No space left on device" in one_warning_line(r.stderr)
    report = validate_report(r.stdout)  # the checks ran: their result is still shown
    assert report["status"] == "ERROR" and report["nodes"][0]["status"] == "PASS"
    assert [f["id"] for f in report["run_findings"]] == ["hc.E008"]
    assert_chardev(full, FULL)


@root_only
def test_a_sweep_that_drains_a_failing_node_exits_2_when_its_output_is_lost(tmp_path, validate_report):
    from support import srun_stand_in, write_stub

    bin_dir = Path(srun_stand_in(tmp_path))
    sinfo = "\\n".join(f"n{i}|idle|Unknown|none" for i in range(1, 31))
    write_stub(bin_dir, "sinfo", f'printf "{sinfo}\\n"\n')
    calls = tmp_path / "scontrol.calls"
    write_stub(bin_dir, "scontrol", f'echo "$@" >> {calls}\nexit 0\n')
    cfg = node_config(tmp_path, mtu=1500)
    cfg.write_text(f"default_fabric: t\nslurm:\n  audit_log: {tmp_path}/audit.jsonl\nhistory: {{path: null}}\n")
    full = chardev(tmp_path, "full", FULL)
    r = run_hc("sweep", "--via", "slurm", "--nodes", "n1", "--tier", "quick", "--act", "--config", str(cfg),
               "--format", "json", "--output", str(full), env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert r.returncode == 2, r.stderr
    report = validate_report(r.stdout)
    assert [a["action"] for a in report["actions"]] == ["drain"] and "state=drain" in calls.read_text()
    assert [f["id"] for f in report["run_findings"]] == ["hc.E008"]
    assert "No space left on device" in one_warning_line(r.stderr)


@root_only
def test_output_to_a_null_device_keeps_the_verdict_and_the_device(tmp_path):
    null = chardev(tmp_path, "null", NULL)
    assert hc_local(tmp_path, "--output", str(null)).returncode == 0
    assert hc_local(tmp_path, "--output", str(null), mtu=1500).returncode == 2
    assert_chardev(null, NULL)


def test_output_to_a_symlink_is_refused(tmp_path):
    target = tmp_path / "victim"
    target.write_text("precious")
    link = tmp_path / "r.json"
    link.symlink_to(target)
    r = hc_local(tmp_path, "--output", str(link))
    assert r.returncode == 4 and "symbolic link" in one_error_line(r.stderr)
    assert os.path.islink(link) and target.read_text() == "precious"
    assert r.stdout == b""  # refused before the run: it could never be written


def test_output_to_a_fifo_reaches_its_reader(tmp_path, validate_report):
    fifo = tmp_path / "r.fifo"
    os.mkfifo(fifo)
    reader = FifoReader(fifo)
    assert reader.opened.wait(10)
    r = hc_local(tmp_path, "--output", str(fifo), mtu=1500)
    assert r.returncode == 2, r.stderr
    assert validate_report(reader.result())["status"] == "FAIL"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_output_to_a_directory_is_refused(tmp_path):
    directory = tmp_path / "out"
    directory.mkdir()
    r = hc_local(tmp_path, "--output", str(directory))
    assert r.returncode == 4 and b"directory" in r.stderr and directory.is_dir()
    assert r.stdout == b""


def test_output_to_a_descriptor_alias_goes_to_stdout(tmp_path):
    # /proc/self/fd/1 rather than /dev/stdout: code that renamed over the path (the bug
    # this guards against) cannot create a file in /proc, but could replace /dev/stdout
    r = hc_local(tmp_path, "--output", "/proc/self/fd/1", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(b'"schema": "hc.report/2"') == 2  # -o, then --format json


# ------------------------------------------------------------- hooks' report_dir


def test_hook_reports_never_follow_a_planted_link(tmp_path):
    from support import write_stub

    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "sinfo", 'printf "node1|idle|Unknown|none\\n"\n')
    write_stub(bin_dir, "scontrol", "exit 0\n")
    cfg = node_config(tmp_path)
    cfg.write_text(f"default_fabric: t\nslurm:\n  state_dir: {tmp_path}/state\n  audit_log: {tmp_path}/audit.jsonl\n"
                   f"  report_dir: {tmp_path}/reports\nhistory: {{path: null}}\n")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "reports" / "node1").mkdir(parents=True)
    (tmp_path / "reports" / "node1" / "health-latest.json").symlink_to(victim)
    r = run_hc("health", env={"HC_CONFIG": str(cfg), "HC_NODE_NAME": "node1",
                              "PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"})
    assert victim.read_text() == "precious"
    assert os.path.islink(tmp_path / "reports" / "node1" / "health-latest.json")
    assert b"symbolic link" in r.stderr + r.stdout



# --------------------------------------------- audit failures reach the run's result


def test_sweep_act_with_an_unwritable_audit_log_says_so_in_the_report(tmp_path, validate_report):
    from support import srun_stand_in, write_stub

    bin_dir = Path(srun_stand_in(tmp_path))
    sinfo = "\\n".join(f"n{i}|idle|Unknown|none" for i in range(1, 31))
    write_stub(bin_dir, "sinfo", f'printf "{sinfo}\\n"\n')
    write_stub(bin_dir, "scontrol", "exit 0\n")
    cfg = node_config(tmp_path, mtu=1500)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "audit.jsonl").symlink_to(victim)
    cfg.write_text(f"default_fabric: t\nslurm:\n  audit_log: {tmp_path}/audit.jsonl\nhistory: {{path: null}}\n")
    r = run_hc("sweep", "--via", "slurm", "--nodes", "n1", "--tier", "quick", "--act", "--config", str(cfg),
               "--format", "json", env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert r.returncode == 2, r.stderr  # the node's FAIL; never 0
    report = validate_report(r.stdout)
    assert [a["action"] for a in report["actions"]] == ["drain"]
    (lost,) = [f for f in report["run_findings"] if f["id"] == "hc.E008"]
    assert lost["status"] == "ERROR" and "symbolic link" in lost["message"]
    assert any(g["id"] == "hc.E008" for g in report["findings_summary"])
    assert victim.read_text() == "precious"
    assert b"not written" in r.stderr


def test_a_lost_audit_record_makes_a_passing_run_error():
    import datetime as dt

    from healthcheck.core.model import CheckResult, NodeResult
    from healthcheck.core.status import Status
    from healthcheck.report.build import make_report, with_run_finding

    log = AuditLog(Path("/nonexistent-dir-for-hc-test/\0bad"))
    with pytest.raises(OSError):
        log.append({"k": 1})
    now = dt.datetime(2026, 11, 22, tzinfo=dt.timezone.utc)
    ok = make_report(command="sweep", tier="quick", config_digest="d", config_path="/x", started=now, finished=now,
                     nodes=[NodeResult(node="n1", fabric="f", status=Status.PASS,
                                       checks=[CheckResult("net.mtu", Status.PASS, 0.0)])])
    after = with_run_finding(ok, log.failure_finding(scope="n1"))
    assert ok.status is Status.PASS and after.status is Status.ERROR
