"""The mechanisms behind the four field files held-out-13 and -14 still missed (issue 20's
fifteenth round), each on the real file and on real lines of other fixtures (a transformation
says so): torch 1.x's WorkNCCL record (no SeqNum, a TensorShape, the timeout seen `in call to
wait()`); mp.spawn's parent terminating the processes left (`Terminating process P via signal
SIGTERM`, under glog); Windows' nvidia-smi.exe saying `Unable to detect the device handle`;
a bus id typed by hand with a three-digit domain (`GPU 000:BA:80.0`).
"""

from __future__ import annotations

import re

import pytest
from support import FIXTURES

from healthcheck.parsers.gpu_common import normalize_pci
from healthcheck.parsers.nvidia_smi import lost_gpu_from_line, parse_nvidia_smi_q
from healthcheck.parsers.nvidia_smi_query import parse_nvidia_smi_query
from healthcheck.parsers.nvidia_smi_table import parse_nvidia_smi_table
from healthcheck.parsers.torch_log import parse_torch_log

FIELD13 = FIXTURES / "field" / "issues-13"
FIELD14 = FIXTURES / "field" / "issues-14"
WAIT_TIMEOUT = FIELD13 / "torch-log" / "2021-pr-before-after-aborted-worknccl-tensorshape-timed-out-in-wait.txt"
SPAWN_GLOG = FIELD14 / "torch-log" / "mp-spawn-glog-terminating-three-processes-sigterm-then-traceback-cut.txt"
WINDOWS_SMI = FIELD14 / "nvidia-smi" / "windows-nvidia-smi-exe-unable-to-detect-device-handle-backtick-lines.txt"
THREE_DIGITS = FIELD14 / "nvidia-smi" / "prose-hand-typed-device-handle-three-digit-domain-ba-80.txt"
# torch 2.x's watchdog line, whole (SeqNum, NumelIn, NumelOut)
WATCHDOG_2X = FIXTURES / "corpus" / "torch-watchdog" / "desync-debug-allreduce-timeout.txt"
# mp.spawn under glog as torch 2.13 printed it here (tests/fixtures/diagnose/rules10)
SPAWN_KILL = FIXTURES / "diagnose" / "rules10" / "spawnkill-w3-r2" / "spawn.log"


def _real(path, words: str) -> str:
    return next(line for line in path.read_text().splitlines() if words in line)


# ---------------------------------------------------------------- torch 1.x's WorkNCCL record


def test_torch_1x_worknccl_timed_out_in_wait_is_a_timeout():
    log = parse_torch_log(WAIT_TIMEOUT.read_text())
    [timeout] = log.timeouts
    assert (timeout.op_type, timeout.timeout_ms, timeout.seq, timeout.in_wait) == ("ALLREDUCE", 2000, None, True)
    assert timeout.line == 8


def test_the_watchdogs_record_without_seqnum_or_numels_reads_as_the_same_timeout():
    """torch 1.9-1.10's watchdog printed `WorkNCCL(OpType=..., Timeout(ms)=...) ran for N
    milliseconds`: a real 2.x line with its SeqNum and Numel fields taken out (a transformation)."""
    line = _real(WATCHDOG_2X, "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=")
    old = re.sub(r"(?:SeqNum|NumelIn|NumelOut)=\d+, ", "", line)
    assert "SeqNum" not in old and "OpType=" in old
    [new_form] = parse_torch_log(line + "\n").timeouts
    [old_form] = parse_torch_log(old + "\n").timeouts
    assert old_form.seq is None and new_form.seq is not None
    assert (old_form.op_type, old_form.timeout_ms, old_form.ran_for_ms, old_form.rank) == (
        new_form.op_type, new_form.timeout_ms, new_form.ran_for_ms, new_form.rank)
    assert not old_form.in_wait and not new_form.in_wait


def test_a_tensorshape_between_the_fields_is_read_past():
    """1.8-1.10 put `TensorShape=[...]` between OpType and Timeout(ms) (the real record, its
    shape made a matrix: a transformation)."""
    line = _real(WAIT_TIMEOUT, "WorkNCCL(").replace("TensorShape=[1]", "TensorShape=[1024, 4096]")
    [timeout] = parse_torch_log(line + "\n").timeouts
    assert (timeout.op_type, timeout.timeout_ms) == ("ALLREDUCE", 2000)


