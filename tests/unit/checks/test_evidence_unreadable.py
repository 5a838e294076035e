"""Evidence that could not be read is ERROR, never PASS (and never a FAIL it made up).

The kernel log as a non-root user (issue 8), the Xid window (issue 10), a GPU node
whose driver is not loaded (issue 19), and the same rule applied to every check's
provider: a refused read, an empty answer where content must exist, a missing sysfs
attribute, a tool that printed nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import msgspec
import pytest
from kmsg_ring import kmsg_records
from support import CORPUS, FIXTURES, make_fake_sysfs_ib, run_hc, run_hc_inproc

from healthcheck.checks import gpu as g
from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config, NodeConfig
from healthcheck.core.config.schema import Fabric
from healthcheck.core.errors import ParseError
from healthcheck.core.facts import ProbeContext, ProbeError, provider_for
from healthcheck.core.model import Finding, Metric
from healthcheck.core.registry import NotApplicable, select
from healthcheck.core.status import Status
from healthcheck.orchestrate.engine import run_checks
from healthcheck.parsers.gpu_common import GpuFacts
from healthcheck.parsers.xid import parse_kernel_log, since
from healthcheck.probes import gpu as gpu_probe
from healthcheck.runners.base import CommandResult
from healthcheck.runners.local import LocalRunner

CFG = Config(EMBEDDED_DEFAULT)
GENERIC = CFG.fabric("generic")
H100 = CFG.fabric("h100-ndr400")
KERNEL_LOG = FIXTURES / "kernel-log"
NVML = FIXTURES / "nvml"
BOOT_LINES = "[    0.000000] Linux version 6.1.0-18-amd64\n[    0.000000] Command line: ro quiet\n"
DMESG_EPERM = "dmesg: read kernel buffer failed: Operation not permitted\n"


class FakeRunner:
    """Answers commands from a table: argv (or argv[0]) -> (exit code, stdout, stderr) or None (not found)."""

    def __init__(self, answers: dict) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv, *, timeout_s, input=None) -> CommandResult:
        argv = tuple(argv)
        self.calls.append(argv)
        answer = self.answers.get(argv, self.answers.get(argv[0], None))
        if answer is None:
            return CommandResult(argv, None, "", f"{argv[0]}: not found", 0.0, not_found=True)
        code, out, err = answer
        return CommandResult(argv, code, out, err, 0.0)


def ctx_for(runner=None, *, root: Path | None = None, limits=GENERIC, transport="local", env=None, **params):
    return ProbeContext(runner=runner or FakeRunner({}), transport=transport, root=root or Path("/"),
                        env=env or {}, limits=limits, params=params, timeout_s=5)


def node_config(limits: Fabric) -> NodeConfig:
    return NodeConfig("gpu017", "test", limits, {})


def no_kmsg(monkeypatch, errno: int = 1, why: str = "Operation not permitted"):
    """/dev/kmsg refused as it is to a non-root user (dmesg_restrict=1)."""
    def refuse(ctx):
        raise PermissionError(errno, why)
    monkeypatch.setattr(gpu_probe, "read_kmsg_records", refuse)


def kmsg_says(monkeypatch, text: str):
    """/dev/kmsg holds text's lines, one record each (a "[uptime] " stamp its time)."""
    monkeypatch.setattr(gpu_probe, "read_kmsg_records", lambda ctx: kmsg_records(text, dict_every=0))


def found(out) -> list[tuple[str, str, str]]:
    return sorted((f.id, f.status.value, f.component) for f in out if isinstance(f, Finding))


def metric(out, name):
    values = [m.value for m in out if isinstance(m, Metric) and m.name == name]
    return values[0] if values else None


# --- issue 8: a kernel log that could not be read is not a clean one ----------------------

NON_ROOT_RUNNER = {
    "dmesg": (1, "", DMESG_EPERM),
    "journalctl": (0, "", ""),  # -q: a user outside adm/systemd-journal sees no line at all
}


def test_every_source_refused_or_empty_is_an_error_naming_each(monkeypatch):
    no_kmsg(monkeypatch)
    with pytest.raises(ProbeError) as info:
        provider_for("kernel_gpu_log", "local")(ctx_for(FakeRunner(NON_ROOT_RUNNER)))
    message = info.value.message
    assert "/dev/kmsg: Operation not permitted" in message
    assert "dmesg: exited 1: dmesg: read kernel buffer failed: Operation not permitted" in message
    assert "journalctl -k -b" in message and "printed no kernel log line" in message
    assert info.value.kind == "unreadable"


