"""Kernel log shapes from the field (issue 20): NVLink5 Xids, `caused by previous Xid`, the
driver's load banner, GSP errors, PCIe AER events, multi-line NVRM messages and a GPU the
driver refused at probe. Every log here is a real tuning file
(tests/fixtures/field/{issues,repos,device}/xid/, sources in their SOURCES.md) or the
older kernel-log fixtures; a shape made from one (indented, quoted, cut, concatenated)
is made in the test by a transformation and says so."""

from __future__ import annotations

import time

import msgspec
import pytest
from support import CORPUS, FIXTURES

from healthcheck.checks import gpu as g
from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.model import Finding
from healthcheck.parsers.xid import INIT_FAILED, PROBE, KernelGpuLog, parse_kernel_log, since

FIELD = FIXTURES / "field"
KERNEL_LOG = FIXTURES / "kernel-log"
GENERIC = Config(EMBEDDED_DEFAULT).fabric("generic")


def read(name: str) -> str:
    return (FIELD / name).read_text()


def parse(name: str) -> KernelGpuLog:
    return parse_kernel_log(read(name), year=2024)


# --- NVLink5 (Blackwell) Xids 144-150: unit, severity, link, status words ----------------


@pytest.mark.parametrize("name, code, unit, severity, link, first", [
    ("issues/xid/xid145-rlw-rxpipe-nonfatal-link13.txt", 145, "RLW_RXPIPE", "Nonfatal", 13, "0x0409a0c2"),
    ("issues/xid/xid144-saw-mvb-nonfatal-link0.txt", 144, "SAW_MVB", "Nonfatal", 0, "0x00000001"),
    ("repos/xid/xid149-netir-fatal-link-minus1-gb200-bare-line.txt", 149, "NETIR", "Fatal", -1, "0x000fe406"),
])
def test_an_nvlink5_xid_names_its_unit_severity_link_and_status(name, code, unit, severity, link, first):
    (event,) = parse(name).xids
    assert (event.code, event.unit, event.severity, event.link) == (code, unit, severity, link)
    assert event.status[0] == first and len(event.status) == 6
    # the same real line behind a dmesg stamp and a journal prefix, and cut before its status words
    line = read(name).strip()
    for shaped in (f"[ 1843.308145] {line}\n", f"Feb 14 05:03:42 gpu-1 kernel: {line}\n"):
        (again,) = parse_kernel_log(shaped).xids
        assert (again.unit, again.severity, again.link, again.status) == (unit, severity, link, event.status)
    (cut,) = parse_kernel_log(line[: line.index(" (0x")] + "\n").xids
    assert (cut.unit, cut.severity, cut.link, cut.status) == (unit, severity, link, [])
    # the same cut with no line end after it: `Link 13` may be the head of `Link 130`, not read
    (cut,) = parse_kernel_log(line[: line.index(" (0x")]).xids
    assert (cut.code, cut.link) == (code, None)


def test_an_older_xid_has_no_nvlink5_fields():
    (event,) = parse("issues/xid/xid94-contained-ecc-one-line-kmsg.txt").xids
    assert (event.unit, event.severity, event.link, event.status) == (None, None, None, [])


# --- "caused by previous Xid N" -------------------------------------------------------------


def test_caused_by_previous_xid_is_surfaced():
    log = parse("issues/xid/xid45-caused-by-previous-xid149-145-journal.txt")
    assert [e.code for e in log.xids] == [45] * 8
    assert [e.caused_by for e in log.xids] == [149, 145, 145, 145, 149, 145, 145, None]
    assert log.xids[0].process == "python3" and log.xids[0].pci_bus_id == "0000:dc:00.0"


# --- the driver's load banner ------------------------------------------------------------


@pytest.mark.parametrize("path, version", [
    (FIELD / "device/xid/h100-dmesg-nvrm-load-no-xid.txt", "580.159.04"),  # Open Kernel Module for x86_64
    (FIELD / "issues/xid/fallen-off-bus-no-xid-multiline-570.txt", "570.158.01"),
    (KERNEL_LOG / "dmesg-probe-fallen-off-bus-continuation.txt", "525.125.06"),  # "x86_64 Kernel Module"
])
def test_the_load_banner_gives_the_driver_version(path, version):
    log = parse_kernel_log(path.read_text(), year=2024)
    assert log.driver_version == version