def test_a_worknccl_record_without_an_optype_is_no_timeout():
    """A real 2.x log with every record's SeqNum and OpType taken out (a transformation)."""
    text = WATCHDOG_2X.read_text()
    assert parse_torch_log(text).timeouts
    assert not parse_torch_log(re.sub(r"(?:SeqNum|OpType)=\w+, ", "", text)).timeouts


# ---------------------------------------------------------------- mp.spawn terminating the rest


def test_mp_spawns_terminating_lines_under_glog_name_the_stopped_pids():
    log = parse_torch_log(SPAWN_GLOG.read_text())
    assert [(c.pid, c.signal) for c in log.closing_signals] == [
        (1321005, "SIGTERM"), (1321006, "SIGTERM"), (1321007, "SIGTERM")]
    assert [c.line for c in log.closing_signals] == [2, 3, 4]
    [raised] = log.exceptions
    assert raised.type.endswith("ProcessRaisedException") and raised.framed


def test_mp_spawns_terminating_lines_in_a_real_capture_are_closing_signals():
    text = SPAWN_KILL.read_text()
    pids = [int(m.group(1)) for m in re.finditer(r"Terminating process (\d+) via signal SIGTERM", text)]
    assert pids
    log = parse_torch_log(text)
    assert [c.pid for c in log.closing_signals] == pids


def test_a_sentence_about_terminating_a_process_is_no_closing_signal():
    assert not parse_torch_log(
        "Traceback (most recent call last):\nRuntimeError: Terminating process group now\n").closing_signals


# ---------------------------------------------------------------- nvidia-smi.exe's wording


def test_windows_nvidia_smi_unable_to_detect_the_device_handle_is_a_lost_gpu():
    table = parse_nvidia_smi_table(WINDOWS_SMI.read_text())
    [lost] = table.lost
    assert (lost.pci_bus_id, lost.error) == ("0000:b1:00.0", "Unknown Error")


@pytest.mark.parametrize("parse", [parse_nvidia_smi_table, parse_nvidia_smi_q, parse_nvidia_smi_query])
def test_detect_and_determine_read_the_same_in_every_nvidia_smi_parser(parse):
    """The real Windows line, and the same line in Linux's words (a transformation)."""
    detect = _real(WINDOWS_SMI, "Unable to detect the device handle")
    determine = detect.replace("detect", "determine")
    assert parse(detect + "\n").lost == parse(determine + "\n").lost
    assert [g.pci_bus_id for g in parse(detect + "\n").lost] == ["0000:b1:00.0"]


def test_a_sentence_about_detecting_something_else_is_no_lost_gpu():
    assert lost_gpu_from_line("Unable to detect the device for this application") is None


# ---------------------------------------------------------------- a bus id typed with 3 domain digits


def test_a_hand_typed_three_digit_domain_is_the_gpus_bus_id():
    table = parse_nvidia_smi_table(THREE_DIGITS.read_text())
    [lost] = table.lost
    assert (lost.pci_bus_id, lost.error) == ("0000:ba:80.0", "Unknown Error")
    assert lost.index is None  # `000` is the domain, not an NVML index


@pytest.mark.parametrize("domain", ["000", "0000", "00000000"])
def test_every_domain_width_normalises_to_hcs_form(domain):
    """The real line with its domain written 3, 4 and 8 digits wide (a transformation)."""
    line = _real(THREE_DIGITS, "device handle").replace("000:BA:80.0", f"{domain}:BA:80.0")
    lost = lost_gpu_from_line(line)
    assert lost is not None and lost.pci_bus_id == "0000:ba:80.0"
    assert normalize_pci(f"{domain}:BA:80.0") == "0000:ba:80.0"


def test_a_two_digit_domain_is_still_no_bus_id():
    assert normalize_pci("00:BA:80.0") == "00:ba:80.0"  # not a bus id: returned as it came, lower case