@pytest.mark.parametrize("journal", [
    (0, "", "No journal files were found.\n"),
    (0, "-- No entries --\n", ""),
    (0, ("Hint: You are currently not seeing messages from other users and the system.\n"
         "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"
         "      Pass -q to turn off this notice.\n"), ""),
    (1, "", "Failed to get journal fields: Permission denied\n"),
    None,  # journalctl not installed
])
def test_gpu_xid_is_error_not_pass_when_the_kernel_log_cannot_be_read(monkeypatch, journal):
    no_kmsg(monkeypatch)
    runner = FakeRunner({"dmesg": (1, "", DMESG_EPERM), "journalctl": journal})
    result, _ = run_checks(node_config(H100), select("quick", ["gpu.xid"]), ctx_for(runner, limits=H100))
    (check,) = result.checks
    assert check.status is Status.ERROR
    (finding,) = result.findings
    assert finding.status is Status.ERROR and finding.id.startswith("hc.E00")
    assert "/dev/kmsg" in finding.message and "dmesg" in finding.message and "journalctl" in finding.message


def test_xids_in_a_readable_source_after_refused_ones_are_found(monkeypatch):
    # dmesg refused, the journal readable (user in systemd-journal): its Xid 48 FAILs
    no_kmsg(monkeypatch)
    journal = (CORPUS / "xid-dmesg/xid48-63-94-dbe-rowremap-contained.txt").read_text()
    runner = FakeRunner({"dmesg": (1, "", DMESG_EPERM), "journalctl": (0, journal, "")})
    log = provider_for("kernel_gpu_log", "local")(ctx_for(runner, limits=H100))
    assert log.source.startswith("journalctl -k -b") and 48 in {x.code for x in log.xids}


def test_a_source_read_with_no_nvidia_line_passes_and_names_what_it_read(monkeypatch):
    kmsg_says(monkeypatch, BOOT_LINES)
    out = list(g.xid(kernel_gpu_log=provider_for("kernel_gpu_log", "local")(ctx_for(limits=H100)),
                     gpus=None, limits=H100))
    assert found(out) == []
    assert metric(out, "kernel_log") == "since boot in /dev/kmsg (2 lines read)"
    assert metric(out, "kernel_log_lines") == 2


def test_the_pass_names_the_window_and_source_it_read(monkeypatch):
    kmsg_says(monkeypatch, BOOT_LINES * 1607)
    log = provider_for("kernel_gpu_log", "local")(ctx_for(limits=H100, since=1700000000.0))
    out = list(g.xid(kernel_gpu_log=log, gpus=None, limits=H100))
    assert found(out) == []
    assert metric(out, "kernel_log") == "since 2023-11-14T22:13:20Z in /dev/kmsg (3,214 lines read)"


@pytest.mark.parametrize("content, why", [
    ("", "empty"),
    ("\n\n  \n", "empty"),
])
def test_an_empty_xid_file_is_an_error(tmp_path, content, why):
    (tmp_path / "kern.log").write_text(content)
    limits = msgspec.convert({"gpu": {"xid": {"source": "file", "file": str(tmp_path / "kern.log")}}}, Fabric)
    with pytest.raises(ProbeError) as info:
        provider_for("kernel_gpu_log", "local")(ctx_for(limits=limits))
    assert f"file {tmp_path / 'kern.log'}: printed no kernel log line" in info.value.message
    assert why in info.value.message


@pytest.mark.parametrize("special", ["/dev/zero", "fifo", "dir", "missing", "huge"])
def test_an_xid_file_that_is_not_a_readable_file_is_a_bounded_error(tmp_path, special):
    if special == "huge":  # sparse: larger than hc reads, without writing it
        path = tmp_path / "kern.log"
        with open(path, "wb") as f:
            f.truncate(65 * 1024 * 1024)
    elif special == "fifo":
        path = tmp_path / "kern.fifo"
        os.mkfifo(path)
    elif special == "dir":
        path = tmp_path
    elif special == "missing":
        path = tmp_path / "nope.log"
    else:
        path = Path(special)
    limits = msgspec.convert({"gpu": {"xid": {"source": "file", "file": str(path)}}}, Fabric)
    start = time.monotonic()
    with pytest.raises(ProbeError) as info:
        provider_for("kernel_gpu_log", "local")(ctx_for(limits=limits))
    assert time.monotonic() - start < 5  # never reads /dev/zero to its end, never blocks on the FIFO
    assert str(path) in info.value.message