def test_a_log_without_a_banner_has_no_driver_version():
    assert parse("issues/xid/xid94-contained-ecc-one-line-kmsg.txt").driver_version is None


# --- GSP errors without an Xid number, with the driver version beside them ---------------


def test_gsp_errors_at_driver_load_carry_the_driver_version():
    banner = read("device/xid/h100-dmesg-nvrm-load-no-xid.txt").splitlines()[2]  # the real 580.159.04 banner
    gsp = (KERNEL_LOG / "dmesg-rminitadapter-failed-gsp.txt").read_text().splitlines()
    for lines in ([banner, *gsp], [*gsp, banner]):  # the banner before the errors, or printed after them
        log = parse_kernel_log("\n".join(lines))
        assert [e.message for e in log.gsp_errors] == [
            gsp[0].split("NVRM: ", 1)[1], "RmInitAdapter: Cannot initialize GSP firmware RM"]
        assert {e.driver_version for e in log.gsp_errors} == {"580.159.04"}
        assert [(f.kind, f.pci_bus_id) for f in log.faults] == [(INIT_FAILED, "0000:01:00.0")]  # as before


def test_the_gsp_rpc_history_under_an_xid_119_is_no_gsp_error():
    log = parse_kernel_log((CORPUS / "xid-dmesg/xid119-gsp-rpc-timeout.txt").read_text())
    assert len(log.xids) == 5  # the timeouts are Xid 119s
    (rate,) = log.gsp_errors  # only the driver's own "GSP RPC error" line, naming the bus
    assert rate.message.startswith("Rate limiting GSP RPC error prints") and rate.pci_bus_id == "0000:9b:00.0"


# --- PCIe AER events around an Xid -------------------------------------------------------


def test_aer_events_around_an_xid_are_read_with_their_details():
    log = parse("issues/xid/aer-surprise-down-then-xid79-tesla.txt")
    assert [(e.code, e.pci_bus_id) for e in log.xids] == [(79, "0000:02:00.0")]
    corrected, fatal = log.aer
    assert (corrected.severity, corrected.type, corrected.errors) == (
        "Corrected", "Data Link Layer", ["Replay Timer Timeout"])
    assert (fatal.severity, fatal.type, fatal.errors, fatal.first_error) == (
        "Uncorrected (Fatal)", "Transaction Layer", ["Surprise Down Error"], "Surprise Down Error")
    assert {(e.pci_bus_id, e.driver, e.pci_device_id, e.source) for e in log.aer} == {
        ("0000:00:02.0", "pcieport", "8086:6f04", "id=0010")}
    assert (fatal.status, fatal.mask) == ("00000020", "00000000")
    assert fatal.line.startswith("[74889.542031] pcieport")


def test_a_lone_aer_received_line_is_an_event_naming_its_source():
    log = parse("issues/xid/xid79-pid0-crash-dump-multiline-then-aer-corrected.txt")
    (event,) = log.aer
    assert (event.severity, event.pci_bus_id, event.source) == ("Corrected", "0000:00:01.1", "0000:00:00.0")


def test_aer_lines_alone_are_a_kernel_log_with_no_gpu_event():
    lines = read("issues/xid/aer-surprise-down-then-xid79-tesla.txt").splitlines()
    log = parse_kernel_log("\n".join(line for line in lines if "pcieport" in line))  # the AER lines only
    assert (log.xids, log.faults, len(log.aer)) == ([], [], 2)


def test_since_filters_aer_and_gsp_events_by_time():
    log = parse_kernel_log(read("issues/xid/aer-surprise-down-then-xid79-tesla.txt"), boot_time=1_700_000_000.0)
    assert len(since(log, 1_700_000_000.0 + 74800).aer) == 1 and len(since(log, 1_700_000_000.0).aer) == 2


# --- multi-line NVRM messages and a GPU refused at probe ---------------------------------


