"""Kernel log -> Xid/SXid events: every corpus capture, synthetic journal/syslog/bare
variants made from real corpus lines (fixtures/kernel-log), times, helpers, bad input."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import CORPUS, FIXTURES, corpus_files

from healthcheck.core.errors import ParseError
from healthcheck.parsers.xid import (
    KernelGpuLog,
    XidEvent,
    parse_kernel_log,
    since,
    summarize,
)

KERNEL_LOG = FIXTURES / "kernel-log"
SYNTHETIC = sorted(KERNEL_LOG.glob("*.txt"))
ALL_LOGS = corpus_files("xid-dmesg") + SYNTHETIC
PCI = r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$"


def parse(path: Path, **kw) -> KernelGpuLog:
    return parse_kernel_log(path.read_text(), **kw)


def codes(log: KernelGpuLog) -> Counter:
    return Counter((e.code, e.pci_bus_id) for e in log.xids)


# What each capture must yield: Xid (code, bus) counts, SXid count, GPU UUIDs known.
CORPUS_FACTS = {
    "libnccl-segfault.txt": ({}, 0, {}),
    "xid119-gsp-rpc-timeout.txt": (
        {(119, "0000:9b:00.0"): 5},
        0,
        {"0000:9b:00.0": "GPU-509665ad-b600-ac93-3616-d754b23d636d"},
    ),
    "xid13-43-sm-warp-exception-flood.txt": ({(13, "0000:38:00.0"): 629, (43, "0000:38:00.0"): 7}, 0, {}),
    "xid48-63-94-dbe-rowremap-contained.txt": (
        {(48, "0000:19:00.0"): 1, (63, "0000:19:00.0"): 1, (94, "0000:19:00.0"): 9},
        0,
        {},
    ),
    "xid63-row-remapper-oneline.txt": ({(63, "0000:10:1c.0"): 1}, 0, {}),
    "xid79-with-nvswitch-sxid-20034.txt": (
        {(79, "0000:91:00.0"): 1},
        8,
        {"0000:91:00.0": "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b"},
    ),
}

SYNTHETIC_FACTS = {
    "dmesg-T-single-digit-day.txt": ({(119, "0000:9b:00.0"): 1}, 0, {}),
    "dmesg-raw-decode-monotonic-uptime.txt": ({(79, "0000:91:00.0"): 1, (43, "0000:38:00.0"): 1}, 1, {}),
    "journal-short-iso-precise-cet-xid94.txt": ({(94, "0000:19:00.0"): 3}, 0, {}),
    "journal-short-iso-xid48-63-94.txt": (
        {(48, "0000:19:00.0"): 1, (63, "0000:19:00.0"): 1, (94, "0000:19:00.0"): 2},
        0,
        {},
    ),
    "journal-short-xid79-sxid.txt": (
        {(79, "0000:91:00.0"): 1},
        2,
        {"0000:91:00.0": "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b"},
    ),
    "no-timestamp-legacy-fallen-off-bus.txt": (
        {(79, "0000:91:00.0"): 1, (79, "0000:9b:00.0"): 1, (63, "0000:10:1c.0"): 1},
        0,
        {"0000:91:00.0": "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b"},
    ),
    "syslog-kernel-uptime-xid119.txt": (
        {(119, "0000:9b:00.0"): 2},
        0,
        {"0000:9b:00.0": "GPU-509665ad-b600-ac93-3616-d754b23d636d"},
    ),
    # real lines (SOURCES-gpu-lost.md): a GPU lost with no Xid number is a legacy Xid 79
    "syslog-probe-fallen-off-bus-three-lines.txt": ({(79, "0000:5d:00.0"): 1}, 0, {}),
    "dmesg-probe-fallen-off-bus-continuation.txt": ({(79, "0000:5d:00.0"): 1}, 0, {}),
    "bare-not-responding-one-line.txt": ({(79, "0000:0e:00.0"): 1}, 0, {}),
    "dmesg-xid79-serial-crash-dump.txt": (
        {(79, "0000:5d:00.0"): 1},
        0,
        {"0000:5d:00.0": "GPU-f1906b9b-557a-e961-045c-9fe4be3ce012"},
    ),
    "syslog-old-driver-xid79-crash-dump.txt": (
        {(79, "0000:01:00.0"): 1},
        0,
        {"0000:01:00.0": "GPU-c4a80165-86e4-bfbb-ecfa-1d81a70b138a"},
    ),
    "dmesg-rminitadapter-failed-gsp.txt": ({}, 0, {}),
    "syslog-old-rminitadapter-failed-no-bus-id.txt": ({}, 0, {}),
}

# GPU failures the driver logs without an Xid number: (kind, bus) -> count
FAULTS = {
    "dmesg-xid79-serial-crash-dump.txt": {("crash-dump", "0000:5d:00.0"): 1},
    "syslog-old-driver-xid79-crash-dump.txt": {("crash-dump", "0000:01:00.0"): 1},
    "dmesg-rminitadapter-failed-gsp.txt": {("init-failed", "0000:01:00.0"): 1},
    "syslog-old-rminitadapter-failed-no-bus-id.txt": {("init-failed", None): 1},
    # "nvidia: probe of 0000:5d:00.0 failed with error -1": the driver refused the GPU it lost
    "syslog-probe-fallen-off-bus-three-lines.txt": {("init-failed", "0000:5d:00.0"): 1},
    "dmesg-probe-fallen-off-bus-continuation.txt": {("init-failed", "0000:5d:00.0"): 1},
}


def test_every_file_has_its_facts_listed():
    assert sorted(p.name for p in corpus_files("xid-dmesg")) == sorted(CORPUS_FACTS)
    assert sorted(p.name for p in SYNTHETIC) == sorted(SYNTHETIC_FACTS)


@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.name)
def test_every_log_yields_its_events(path):
    facts = CORPUS_FACTS.get(path.name) or SYNTHETIC_FACTS[path.name]
    log = parse(path, year=2024)
    assert dict(codes(log)) == facts[0]
    assert len(log.sxids) == facts[1]
    assert log.gpu_uuids == facts[2]
    text = path.read_text()
    assert log.lines == len(text.splitlines())
    for e in [*log.xids, *log.sxids]:
        assert e.line in text.splitlines()  # the evidence is the line as logged
        assert e.pci_bus_id is not None and msgspec.json.decode(msgspec.json.encode(e.pci_bus_id)) == e.pci_bus_id
    lines = text.splitlines()
    assert [lines.index(e.line) for e in log.xids] == sorted(lines.index(e.line) for e in log.xids)  # log order


@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.name)
def test_every_log_yields_its_numberless_faults(path):
    log = parse(path, year=2024)
    assert dict(Counter((f.kind, f.pci_bus_id) for f in log.faults)) == FAULTS.get(path.name, {})
    assert all(f.line in path.read_text().splitlines() for f in log.faults)


@pytest.mark.parametrize("name, bus, message", [
    ("syslog-probe-fallen-off-bus-three-lines.txt", "0000:5d:00.0", "not responding to commands"),
    ("dmesg-probe-fallen-off-bus-continuation.txt", "0000:5d:00.0", "not responding to commands"),
    ("bare-not-responding-one-line.txt", "0000:0e:00.0", "not responding to commands"),
])
def test_probe_time_fallen_off_the_bus_on_one_line_or_three(name, bus, message):
    (event,) = parse(KERNEL_LOG / name, year=2024).xids
    assert (event.code, event.pci_bus_id, event.legacy) == (79, bus, True) and message in event.message
    assert "NVRM: The NVIDIA GPU" in event.line  # the evidence is the line that names the GPU


def test_fallen_off_needs_its_words_within_the_continuation_lines():
    lines = ["NVRM: The NVIDIA GPU 0000:5d:00.0", "NVRM: (PCI ID: 10de:2330) installed in this system has",
             "NVRM: something else", "NVRM: more", "NVRM: fallen off the bus and is not responding to commands."]
    assert parse_kernel_log("\n".join(lines)).xids == []  # four lines on: another message
    assert parse_kernel_log("NVRM: The NVIDIA GPU 0000:5d:00.0 is not supported").xids == []


def test_older_fallen_off_wording_without_gpu():
    (event,) = parse_kernel_log("[  239.061389] NVRM: GPU at 0000:06:00.0 has fallen off the bus.\n").xids
    assert (event.code, event.pci_bus_id, event.legacy) == (79, "0000:06:00.0", True)


def test_since_keeps_the_numberless_faults_it_cannot_date():
    log = parse(KERNEL_LOG / "dmesg-rminitadapter-failed-gsp.txt")  # raw uptime, no boot time: undated
    assert since(log, 2e9).faults == log.faults
    dated = parse(KERNEL_LOG / "dmesg-rminitadapter-failed-gsp.txt", boot_time=1_700_000_000.0)
    assert since(dated, 1_700_000_000.0 + 7).faults == [] and since(dated, 1_700_000_000.0).faults == dated.faults


@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.name)
def test_events_round_trip_through_json(path):
    log = parse(path, year=2024, boot_time=1_700_000_000.0)
    assert msgspec.json.decode(msgspec.json.encode(log), type=KernelGpuLog) == log


# --- the corpus, file by file ------------------------------------------------------------


def test_libnccl_segfault_is_a_clean_log():
    log = parse(CORPUS / "xid-dmesg/libnccl-segfault.txt")
    assert (log.xids, log.sxids, log.lines) == ([], [], 2)


def test_xid119_gsp_timeout_dmesg_T():
    log = parse(CORPUS / "xid-dmesg/xid119-gsp-rpc-timeout.txt")
    first = log.xids[0]
    # [Sun Feb 23 16:24:18 2025]: dmesg -T prints local time without a zone; taken as UTC
    assert first.time == 1740327858.0 and first.uptime_s is None
    assert (first.pid, first.process) == (2024380, "nvidia-smi")
    assert first.message.startswith("Timeout after 6s of waiting for RPC response from GPU4 GSP!")
    assert [e.pid for e in log.xids] == [2024380, 2024380, 2024380, 1263500, 1240590]
    assert [e.process for e in log.xids] == ["nvidia-smi"] * 3 + ["cache_mgr_main", "gpud"]
    assert [e.time - first.time for e in log.xids] == [0, 6, 12, 174, 355]
    # the GSP RPC history dump under the first Xid is NVRM: lines, not events
    assert all("Xid" in e.line for e in log.xids)


def test_xid13_flood_and_43():
    log = parse(CORPUS / "xid-dmesg/xid13-43-sm-warp-exception-flood.txt")
    assert log.xids[0].time == pytest.approx(1737426093.498559, abs=1e-6)  # 2025-01-21T02:21:33,498559+00:00
    assert all(e.pid is None and e.process is None for e in log.xids if e.code == 13)
    xid43 = [e for e in log.xids if e.code == 43]
    assert {e.process for e in xid43} == {"pt_main_thread"} and all(e.message == "Ch 00000008" for e in xid43)
    assert xid43[0].pid == 2815167 and xid43[-1].pid == 2924364


def test_xid48_63_94_dbe_iso():
    log = parse(CORPUS / "xid-dmesg/xid48-63-94-dbe-rowremap-contained.txt")
    dbe, remap, contained = log.xids[:3]
    # 2024-11-15T12:02:03,470068+00:00
    assert dbe.code == 48 and dbe.time == pytest.approx(1731672123.470068, abs=1e-6)
    assert dbe.pid is None and dbe.process is None and "double bit error" in dbe.message
    assert remap.code == 63 and remap.message.startswith("Row Remapper:")
    assert contained.code == 94 and contained.pid is None
    channels = log.xids[3:]
    assert {(e.code, e.pid, e.process) for e in channels} == {(94, 1248209, "python3.10")}
    assert [e.message for e in channels] == [f"Ch {i:08x}" for i in range(8, 16)]
    assert all(not e.legacy and e.uptime_s is None for e in log.xids)


def test_xid63_oneline_old_format_without_name():
    (event,) = parse(CORPUS / "xid-dmesg/xid63-row-remapper-oneline.txt").xids
    assert (event.code, event.pci_bus_id, event.pid, event.process) == (63, "0000:10:1c.0", 1896, None)
    assert event.message == "Row Remapper: New row marked for remapping, reset gpu to activate."
    assert event.time is None and event.uptime_s is None


def test_xid79_explicit_line_wins_over_legacy_and_sxids():
    log = parse(CORPUS / "xid-dmesg/xid79-with-nvswitch-sxid-20034.txt")
    (xid79,) = log.xids
    assert not xid79.legacy and xid79.uptime_s == pytest.approx(6781741.548779) and xid79.time is None
    assert xid79.message == "GPU has fallen off the bus."
    severities = [(s.switch, s.pci_bus_id, s.severity) for s in log.sxids]
    assert severities == [
        ("nvidia-nvswitch1", "0000:06:00.0", "Fatal"),
        ("nvidia-nvswitch0", "0000:05:00.0", "Fatal"),
        ("nvidia-nvswitch2", "0000:07:00.0", None),
        ("nvidia-nvswitch0", "0000:05:00.0", None),
        ("nvidia-nvswitch2", "0000:07:00.0", "Fatal"),
        ("nvidia-nvswitch0", "0000:05:00.0", "Fatal"),
        ("nvidia-nvswitch2", "0000:07:00.0", None),
        ("nvidia-nvswitch0", "0000:05:00.0", None),
    ]
    assert {s.code for s in log.sxids} == {20034}
    fatal = [s.message for s in log.sxids if s.severity == "Fatal"]
    assert fatal == [f"Link {n} LTSSM Fault Up" for n in (48, 63, 37, 62)]
    assert log.sxids[3].message.startswith("Data {0x10000000")
    assert log.sxids[2].message == "Severity 1 Engine instance 60 Sub-engine instance 00"


def test_raw_uptime_becomes_a_time_with_boot_time():
    log = parse(CORPUS / "xid-dmesg/xid79-with-nvswitch-sxid-20034.txt", boot_time=1_000_000_000.0)
    assert log.xids[0].time == pytest.approx(1_006_781_741.548779)
    assert log.sxids[0].time == pytest.approx(1_006_781_753.400584)


# --- the synthetic variants ----------------------------------------------------------------


def test_journal_short_uses_the_given_year_and_utc():
    log = parse(KERNEL_LOG / "journal-short-xid79-sxid.txt", year=2024)
    assert log.xids[0].time == 1732280401.0  # Nov 22 13:00:01 2024 UTC
    assert log.sxids[0].time == 1732280413.0 and log.sxids[0].severity == "Fatal"
    assert log.sxids[1].severity is None


def test_journal_short_without_a_year_is_never_in_the_future():
    log = parse(KERNEL_LOG / "journal-short-xid79-sxid.txt")
    t = log.xids[0].time
    assert t is not None and t <= time.time() + 86400
    assert time.gmtime(t)[1:6] == (11, 22, 13, 0, 1)


def test_journal_short_iso_offsets():
    log = parse(KERNEL_LOG / "journal-short-iso-xid48-63-94.txt")
    assert {e.time for e in log.xids} == {1731672123.0}  # 2024-11-15T12:02:03+0000
    cet = parse(KERNEL_LOG / "journal-short-iso-precise-cet-xid94.txt")
    # +0100, +01:00 and -0500 all name the same instants as the UTC dmesg capture
    assert [e.time for e in cet.xids] == pytest.approx([1731672123.521616, 1731672123.552642, 1731672123.561522])


def test_syslog_keeps_wall_clock_and_kernel_uptime():
    log = parse(KERNEL_LOG / "syslog-kernel-uptime-xid119.txt", year=2025, boot_time=1.0)
    first = log.xids[0]
    assert first.time == 1740327858.0  # the syslog stamp wins over boot_time + uptime
    assert first.uptime_s == pytest.approx(6781741.548779)
    assert (first.pid, first.process) == (2024380, "nvidia-smi")


def test_bare_lines_legacy_fallen_off_bus():
    log = parse(KERNEL_LOG / "no-timestamp-legacy-fallen-off-bus.txt")
    legacy, explicit, remap = log.xids
    # 91:00 only has the two legacy shapes: one legacy 79
    assert (legacy.code, legacy.pci_bus_id, legacy.legacy) == (79, "0000:91:00.0", True)
    assert legacy.line == "NVRM: GPU at PCI:0000:91:00: GPU has fallen off the bus."
    # 9b:00 has a legacy line and then an explicit Xid 79: the explicit one is kept
    assert (explicit.code, explicit.pci_bus_id, explicit.legacy) == (79, "0000:9b:00.0", False)
    assert remap.code == 63 and all(e.time is None and e.uptime_s is None for e in log.xids)


def test_dmesg_raw_priority_decode_and_monotonic_prefixes():
    log = parse(KERNEL_LOG / "dmesg-raw-decode-monotonic-uptime.txt", boot_time=0.0)
    assert [e.uptime_s for e in log.xids] == pytest.approx([6781741.548779, 6781745.1])
    assert [e.time for e in log.xids] == pytest.approx([6781741.548779, 6781745.1])
    assert log.xids[1].process == "pt_main_thread"
    assert log.sxids[0].uptime_s == pytest.approx(6781753.400584) and log.sxids[0].switch == "nvidia-nvswitch1"


def test_dmesg_T_single_digit_day():
    (event,) = parse(KERNEL_LOG / "dmesg-T-single-digit-day.txt").xids
    assert event.time == 1738513458.0  # [Sun Feb  2 16:24:18 2025] as UTC


# --- since() and summarize() -----------------------------------------------------------------


def test_since_keeps_recent_and_undated_events():
    log = parse(CORPUS / "xid-dmesg/xid119-gsp-rpc-timeout.txt")
    recent = since(log, 1740327858.0 + 100)
    assert [e.pid for e in recent.xids] == [1263500, 1240590]
    assert recent.gpu_uuids == log.gpu_uuids and recent.lines == log.lines
    undated = parse(CORPUS / "xid-dmesg/xid79-with-nvswitch-sxid-20034.txt")  # raw uptime, no boot_time
    kept = since(undated, time.time())
    assert len(kept.xids) == 1 and len(kept.sxids) == 8


def test_since_on_boot_time_anchored_log():
    log = parse(CORPUS / "xid-dmesg/xid79-with-nvswitch-sxid-20034.txt", boot_time=0.0)
    later = since(log, 6781750.0)
    assert later.xids == [] and len(later.sxids) == 8


def test_summarize_folds_the_flood():
    log = parse(CORPUS / "xid-dmesg/xid13-43-sm-warp-exception-flood.txt")
    s13, s43 = summarize(log.xids)
    assert (s13.code, s13.pci_bus_id, s13.count, s13.processes) == (13, "0000:38:00.0", 629, [])
    assert s13.first_time == pytest.approx(1737426093.498559, abs=1e-6)  # 02:21:33,498559
    assert s13.last_time == pytest.approx(1737434504.285147, abs=1e-6)  # 04:41:44,285147
    assert s13.first_line == log.xids[0].line
    assert (s43.code, s43.count, s43.processes) == (43, 7, ["pt_main_thread"])


def test_summarize_processes_in_first_seen_order_and_undated():
    s119, = summarize(parse(CORPUS / "xid-dmesg/xid119-gsp-rpc-timeout.txt").xids)
    assert s119.count == 5 and s119.processes == ["nvidia-smi", "cache_mgr_main", "gpud"]
    s63, = summarize(parse(CORPUS / "xid-dmesg/xid63-row-remapper-oneline.txt").xids)
    assert (s63.first_time, s63.last_time) == (None, None)
    assert summarize([]) == []


# --- message shapes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, expected",
    [
        (
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=swapper/0, GPU has fallen off the bus.",
            (79, 0, "swapper/0"),
        ),
        ("NVRM: Xid (PCI:0000:3b:00): 31, pid=<unknown>, name=<unknown>, Ch 00000008", (31, None, None)),
        ("NVRM: Xid (0000:3b:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception", (13, None, None)),
        (
            "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (Reset)",
            (154, None, None),
        ),
        ("NVRM: Xid (PCI:0000:3b:00): 94, pid=7, name=my app, x, Ch 1", (94, 7, "my app")),
    ],
)
def test_xid_message_shapes(line, expected):
    (event,) = parse_kernel_log(line).xids
    assert (event.code, event.pid, event.process) == expected
    assert event.pci_bus_id == "0000:3b:00.0"


def test_a_cut_code_is_not_reported():
    # the last line of a capture cut in mid-line: "48" must not become Xid 4
    assert parse_kernel_log("NVRM: Xid (PCI:0000:19:00): 4").xids == []
    assert parse_kernel_log("nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 2003").sxids == []


def test_non_fatal_sxid():
    line = (
        "[186965.348898] nvidia-nvswitch2: SXid (PCI:0000:85:00.0): 12028, Non-fatal, "
        "Link 61 egress non-posted PRIV error (First)\n"  # its line end: the last word is whole
    )
    (s,) = parse_kernel_log(line).sxids
    assert (s.code, s.severity, s.switch, s.pci_bus_id) == (12028, "Non-fatal", "nvidia-nvswitch2", "0000:85:00.0")
    assert s.message == "Link 61 egress non-posted PRIV error (First)" and s.uptime_s == pytest.approx(186965.348898)


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "\n", "   \n\t\n"])
def test_empty_log_is_clean(text):
    log = parse_kernel_log(text)
    assert log.xids == [] and log.sxids == []


@pytest.mark.parametrize(
    "text",
    [
        "hello world",
        "GPU 0: NVIDIA H100 (UUID: GPU-1)\n\tLink 0: 26.562 GB/s\n",
        "{\"ifname\": \"eth0\"}",
        "Xid 79 on gpu3 per the ticket",
        "\x00\x01\x02\xff" * 10,
    ],
)
def test_garbage_is_a_parse_error(text):
    with pytest.raises(ParseError) as info:
        parse_kernel_log(text)
    assert "\n" not in str(info.value)


def test_not_text_is_a_parse_error():
    with pytest.raises(ParseError):
        parse_kernel_log(b"NVRM: Xid (PCI:0000:19:00): 48, x")  # type: ignore[arg-type]


@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.name)
def test_truncated_logs_never_invent_events(path):
    text = path.read_text()
    full = parse_kernel_log(text, year=2024)
    full_codes = {e.code for e in full.xids} | {79}  # a cut can turn explicit 79 into legacy 79
    cuts = sorted({int(len(text) * i / 97) for i in range(97)} | set(range(0, min(len(text), 400))))
    for cut in cuts:
        try:
            log = parse_kernel_log(text[:cut], year=2024)
        except ParseError:
            continue
        assert len(log.xids) <= len(full.xids) and len(log.sxids) <= len(full.sxids)
        assert {e.code for e in log.xids} <= full_codes
        assert {e.code for e in log.sxids} <= {e.code for e in full.sxids}


def test_very_long_lines_are_fast_and_safe():
    real = (CORPUS / "xid-dmesg/xid48-63-94-dbe-rowremap-contained.txt").read_text().splitlines()[10]
    hostile = [
        real + " padding" * 200_000,
        "NVRM: Xid (" * 100_000,
        "NVRM: Xid (PCI:0000:19:00): " + "9" * 100_000 + ", x",
        "[" + "9" * 100_000 + ".5] NVRM: Xid (PCI:0000:19:00): 48, pid=" + "1" * 50_000 + ", x",
        "2024-11-15T12:02:03," + "4" * 100_000 + "+00:00 NVRM: Xid (PCI:0000:19:00): 48, x",
        "a" * 2_000_000,
        "SXid (" * 100_000 + " kernel:",
        "kernel: " * 100_000,
    ]
    start = time.monotonic()
    for text in hostile:
        try:
            log = parse_kernel_log(text)
        except ParseError:
            continue
        assert all(isinstance(e, XidEvent) for e in log.xids)
    assert time.monotonic() - start < 10
    assert parse_kernel_log(hostile[0]).xids[0].code == 48


def test_binaryish_text_never_raises_anything_but_parse_error():
    rng = random.Random(1234)
    real = (CORPUS / "xid-dmesg/xid79-with-nvswitch-sxid-20034.txt").read_bytes()
    for _ in range(300):
        blob = bytearray(real)
        for _ in range(rng.randint(1, 40)):
            blob[rng.randrange(len(blob))] = rng.randrange(256)
        try:
            parse_kernel_log(blob.decode("latin-1"))
        except ParseError:
            pass
    for _ in range(100):
        try:
            parse_kernel_log(bytes(rng.randrange(256) for _ in range(500)).decode("latin-1"))
        except ParseError:
            pass


@pytest.mark.parametrize("kw", [{"year": -5}, {"year": 10**6}, {"boot_time": float("inf")}, {"boot_time": -1e300}])
def test_odd_arguments_never_crash(kw):
    for path in ALL_LOGS:
        parse(path, **kw)


_FRAGMENTS = st.sampled_from(
    [
        "NVRM: Xid (PCI:0000:19:00): 48, ", "pid='<unknown>', ", "name=<unknown>, ", "pid=", "name=",
        "kern  :warn  : ", "2024-11-15T12:02:03,470068+00:00 ", "[Sun Feb 23 16:24:18 2025] ", "[6781741.548768] ",
        "Nov 22 13:00:01 gpu017 kernel: ", "<4>", "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, ", "Fatal, ",
        "NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.", "NVRM: GPU at PCI:0000:91:00: GPU-b6c3b2be-c55b",
        "\n", "\x00", "\r", "\u2028", ")", "(", ",", ":",
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_FRAGMENTS | st.text(max_size=12), max_size=40).map("".join),
    st.one_of(st.none(), st.integers(-10, 10**5)),
)
def test_fuzz_only_parse_error(text, year):
    try:
        log = parse_kernel_log(text, year=year, boot_time=0.0)
    except ParseError:
        return
    summarize(log.xids)
    since(log, 0.0)
    msgspec.json.encode(log)
