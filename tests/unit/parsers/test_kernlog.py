"""Kernel log framing and timestamps (parsers/kernlog.py): /dev/kmsg records, a tool's
notes about the log, the prefixes every source puts on a line and the times they give."""

from __future__ import annotations

import pytest

from healthcheck.parsers.kernlog import _SYSLOG, kernel_lines, kmsg_line, split_prefix, syslog_time
from healthcheck.parsers.xid import parse_kernel_log

BOOT_LINES = "[    0.000000] Linux version 6.1.0-18-amd64\n[    0.000000] Command line: ro quiet\n"


# --- /dev/kmsg records -----------------------------------------------------------------------


def test_kmsg_multi_line_record_reads_like_dmesg():
    record = ("3,1042,14387209961,-;NVRM: The NVIDIA GPU 0000:5d:00.0\\x0aNVRM: (PCI ID: 10de:2330) installed "
              "in this system has\\x0aNVRM: fallen off the bus and is not responding to commands.\n"
              " SUBSYSTEM=pci\n DEVICE=+pci:0000:5d:00.0\n")
    line = kmsg_line(record)
    assert line.splitlines()[0] == "[14387.209961] NVRM: The NVIDIA GPU 0000:5d:00.0"
    (event,) = parse_kernel_log(line).xids
    assert (event.code, event.pci_bus_id, event.legacy) == (79, "0000:5d:00.0", True)


# --- which lines are the kernel's ------------------------------------------------------------


@pytest.mark.parametrize("text, lines", [
    ("", 0), ("\n\n  \n", 0), ("-- No entries --\n", 0), ("No journal files were found.\n", 0),
    (("Hint: You are currently not seeing messages from other users and the system.\n"
      "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"), 0),
    ("\n" * 200_000, 0),  # big, and still nothing: decided line by line, not by size
    (BOOT_LINES, 2), ("x\n\ny", 2), (BOOT_LINES * 50_000, 100_000),
])
def test_kernel_lines_tells_a_log_from_a_tools_notes(text, lines):
    assert kernel_lines(text) == lines


# --- prefixes and timestamps -----------------------------------------------------------------


def test_syslog_year_rollover():
    m = _SYSLOG.match("Dec 31 23:59:59 gpu017 kernel: x")
    jan_2025 = 1735776000.0  # 2025-01-02T00:00:00Z
    assert syslog_time(m, None, now=jan_2025) == 1735689599.0  # Dec 31 2024, not 2025
    leap = _SYSLOG.match("Feb 29 12:00:00 gpu017 kernel: x")
    assert syslog_time(leap, 2023) is None  # not a date: no time, no crash
    assert syslog_time(leap, 2024) == 1709208000.0


@pytest.mark.parametrize("line, time, uptime_s, body", [
    ("2024-11-15T12:02:03,470068+00:00 msg", 1731672123.470068, None, "msg"),
    ("kern  :warn  : 2025-01-21T02:21:33,498559+00:00 msg", 1737426093.498559, None, "msg"),
    ("[Sun Feb 23 16:24:18 2025] msg", 1740327858.0, None, "msg"),
    ("<4>[ 6781741.548768] msg", None, 6781741.548768, "msg"),
    ("2024-01-22T11:22:33+0100 gpu017 kernel: msg", 1705918953.0, None, "msg"),
    ("Nov 22 13:00:01 gpu017 kernel: [  123.456] msg", 1732280401.0, 123.456, "msg"),
    ("[  123.456] gpu017 kernel: msg", None, 123.456, "msg"),
    ("msg with no prefix", None, None, "msg with no prefix"),
])
def test_split_prefix_peels_every_source_s_stack(line, time, uptime_s, body):
    stamp, rest = split_prefix(line, None, 2024)
    assert rest == body
    assert stamp.time == (pytest.approx(time) if time is not None else None)
    assert stamp.uptime_s == (pytest.approx(uptime_s) if uptime_s is not None else None)
    assert stamp.prefixed == (line != body)


def test_split_prefix_dates_an_uptime_only_with_a_boot_time():
    assert split_prefix("[  100.5] msg", None, None)[0].time is None
    assert split_prefix("[  100.5] msg", 1_000_000_000.0, None)[0].time == pytest.approx(1_000_000_100.5)
    assert split_prefix("[  100.5] msg", float("inf"), None)[0].time is None  # never a time that is no time