@pytest.mark.parametrize("name, bus, device", [
    ("issues/xid/fallen-off-bus-no-xid-multiline-570.txt", "0000:b3:00.0", "10de:26b5"),  # dmesg, 15 spaces
    ("repos/xid/b200-fallen-off-bus-at-probe-multiline-nvrm-journal.txt", "0000:18:00.0", "10de:2901"),  # journal
])
def test_a_multi_line_nvrm_message_is_read_as_one(name, bus, device):
    text = read(name)
    (event,) = parse_kernel_log(text, year=2024).xids
    assert (event.code, event.pci_bus_id, event.legacy, event.pci_device_id) == (79, bus, True, device)
    assert "NVRM: The NVIDIA GPU" in event.line and event.line in text.splitlines()
    # the same real lines indented as a markdown code block, and quoted in a markdown reply
    for shaped in ("\n".join("    " + line for line in text.splitlines()),
                   "\n".join("> " + line for line in text.splitlines())):
        (again,) = parse_kernel_log(shaped, year=2024).xids
        assert (again.pci_bus_id, again.pci_device_id) == (bus, device)


def test_lines_indented_alike_are_separate_messages():
    # the real journal lines, each indented 4 spaces (a code block): eight Xids, none joined
    text = read("issues/xid/xid45-caused-by-previous-xid149-145-journal.txt")
    log = parse_kernel_log("\n".join("    " + line.removeprefix("kernel: ") for line in text.splitlines()))
    assert len(log.xids) == 8


def test_a_probe_failure_is_an_init_failed_fault_with_the_device_id():
    log = parse("repos/xid/b200-fallen-off-bus-at-probe-multiline-nvrm-journal.txt")
    (fault,) = log.faults
    assert (fault.kind, fault.stage, fault.pci_bus_id, fault.pci_device_id) == (
        INIT_FAILED, PROBE, "0000:18:00.0", "10de:2901")
    assert "probe of 0000:18:00.0 failed with error -1" in fault.line


def _kernel_log(text: str) -> KernelGpuLog:
    return msgspec.structs.replace(parse_kernel_log(text, year=2024), source="dmesg",
                                   source_lines=len(text.splitlines()))


def _found(out) -> list[tuple[str, str, str]]:
    return sorted((f.id, f.status.value, f.component) for f in out if isinstance(f, Finding))


def test_the_check_counts_a_gpu_lost_and_refused_at_probe_once():
    text = read("repos/xid/b200-fallen-off-bus-at-probe-multiline-nvrm-journal.txt")
    out = list(g.xid(kernel_gpu_log=_kernel_log(text), gpus=None, limits=GENERIC))
    assert _found(out) == [("gpu.E020", "FAIL", "0000:18:00.0:xid79")]  # as before the probe line was read
    # the probe line alone (the lines naming the GPU lost taken out): the driver refused a GPU
    alone = "\n".join(line for line in text.splitlines() if "NVRM" not in line)
    out = list(g.xid(kernel_gpu_log=_kernel_log(alone), gpus=None, limits=GENERIC))
    assert _found(out) == [("gpu.E022", "FAIL", "0000:18:00.0:init-failed")]
    (fail,) = [f for f in out if isinstance(f, Finding)]
    assert "refused it at probe" in fail.message


def test_aer_and_gsp_events_alone_do_not_fail_the_check():
    lines = read("issues/xid/aer-surprise-down-then-xid79-tesla.txt").splitlines()
    aer = [line for line in lines if "pcieport" in line]
    gsp = (KERNEL_LOG / "dmesg-rminitadapter-failed-gsp.txt").read_text().splitlines()[:2]  # no RmInitAdapter failed
    log = _kernel_log("\n".join([*aer, *gsp]))
    assert log.aer and log.gsp_errors
    assert _found(g.xid(kernel_gpu_log=log, gpus=None, limits=GENERIC)) == []


# --- hostile: bounded joins, linear time -------------------------------------------------


def _seconds(text: str) -> float:
    start = time.process_time()
    parse_kernel_log(text)
    return time.process_time() - start


def test_continuation_and_aer_floods_cost_their_length():
    head = read("issues/xid/fallen-off-bus-no-xid-multiline-570.txt").splitlines()
    plain = "\n".join([head[0]] * 20_000)  # stamped NVRM lines: the baseline
    continued = "\n".join([head[0]] + [head[1]] * 20_000)  # one stamp, 20,000 continuation lines
    aer = read("issues/xid/aer-surprise-down-then-xid79-tesla.txt").splitlines()
    details = "\n".join([aer[4]] + [aer[7]] * 20_000)  # one AER event, 20,000 error-name lines
    baseline = _seconds(plain)
    assert _seconds(continued) < 10 * baseline + 0.5
    assert _seconds(details) < 10 * baseline + 0.5
    log = parse_kernel_log(details)
    assert len(log.aer[0].errors) <= 32  # names kept per event are bounded