def test_ssh_transport_every_command_refused_or_empty_is_an_error():
    runner = FakeRunner({"dmesg": (1, "", DMESG_EPERM), "journalctl": (0, "", "")})
    with pytest.raises(ProbeError) as info:
        provider_for("kernel_gpu_log", "ssh")(ctx_for(runner, transport="ssh"))
    assert info.value.message.count("Operation not permitted") == 2  # dmesg --time-format iso, then dmesg
    assert "journalctl" in info.value.message
    # and an empty dmesg (a cleared ring buffer) falls through to the journal, which has the lines
    journal = "2024-11-15T12:02:03+0000 gpu017 kernel: Linux version 6.1.0\n"
    runner = FakeRunner({"dmesg": (0, "", ""), "journalctl": (0, journal, "")})
    log = provider_for("kernel_gpu_log", "ssh")(ctx_for(runner, transport="ssh"))
    assert log.source.startswith("journalctl") and log.source_lines == 1


def test_a_check_never_passes_a_log_no_provider_read():
    # anything but a provider's output (no source, no lines) is not evidence either
    out = list(g.xid(kernel_gpu_log=parse_kernel_log(""), gpus=None, limits=H100))
    assert found(out) == [("hc.E003", "ERROR", "")]


def _as_nobody(fn) -> dict:
    """fn() in a forked child that dropped to nobody/nogroup; its JSON-able result."""
    import pwd

    nobody = pwd.getpwnam("nobody")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root for good, then run hc's own code, already imported
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            data = json.dumps(fn()).encode()
        except BaseException as exc:
            data = json.dumps({"crash": f"{type(exc).__name__}: {exc}"}).encode()
        os.write(write_end, data)
        os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


def test_real_kmsg_and_dmesg_refusal_as_nobody_is_not_a_pass():
    """The strongest form: hc's gpu.xid as nobody on this machine, /dev/kmsg and dmesg refused for real."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to nobody")
    try:
        if Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() != "1":
            pytest.skip("dmesg_restrict is 0: a non-root user may read the kernel log here")
    except OSError:
        pytest.skip("no /proc/sys/kernel/dmesg_restrict")

    def check() -> dict:
        ctx = ProbeContext(runner=LocalRunner(), limits=H100, timeout_s=10,
                           env={"HC_NVML_REPLAY": str(NVML / "healthy-8xh100.json")})
        result, _ = run_checks(node_config(H100), select("quick", ["gpu.xid"]), ctx)
        window = [m.value for m in result.metrics if m.name == "kernel_log"]
        return {"uid": os.getuid(), "status": result.checks[0].status.value, "window": window,
                "findings": [(f.id, f.status.value, f.message) for f in result.findings]}

    check()  # as root first: every module the path needs is imported before the child drops root
    got = _as_nobody(check)
    assert "crash" not in got, got
    assert got["uid"] != 0
    if got["status"] == "PASS":
        # only where a source was really read (a journal readable by nobody)
        assert got["window"] and "lines read" in got["window"][0] and "(0 lines" not in got["window"][0]
        return
    assert got["status"] == "ERROR", got
    ((fid, status, message),) = got["findings"]
    assert fid.startswith("hc.E00") and status == "ERROR"
    assert "/dev/kmsg: Operation not permitted" in message
    assert "dmesg: exited 1" in message and "Operation not permitted" in message.split("dmesg:", 1)[1]


# --- number-less GPU failures: gpu.xid FAILs and names the PCI bus id --------------------

def read_log(text: str):
    return msgspec.structs.replace(parse_kernel_log(text, year=2024), source="dmesg",
                                   source_lines=len(text.splitlines()))


@pytest.mark.parametrize("name, bus", [
    ("syslog-probe-fallen-off-bus-three-lines.txt", "0000:5d:00.0"),
    ("dmesg-probe-fallen-off-bus-continuation.txt", "0000:5d:00.0"),
    ("bare-not-responding-one-line.txt", "0000:0e:00.0"),
    ("no-timestamp-legacy-fallen-off-bus.txt", "0000:91:00.0"),
])
def test_fallen_off_the_bus_without_an_xid_number_fails(name, bus):
    out = list(g.xid(kernel_gpu_log=read_log((KERNEL_LOG / name).read_text()), gpus=None, limits=GENERIC))
    fails = [f for f in out if isinstance(f, Finding) and f.component == f"{bus}:xid79"]
    assert len(fails) == 1 and fails[0].status is Status.FAIL and fails[0].id == "gpu.E020"
    assert bus in fails[0].message and "fallen off the bus" in fails[0].message
    assert "no Xid number" in fails[0].message


def test_fallen_off_the_bus_names_the_gpu_index_when_nvml_knows_the_bus():
    from test_checks_gpu import facts, healthy_gpu

    gpus = facts(*[healthy_gpu(i, pci_bus_id=f"0000:{0x18 + i:02x}:00.0") for i in range(8)])
    gpus = msgspec.structs.replace(gpus, gpus=[*gpus.gpus[:5], healthy_gpu(5, pci_bus_id="0000:5d:00.0")])
    out = list(g.xid(kernel_gpu_log=read_log((KERNEL_LOG / "dmesg-probe-fallen-off-bus-continuation.txt").read_text()),
                     gpus=gpus, limits=H100))
    (fail,) = [f for f in out if isinstance(f, Finding)]
    assert fail.component == "GPU5:xid79" and "GPU5 (0000:5d:00.0)" in fail.message


def test_rm_init_adapter_failed_fails_naming_the_bus():
    out = list(g.xid(kernel_gpu_log=read_log((KERNEL_LOG / "dmesg-rminitadapter-failed-gsp.txt").read_text()),
                     gpus=None, limits=GENERIC))
    assert found(out) == [("gpu.E022", "FAIL", "0000:01:00.0:init-failed")]
    (fail,) = [f for f in out if isinstance(f, Finding)]
    assert "0000:01:00.0" in fail.message and "RmInitAdapter failed" in fail.evidence
    old = list(g.xid(kernel_gpu_log=read_log((KERNEL_LOG / "syslog-old-rminitadapter-failed-no-bus-id.txt").read_text()),
                     gpus=None, limits=GENERIC))
    assert found(old) == [("gpu.E022", "FAIL", "GPU?:init-failed")]


def test_a_crash_dump_alone_fails_and_one_after_an_xid_is_the_same_incident():
    lines = (KERNEL_LOG / "dmesg-xid79-serial-crash-dump.txt").read_text().splitlines()
    # the same real lines without the Xid and "fallen off" ones: a dump, and the GPU named before it
    alone = "\n".join(line for line in lines if "Xid" not in line and "fallen off" not in line)
    out = list(g.xid(kernel_gpu_log=read_log(alone), gpus=None, limits=GENERIC))
    assert found(out) == [("gpu.E023", "FAIL", "0000:5d:00.0:crash-dump")]
    both = list(g.xid(kernel_gpu_log=read_log("\n".join(lines)), gpus=None, limits=GENERIC))
    assert found(both) == [("gpu.E020", "FAIL", "0000:5d:00.0:xid79")]
    old = list(g.xid(kernel_gpu_log=read_log((KERNEL_LOG / "syslog-old-driver-xid79-crash-dump.txt").read_text()),
                     gpus=None, limits=GENERIC))
    assert found(old) == [("gpu.E020", "FAIL", "0000:01:00.0:xid79")]


def test_numberless_failures_of_another_jobs_gpu_are_not_this_prologues():
    from test_checks_gpu import healthy_gpu

    scoped = GpuFacts(source="t", gpus=[healthy_gpu(0, pci_bus_id="0000:01:00.0"), healthy_gpu(1)], scoped_to=[1])
    out = list(g.xid(kernel_gpu_log=read_log((KERNEL_LOG / "dmesg-rminitadapter-failed-gsp.txt").read_text()),
                     gpus=scoped, limits=H100))
    assert found(out) == []


def test_the_new_shapes_stay_linear_on_megabyte_lines():
    shapes = [
        lambda n: "NVRM: The NVIDIA GPU 0000:5d:00.0 " * (n // 34),
        lambda n: "NVRM: GPU 0000:01:00.0:" + " " * n + "RmInitAdapter failed!",
        lambda n: "NVRM: GPU 0000:01:00.0: " * (n // 24),
        lambda n: "NVRM: A GPU crash dump has been created. " * (n // 41),
        lambda n: "NVRM: GPU at 0000:06:00.0" + " " * n + "has fallen off the bus.",
        lambda n: "\n".join(["NVRM: The NVIDIA GPU 0000:5d:00.0"] + ["x" * (n // 4)] * 4),
    ]

    def cost(n: int, repeat: int) -> float:
        start = time.process_time()
        for _ in range(repeat):
            for shape in shapes:
                try:
                    parse_kernel_log(shape(n))
                except ParseError:
                    pass  # garbage is allowed to be refused; it must be refused fast
        return (time.process_time() - start) / repeat

    small = cost(1_000, 50)
    big = cost(1_000_000, 1)
    # linear: ~1000x the small input's cost; quadratic would be ~1,000,000x
    assert big < max(0.5, 20 * 1000 * small), (small, big)


# --- issue 10: the window can never hide every event --------------------------------------

DBE_LOG = (CORPUS / "xid-dmesg/xid48-63-94-dbe-rowremap-contained.txt").read_text()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), "nan", "1e400", -5.0, 1e18, True,
                                   "garbage", [1]])
def test_a_since_that_is_no_real_time_reads_since_boot(monkeypatch, value):
    kmsg_says(monkeypatch, DBE_LOG)
    log = provider_for("kernel_gpu_log", "local")(ctx_for(limits=H100, since=value))
    assert 48 in {x.code for x in log.xids}  # the double-bit ECC error is not hidden
    out = list(g.xid(kernel_gpu_log=log, gpus=None, limits=H100))
    assert ("gpu.E020", "FAIL", "0000:19:00.0:xid48") in found(out)
    assert log.since is None and "read since boot" in log.window_note


def test_a_future_window_is_read_as_asked_and_said():
    start, note = gpu_probe.window(4_000_000_000.0, now=1_800_000_000.0)
    assert start == 4_000_000_000.0 and "future" in note
    assert gpu_probe.window(1_700_000_000, now=1_800_000_000.0) == (1_700_000_000.0, None)
    assert gpu_probe.window(None) == (None, None)


@pytest.mark.parametrize("t", [float("nan"), float("inf")])
def test_since_helper_never_hides_everything(t):
    log = parse_kernel_log(DBE_LOG)
    assert since(log, t).xids == log.xids


@pytest.mark.parametrize("value, words", [
    ("nan", "not a finite time"), ("inf", "not a finite time"), ("1e400", "not a finite time"),
    ("-inf", "not a finite time"), ("-5", "between 1970 and 9999"), ("1e18", "between 1970 and 9999"),
    ("0001-01-01T00:00:00Z", "between 1970 and 9999"), ("yesterday", "not 'boot'"),
])
def test_cli_rejects_since_that_is_no_real_time(value, words):
    r = run_hc_inproc("node", "--local", "--since", value, "--checks", "gpu.xid")
    assert r.returncode == 4
    err = r.stderr.decode().strip()
    assert len(err.splitlines()) == 1 and words in err


def test_cli_warns_on_a_future_window_and_the_check_names_it(tmp_path):
    (tmp_path / "kern.log").write_text(DBE_LOG)
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "f.yaml").write_text(
        f"extends: h100-ndr400\ngpu:\n  xid: {{source: file, file: {tmp_path}/kern.log}}\n")
    (tmp_path / "hc.yaml").write_text("default_fabric: f\n")
    r = run_hc_inproc("node", "--local", "--config", str(tmp_path / "hc.yaml"), "--since", "2999-01-01T00:00:00Z",
               "--checks", "gpu.xid", "--format", "json",
               env={"HC_NODE_NAME": "gpu017", "HC_NVML_REPLAY": str(NVML / "healthy-8xh100.json")})
    assert "warning" in r.stderr.decode() and "future" in r.stderr.decode()
    node = json.loads(r.stdout)["nodes"][0]
    (window,) = [m["value"] for m in node["metrics"] if m["name"] == "kernel_log"]
    assert window.startswith("since 2999-01-01T00:00:00Z in file ") and "future" in window


# --- issue 19: NVML down is not "no GPU here" while the PCI bus shows one ------------------

def fake_pci(root: Path, devices: dict[str, tuple[str, str]]) -> Path:
    base = root / "sys/bus/pci/devices"
    base.mkdir(parents=True, exist_ok=True)
    for bus, (vendor, cls) in devices.items():
        (base / bus).mkdir()
        (base / bus / "vendor").write_text(vendor + "\n")
        (base / bus / "class").write_text(cls + "\n")
    return base


HGX_PCI = {
    "0000:00:00.0": ("0x8086", "0x060000"),  # host bridge
    "0000:05:00.0": ("0x10de", "0x068000"),  # NVSwitch: a bridge, not a GPU
    "0000:3b:00.0": ("0x10de", "0x030200"),  # H100 SXM: 3D controller
    "0000:3b:00.1": ("0x10de", "0x040300"),  # an audio function
    "0000:41:00.0": ("0x10de", "0x030000"),  # VGA-compatible NVIDIA GPU
}


def test_driver_not_loaded_on_a_gpu_node_fails_naming_the_pci_addresses(tmp_path):
    fake_pci(tmp_path, HGX_PCI)
    facts = provider_for("gpus", "local")(ctx_for(root=tmp_path))  # no /proc/driver/nvidia under it
    assert facts.init_error and [lost.pci_bus_id for lost in facts.lost] == ["0000:3b:00.0", "0000:41:00.0"]
    out = list(g.count(gpus=facts, limits=GENERIC))
    assert found(out) == [("gpu.E005", "FAIL", "")]
    assert "0000:3b:00.0, 0000:41:00.0" in out[0].message and "cannot run GPU jobs" in out[0].message
    with pytest.raises(NotApplicable, match="see gpu.count"):
        list(g.ecc(gpus=facts, limits=GENERIC))
    # and where the fabric expects GPUs, gpu.E001 names them too
    out = list(g.count(gpus=facts, limits=H100))
    assert found(out) == [("gpu.E001", "FAIL", "")] and "0000:3b:00.0" in out[0].message


def test_no_nvidia_gpu_on_the_bus_is_still_no_gpu_here(tmp_path):
    fake_pci(tmp_path, {k: v for k, v in HGX_PCI.items() if v[1] != "0x030200" and v[1] != "0x030000"})
    facts = provider_for("gpus", "local")(ctx_for(root=tmp_path))
    assert facts.lost == []
    with pytest.raises(NotApplicable, match="no NVIDIA GPU here"):
        list(g.count(gpus=facts, limits=GENERIC))
    # no PCI bus at all (a virtio-mmio VM): no PCI GPU either
    assert provider_for("gpus", "local")(ctx_for(root=tmp_path / "empty")).lost == []


def test_a_pci_bus_that_cannot_be_read_is_an_error_not_no_gpu(tmp_path):
    (tmp_path / "sys/bus/pci").mkdir(parents=True)
    (tmp_path / "sys/bus/pci/devices").write_text("not a directory")
    with pytest.raises(ProbeError, match="whether this node has NVIDIA GPUs is unknown"):
        provider_for("gpus", "local")(ctx_for(root=tmp_path))


def skip_where_nvml_starts() -> None:
    """These tests need NVML to fail to start, as on a machine without an NVIDIA driver."""
    import pynvml

    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("NVML starts on this machine")
    except pynvml.NVMLError:
        pass


def test_nvml_that_fails_to_start_looks_at_the_bus_too(tmp_path):
    skip_where_nvml_starts()
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)  # a driver dir, so NVML itself is asked
    fake_pci(tmp_path, HGX_PCI)
    facts = provider_for("gpus", "local")(ctx_for(root=tmp_path))
    assert facts.init_error and len(facts.lost) == 2
    result, _ = run_checks(node_config(GENERIC), select("quick", ["gpu.count"]), ctx_for(root=tmp_path))
    assert [(f.id, f.status) for f in result.findings] == [("gpu.E005", Status.FAIL)]


def test_the_agentless_pci_scan_reads_a_tree_like_the_local_one(tmp_path):
    base = fake_pci(tmp_path, HGX_PCI)
    (base / "0000:41:00.0" / "driver").symlink_to(tmp_path)  # some driver bound
    script = gpu_probe.PCI_SCAN[2].replace(gpu_probe.PCI_DEVICES, str(base))
    out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=True).stdout
    assert [bus for bus, _, _ in gpu_probe.parse_pci_scan(out)] == ["0000:3b:00.0", "0000:41:00.0"]
    assert gpu_probe.parse_pci_scan("hc-pci-none\n") == []
    for broken in ("", "hc-pci: 0000:3b:00.0 0x030200\n", "hc-pci-error: 0000:3b:00.0\nhc-pci-end\n"):
        with pytest.raises(ProbeError):
            gpu_probe.parse_pci_scan(broken)


def test_agentless_nvidia_smi_missing_with_gpus_on_the_bus_fails():
    scan = "hc-pci: 0000:3b:00.0 0x030200 \nhc-pci-end\n"
    runner = FakeRunner({gpu_probe.PCI_SCAN: (0, scan, "")})  # nvidia-smi: not found
    facts = provider_for("gpus", "ssh")(ctx_for(runner, transport="ssh"))
    assert found(g.count(gpus=facts, limits=GENERIC)) == [("gpu.E005", "FAIL", "")]


def test_gpu_record_without_nvml_exits_3_with_one_line(tmp_path):
    skip_where_nvml_starts()
    r = run_hc("gpu", "record", "-o", str(tmp_path / "rec.json"))
    assert r.returncode == 3 and len(r.stderr.decode().strip().splitlines()) == 1
    assert "nothing to record" in r.stderr.decode() and not (tmp_path / "rec.json").exists()


# --- the rule applied to every other check -------------------------------------------------

def test_gpu_figures_the_fabric_sets_that_nvml_cannot_give_are_errors():
    from test_checks_gpu import with_gpu

    strict = msgspec.convert({"gpu": {"temp_max_c": 85, "pcie_width": 16, "pcie_gen": 5, "model": "M",
                                      "vbios_version": "1", "driver_version": "2"}}, Fabric)
    assert ("hc.E001", "ERROR", "GPU2") in found(g.clocks(gpus=with_gpu(2, temperature_c=None), limits=strict))
    assert ("hc.E001", "ERROR", "GPU2") in found(g.clocks(gpus=with_gpu(2, throttle_reasons=None), limits=strict))
    assert found(g.pcie(gpus=with_gpu(2, pcie_width_current=None, pcie_gen_current=None), limits=strict)) == [
        ("hc.E001", "ERROR", "GPU2"), ("hc.E001", "ERROR", "GPU2")]
    assert ("hc.E001", "ERROR", "GPU2") in found(g.count(gpus=with_gpu(2, name=None), limits=strict))
    assert ("hc.E001", "ERROR", "GPU2") in found(g.versions(gpus=with_gpu(2, vbios_version=None), shared_libs=None,
                                                            limits=strict))
    nodriver = msgspec.structs.replace(with_gpu(0), driver_version=None)
    assert ("hc.E001", "ERROR", "driver") in found(g.versions(gpus=nodriver, shared_libs=None, limits=strict))
    assert found(g.processes(gpus=with_gpu(4, processes=None), limits=H100)) == [("hc.E001", "ERROR", "GPU4")]


def test_gpu_checks_never_pass_having_judged_no_gpu():
    from healthcheck.parsers.gpu_common import LostGpu

    all_lost = GpuFacts(source="t", lost=[LostGpu(pci_bus_id=None, index=i, error="NVMLError_GpuIsLost")
                                          for i in range(8)])
    for check in (g.ecc, g.clocks, g.pcie, g.nvlink, g.processes):
        with pytest.raises(NotApplicable, match="see gpu.count"):
            list(check(all_lost, H100))
    assert {f for f, *_ in found(g.count(gpus=all_lost, limits=H100))} == {"gpu.E004"}


def test_ib_hca_whose_ports_or_state_cannot_be_read_is_an_error_not_a_fail(tmp_path):
    make_fake_sysfs_ib(tmp_path, ["mlx5_0", "mlx5_1", "mlx5_2"])
    (tmp_path / "sys/class/infiniband/mlx5_1/ports/1/state").unlink()
    shutil.rmtree(tmp_path / "sys/class/infiniband/mlx5_2/ports")
    (tmp_path / "sys/class/infiniband/mlx5_2/ports").write_text("not a directory")
    ctx = ctx_for(root=tmp_path)
    ports = provider_for("ib_ports", "local")(ctx)
    assert [p.ca for p in ports.ports] == ["mlx5_0"] and len(ports.errors) == 2
    from healthcheck.checks.ib import port_state

    limits = msgspec.convert({"ib": {"hca_count": 3}}, Fabric)
    out = list(port_state(ib_ports=ports, limits=limits))
    assert found(out) == [("hc.E003", "ERROR", "")]
    assert "mlx5_1/1: cannot read state" in out[0].message and "mlx5_2: cannot list its ports" in out[0].message


def test_ib_rate_and_counters_that_cannot_be_read_are_errors(tmp_path):
    from healthcheck.checks.ib import counters, port_state

    make_fake_sysfs_ib(tmp_path, ["mlx5_0"])
    port = tmp_path / "sys/class/infiniband/mlx5_0/ports/1"
    (port / "rate").unlink(missing_ok=True)
    shutil.rmtree(port / "counters")
    ctx = ctx_for(root=tmp_path)
    limits = msgspec.convert({"ib": {"rate_gbps": 400, "counters_fail": {"symbol_error": 10}}}, Fabric)
    assert found(port_state(ib_ports=provider_for("ib_ports", "local")(ctx), limits=limits)) == [
        ("hc.E001", "ERROR", "mlx5_0/1")]
    assert found(counters(ib_counters=provider_for("ib_counters", "local")(ctx), limits=limits)) == [
        ("hc.E001", "ERROR", "mlx5_0/1:counters")]


def test_ip_link_that_lists_nothing_is_an_error():
    runner = FakeRunner({"ip": (0, "[]", "")})
    with pytest.raises(ProbeError, match="not even lo"):
        provider_for("ip_links", "local")(ctx_for(runner))


def test_a_path_hc_may_not_stat_is_an_error_not_a_missing_path(monkeypatch, tmp_path):
    from healthcheck.checks.sys import disk

    def refuse(path):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(os, "statvfs", refuse)
    limits = msgspec.convert({"sys": {"disk_free_min_gib": {"/scratch": 1}}}, Fabric)
    space = provider_for("disk_space", "local")(ctx_for(root=tmp_path, limits=limits))
    assert found(disk(disk_space=space, limits=limits)) == [("hc.E003", "ERROR", "/scratch")]


def test_agentless_stat_failures_are_told_apart():
    from healthcheck.checks.sys import disk

    limits = msgspec.convert({"sys": {"disk_free_min_gib": {"/a": 1, "/b": 1, "/c": 1, "/d": 1}}}, Fabric)
    stderr = ("stat: cannot read file system information for '/a': No such file or directory\n"
              "stat: cannot read file system information for '/b': Permission denied\n"
              "stat: cannot read file system information for '/c': Transport endpoint is not connected\n")
    runner = FakeRunner({"stat": (1, "", stderr)})
    space = provider_for("disk_space", "ssh")(ctx_for(runner, limits=limits, transport="ssh"))
    assert found(disk(disk_space=space, limits=limits)) == [("hc.E003", "ERROR", "/b"), ("hc.E003", "ERROR", "/d"),
                                                            ("sys.E003", "FAIL", "/a"), ("sys.E003", "FAIL", "/c")]


def test_a_service_missing_from_a_hidden_process_list_is_an_error_not_a_fail(tmp_path):
    from healthcheck.checks.sys import services

    proc = tmp_path / "proc/4242"
    proc.mkdir(parents=True)
    (proc / "cmdline").write_bytes(b"/usr/bin/bash\0")
    (proc / "comm").write_text("bash\n")
    limits = msgspec.convert({"sys": {"services": {"fabricmanager": "nv-fabricmanager"}}}, Fabric)
    procs = provider_for("processes", "local")(ctx_for(root=tmp_path, limits=limits))
    assert procs.incomplete and "hidepid" in procs.incomplete  # no PID 1: others' processes are hidden
    assert found(services(processes=procs, limits=limits)) == [("hc.E003", "ERROR", "fabricmanager")]
    (tmp_path / "proc/1").mkdir()
    (tmp_path / "proc/1/cmdline").write_bytes(b"/sbin/init\0")
    (tmp_path / "proc/1/comm").write_text("systemd\n")
    procs = provider_for("processes", "local")(ctx_for(root=tmp_path, limits=limits))
    assert procs.incomplete is None
    assert found(services(processes=procs, limits=limits)) == [("sys.E005", "FAIL", "fabricmanager")]


def test_agentless_ps_without_pid_1_is_incomplete():
    runner = FakeRunner({("ps", "-e", "-o", "pid=,comm="): (0, " 4242 bash\n", ""),
                         ("ps", "-e", "-o", "pid=,args="): (0, " 4242 /usr/bin/bash -l\n", "")})
    procs = provider_for("processes", "ssh")(ctx_for(runner, transport="ssh"))
    assert procs.names == {"bash"} and procs.incomplete


def test_real_ps_sees_pid_1_here():
    procs = provider_for("processes", "ssh")(ProbeContext(runner=LocalRunner(), transport="ssh", timeout_s=10))
    assert procs.incomplete is None and procs.names