def test_megabyte_lines_of_each_new_shape_are_fast_and_safe():
    lines = [read("issues/xid/aer-surprise-down-then-xid79-tesla.txt").splitlines()[5],
             read("device/xid/h100-dmesg-nvrm-load-no-xid.txt").splitlines()[2],
             read("issues/xid/xid145-rlw-rxpipe-nonfatal-link13.txt").strip(),
             (KERNEL_LOG / "dmesg-rminitadapter-failed-gsp.txt").read_text().splitlines()[1]]
    baseline = _seconds("[ 1.0] " + "x" * 1_000_000)
    for line in lines:
        for hostile in (line + " " + "0x0 " * 250_000, line[:40] + "(" * 1_000_000, line + " GSP " * 200_000):
            assert _seconds(hostile) < 20 * baseline + 1.0


# --- bus ids redacted in a paste ------------------------------------------------------------


def _redacted(text: str, bus: str, mask: str) -> str:
    """The real lines with one bus id masked as people mask them before posting."""
    return text.replace(bus, mask)


@pytest.mark.parametrize("mask", ["...", "0000:XX:00.0"])
def test_a_redacted_bus_id_keeps_the_event_without_a_bus(mask):
    lost = _redacted(read("issues/xid/fallen-off-bus-no-xid-multiline-570.txt"), "0000:b3:00.0", mask)
    (event,) = parse_kernel_log(lost).xids
    assert (event.code, event.legacy, event.pci_bus_id, event.pci_device_id) == (79, True, None, "10de:26b5")
    probe = _redacted(read("repos/xid/b200-fallen-off-bus-at-probe-multiline-nvrm-journal.txt"), "0000:18:00.0", mask)
    log = parse_kernel_log(probe, year=2024)
    assert [(e.code, e.pci_bus_id) for e in log.xids] == [(79, None)]
    assert [(f.kind, f.stage, f.pci_bus_id) for f in log.faults] == [(INIT_FAILED, PROBE, None)]
    aer = _redacted(read("issues/xid/aer-surprise-down-then-xid79-tesla.txt"), "0000:00:02.0", mask)
    log = parse_kernel_log(aer)
    assert [(e.severity, e.pci_bus_id, e.errors) for e in log.aer] == [
        ("Corrected", None, ["Replay Timer Timeout"]), ("Uncorrected (Fatal)", None, ["Surprise Down Error"])]
    xid = _redacted(read("issues/xid/xid145-rlw-rxpipe-nonfatal-link13.txt"), "0018:01:00", mask)
    (event,) = parse_kernel_log(xid).xids
    assert (event.code, event.pci_bus_id, event.link) == (145, None, 13)


# --- kernel lines quoted inside another tool's output --------------------------------------


def test_a_kernel_line_quoted_by_another_tool_reads_as_the_kernel_logged_it():
    log = parse("repos/xid/xid119-gsp-rpc-timeout-quoted-in-gpud-scan-output.txt")
    assert len(log.xids) == 10  # gpud quotes each of its 5 events twice: from dmesg and from kmsg
    assert all(e.message.endswith(").") for e in log.xids)  # no closing quote, no "\n" escape
    assert {(e.code, e.pci_bus_id) for e in log.xids} == {(119, "0000:9b:00.0")}


def test_a_probe_failure_names_the_device_id_whatever_the_driver_said_of_the_gpu():
    # the real journal lines without the one that says the GPU fell off the bus: the driver's
    # message still names the GPU and its device id before the probe fails
    text = read("repos/xid/b200-fallen-off-bus-at-probe-multiline-nvrm-journal.txt")
    cut = "\n".join(line for line in text.splitlines() if "fallen off the bus" not in line)
    log = parse_kernel_log(cut, year=2024)
    assert log.xids == []
    (fault,) = log.faults
    assert (fault.stage, fault.pci_bus_id, fault.pci_device_id) == (PROBE, "0000:18:00.0", "10de:2901")
