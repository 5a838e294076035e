"""The mechanisms behind the field files of issue 20's fourth held-out set (`issues-4/`,
retired as a measure when its misses were fixed; each shape fixed here on the real file
and, where one exists, on a transformation of another real fixture, which says so): a
topology matrix whose rows were cut under a header naming every device; an NCCL WARN's
message quoted with no prefix, from a net plugin with its own name; sinfo -R's header words
typed onto the command line, and its rows with no header; a driver that says a GPU needs
a reset with no Xid number (NV_ERR_RESET_REQUIRED); an nccl-tests failure with no host, its
message on the next line.
"""

from __future__ import annotations

import msgspec
import pytest
from support import CORPUS, FIXTURES

from healthcheck.checks import gpu as gpu_checks
from healthcheck.core.catalogue import CATALOGUE
from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.errors import ParseError
from healthcheck.core.model import Finding
from healthcheck.parsers.nccl_log import parse_nccl_log
from healthcheck.parsers.nccl_tests import parse_nccl_tests
from healthcheck.parsers.nvidia_topo import parse_nvidia_topo
from healthcheck.parsers.sinfo import parse_sinfo
from healthcheck.parsers.xid import RESET_REQUIRED, parse_kernel_log

FIELD4 = FIXTURES / "field" / "issues-4"
TOPO_DGX = FIELD4 / "nvidia-smi-topo" / "dgx-a100-12-nics-nv12-pxb-rows-cut.txt"
TOPO_18_NICS = FIELD4 / "nvidia-smi-topo" / "root-prompt-18-nics-irregular-spacing-gpu0-3.txt"
TOPO_H100 = CORPUS / "nvidia-smi-topo" / "h100-8gpu-nv18.txt"
NCCL_IBP = FIELD4 / "nccl-log" / "ibp-plugin-title-status-12-vendor-129-no-prefix.txt"
NCCL_IB_ERROR4 = CORPUS / "nccl-debug" / "ib-completion-error4-vendor81-service-thread-connection-closed.txt"
NCCL_IBV = CORPUS / "nccl-debug" / "nccl-2.7.8-roce-2node-1gpu-ibv-create-cq-failed.txt"
NCCL_OOM = CORPUS / "nccl-debug" / "socketprogress-closed-then-cuda-failure-out-of-memory-calloc.txt"
SINFO_TYPED = FIELD4 / "sinfo" / "sinfo-r-header-on-command-line-kill-task-failed.txt"
SINFO_R = FIXTURES / "sinfo" / "slurm-22.05-R-reasons-truncated-20.txt"
SINFO_R_LONG = FIXTURES / "sinfo" / "slurm-22.05-R-l-user-uid-state.txt"
SINFO_N_LONG = FIXTURES / "sinfo" / "slurm-22.05-N-l-drained-star.txt"
XID_RESET = FIELD4 / "xid" / "indented-gsp-alloc-failed-reset-required-no-xid.txt"
XID_GENERIC_ASSERT = FIXTURES / "kernel-log" / "dmesg-rminitadapter-failed-gsp.txt"
XID79_DUMP = FIXTURES / "kernel-log" / "dmesg-xid79-serial-crash-dump.txt"
GENERIC = Config(EMBEDDED_DEFAULT).fabric("generic")
NT_BUSY = FIELD4 / "nccl-tests" / "test-cuda-failure-device-busy-or-unavailable.txt"
NT_FASTMOE = FIXTURES / "field" / "issues" / "nccl-tests" / "conda-env-host-test-nccl-failure-system-error-2.8.txt"
NT_HCA = FIXTURES / "field" / "issues" / "nccl-tests" / "many-hosts-cuda-failure-then-mpirun-exit-box.txt"

GPUS8 = [f"GPU{i}" for i in range(8)]


# --- nvidia-smi topo -m: a header names devices whose rows were cut ------------------------

def test_topo_rows_cut_under_a_header_keep_every_device_it_names():
    # field/issues-4: a DGX A100's matrix cut after GPU3's row; the header names 8 GPUs, 12 NICs
    topo = parse_nvidia_topo(TOPO_DGX.read_text())
    nics = [f"NIC{i}" for i in range(12)]
    assert topo.devices == GPUS8 + nics
    assert topo.devices_without_row == GPUS8[4:] + nics
    assert sorted(topo.links) == GPUS8[:4]  # links only where a row was pasted
    assert topo.links["GPU0"]["NIC11"] == "SYS" and topo.links["GPU2"]["NIC2"] == "PXB"
    assert "GPU4" not in topo.cpu_affinity


def test_topo_header_with_18_nics_one_column_wider_keeps_every_nic():
    topo = parse_nvidia_topo(TOPO_18_NICS.read_text())
    assert topo.devices[-1] == "NIC17" and len(topo.devices) == 8 + 18
    assert topo.links["GPU3"]["NIC8"] == "PXB" and topo.links["GPU3"]["NIC17"] == "SYS"


def test_topo_real_capture_with_its_last_rows_cut_lists_them_without_links():
    # a transformation of a real capture: the h100 matrix's header and its first three rows
    text = "".join(TOPO_H100.read_text().splitlines(True)[:4])
    topo = parse_nvidia_topo(text)
    assert topo.devices == GPUS8 and topo.devices_without_row == GPUS8[3:]
    assert set(topo.links) == set(GPUS8[:3]) and topo.links["GPU2"]["GPU7"] == "NV18"


def test_topo_whole_capture_has_no_device_without_a_row():
    topo = parse_nvidia_topo(TOPO_H100.read_text())
    assert topo.devices == GPUS8 and topo.devices_without_row == []


# --- NCCL WARN messages quoted without any prefix; a plugin's own net name ------------------

def _warn_line(path, needle: str) -> str:
    return next(line for line in path.read_text().splitlines() if needle in line)


def _unprefixed(line: str) -> str:
    """A transformation of a real NCCL line: everything up to `NCCL WARN ` cut, as an issue
    title or torch's `Last error:` quotes it."""
    return line.split("NCCL WARN ", 1)[1]


def test_a_plugins_completion_error_quoted_without_prefix_is_read():
    # field/issues-4: `NET/IBP:Got completion from peer ...` alone, another plugin's net name
    log = parse_nccl_log(NCCL_IBP.read_text())
    (warn,) = log.warns
    assert (warn.kind, warn.status, warn.vendor_err, warn.request) == ("ib-completion", 12, 129, "Send")
    assert warn.peer == "7.6.13.83<36315>" and warn.host == ""


def test_a_real_completion_error_reads_the_same_without_its_prefix():
    line = _warn_line(NCCL_IB_ERROR4, "Got completion")
    full, bare = parse_nccl_log(line).warns[0], parse_nccl_log("    " + _unprefixed(line)).warns[0]
    assert (bare.kind, bare.peer, bare.status, bare.vendor_err) == (full.kind, full.peer, full.status, full.vendor_err)
    assert bare.kind == "ib-completion" and bare.vendor_err is not None


def test_a_prefixed_completion_error_with_a_plugins_net_name_is_a_completion_error():
    # a transformation of a real NCCL WARN: NCCL's `NET/IB : ` spelt as the IBP plugin spells it
    line = _warn_line(NCCL_IB_ERROR4, "Got completion").replace("NET/IB : ", "NET/IBP:")
    warn = parse_nccl_log(line).warns[0]
    assert (warn.kind, warn.peer, warn.status) == ("ib-completion", "10.0.35.1<49189>", 4)


@pytest.mark.parametrize(("path", "needle", "kind"), [
    (NCCL_IBV, "Call to ibv_create_cq", "ibverbs"),
    (NCCL_OOM, "Cuda failure 'out of memory'", "cuda"),
])
def test_other_nccl_warn_phrases_quoted_without_prefix_are_read(path, needle, kind):
    warn = parse_nccl_log(_unprefixed(_warn_line(path, needle)) + "\n").warns[0]
    assert warn.kind == kind


@pytest.mark.parametrize("text", [
    "the job died after a Got completion from peer error\n",  # prose that names the phrase
    "Cuda failure is what the log said\n",  # no quoted error after it
])
def test_prose_near_those_phrases_is_not_an_nccl_warn(text):
    with pytest.raises(ParseError):
        parse_nccl_log(text)


# --- sinfo -R: the header typed onto the command line; rows with no header ------------------

def _reasons(report):
    return [(r.nodes, r.reason, r.reason_user, r.reason_time, r.state) for r in report.rows]


def test_sinfo_r_header_words_on_the_command_line_read_its_row():
    # field/issues-4: `sinfo -R REASON USER TIMESTAMP NODELIST`, then one reason row
    report = parse_sinfo(SINFO_TYPED.read_text())
    assert report.layout == "reasons" and report.unrecognized.count == 0
    assert _reasons(report) == [("ip-10-0-1-23", "Kill task failed", "root", "2024-01-25T15:12:23", None)]


def _typed(path, command: str) -> str:
    """A transformation of a real sinfo -R capture: its header's words typed after
    `command` (single-spaced, as a shell line), the rows as printed; -l's date line kept."""
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("REASON"))
    return "\n".join([*lines[:at], f"{command} {' '.join(lines[at].split())}", *lines[at + 1:]]) + "\n"


@pytest.mark.parametrize("path", [SINFO_R, SINFO_R_LONG], ids=lambda p: p.name)
@pytest.mark.parametrize("command", ["sinfo -R", "$ sinfo -R -l", "[root@head ~]# /usr/bin/sinfo -R"])
def test_sinfo_header_typed_after_a_prompt_and_command_reads_as_printed(path, command):
    printed, typed = parse_sinfo(path.read_text()), parse_sinfo(_typed(path, command))
    assert typed.layout == printed.layout == "reasons"
    assert _reasons(typed) == _reasons(printed) and len(typed.rows) == 3


def test_sinfo_prompt_line_then_the_printed_header():
    printed = parse_sinfo(SINFO_R.read_text())
    report = parse_sinfo("[root@head ~]# sinfo -R\n" + SINFO_R.read_text())
    assert _reasons(report) == _reasons(printed)


@pytest.mark.parametrize("path", [SINFO_R, SINFO_R_LONG], ids=lambda p: p.name)
def test_sinfo_r_rows_without_their_header_are_reasons(path):
    # a transformation of a real capture: the header (and -l's date) cut, as `sinfo -R -h` prints it
    lines = path.read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("REASON"))
    text = "\n".join(lines[header + 1:]) + "\n"
    report = parse_sinfo(text)
    assert report.layout == "reasons"
    assert _reasons(report) == _reasons(parse_sinfo(path.read_text()))
    assert report.rows[1].reason == "ib cable reseat | ti"  # a "|" inside the reason kept


@pytest.mark.parametrize("text", [
    "sinfo -N -l\n",  # a command, no header words after it
    "echo sinfo -R REASON USER TIMESTAMP NODELIST\n",  # sinfo is no command here
])
def test_sinfo_command_lines_that_carry_no_header_are_not_one(text):
    with pytest.raises(ParseError):
        parse_sinfo(text)


def test_sinfo_n_l_rows_without_their_header_are_not_read_as_reasons():
    rows = "".join(SINFO_N_LONG.read_text().splitlines(True)[2:])
    with pytest.raises(ParseError):
        parse_sinfo(rows)


# --- kernel log: the driver says a GPU needs a reset, with no Xid number --------------------

def _reset_line() -> str:
    return next(line for line in XID_RESET.read_text().splitlines() if "NV_ERR_RESET_REQUIRED" in line)


def test_reset_required_assertion_without_an_xid_is_a_fault():
    # field/issues-4: GSP's alloc failing (a GSP error), then `Assertion failed: Reset required
    # [NV_ERR_RESET_REQUIRED]`, both indented by a markdown list; no Xid, no bus id
    log = parse_kernel_log(XID_RESET.read_text(), year=2026)
    (fault,) = log.faults
    assert (fault.kind, fault.error, fault.pci_bus_id) == (RESET_REQUIRED, "NV_ERR_RESET_REQUIRED", None)
    assert "NV_ERR_RESET_REQUIRED" in fault.message and fault.time is not None
    assert len(log.gsp_errors) == 1 and log.xids == []


@pytest.mark.parametrize("status", ["NV_ERR_GPU_IS_LOST", "NV_ERR_GPU_IN_FULLCHIP_RESET"])
def test_the_other_statuses_that_mean_a_reset_are_faults_too(status):
    # a transformation of the real assertion line: the status the driver's GSP RPC path returns
    # for a GPU lost from the bus or in a full-chip reset
    log = parse_kernel_log(_reset_line().replace("NV_ERR_RESET_REQUIRED", status), year=2026)
    assert [(f.kind, f.error) for f in log.faults] == [(RESET_REQUIRED, status)]


def test_an_assertion_with_another_status_is_no_reset_fault():
    # real: `Assertion failed: Failure: Generic Error [NV_ERR_GENERIC]` at GSP init: a GSP error,
    # and RmInitAdapter's failure the fault
    log = parse_kernel_log(XID_GENERIC_ASSERT.read_text(), year=2026)
    assert [f.kind for f in log.faults] == ["init-failed"]
    assert any("NV_ERR_GENERIC" in e.message for e in log.gsp_errors)


def test_a_reset_assertion_after_a_gpu_named_takes_its_bus():
    # a transformation: the real Xid 79 log's first line naming the GPU, then the real assertion
    named = next(line for line in XID79_DUMP.read_text().splitlines() if "NVRM: GPU at PCI:" in line)
    log = parse_kernel_log(named + "\n" + _reset_line().strip() + "\n", year=2026)
    assert [f.pci_bus_id for f in log.faults if f.kind == RESET_REQUIRED] == ["0000:5d:00.0"]


def _xid_check(text: str) -> list[tuple[str, str, str]]:
    log = msgspec.structs.replace(parse_kernel_log(text, year=2026), source="dmesg", source_lines=len(text.splitlines()))
    out = gpu_checks.xid(kernel_gpu_log=log, gpus=None, limits=GENERIC)
    return sorted((f.id, f.status.value, f.component) for f in out if isinstance(f, Finding))


def test_the_xid_check_fails_a_gpu_the_driver_says_needs_a_reset():
    assert _xid_check(XID_RESET.read_text()) == [("gpu.E024", "FAIL", "GPU?:reset-required")]
    assert CATALOGUE["gpu.E024"].action == "reset-gpu"


def test_a_reset_asked_for_after_an_xid_of_that_gpu_is_the_same_incident():
    text = XID79_DUMP.read_text() + _reset_line().strip() + "\n"
    assert _xid_check(text) == [("gpu.E020", "FAIL", "0000:5d:00.0:xid79")]


# --- nccl-tests: a failure line with no host, its message on the next line -------------------

def _failures(text: str):
    return [(f.kind, f.host, f.file, f.line, f.message) for f in parse_nccl_tests(text).root_failures]


def _failure_line(path) -> str:
    return next(line for line in path.read_text().splitlines() if ": Test NCCL failure " in line)


def test_a_cuda_failure_with_its_message_on_the_next_line_is_read():
    # field/issues-4: `Test CUDA failure common.cu:1007` / `'CUDA-capable device(s) is/are busy or unavailable'`
    run = parse_nccl_tests(NT_BUSY.read_text())
    assert _failures(NT_BUSY.read_text()) == [
        ("cuda", "", "common.cu", 1007, "CUDA-capable device(s) is/are busy or unavailable")]
    assert not run.completed and run.samples == () and run.unrecognized.count == 0


@pytest.mark.parametrize("path", [NT_FASTMOE, NT_HCA], ids=lambda p: p.name)
def test_a_real_failure_reads_the_same_without_its_host_and_with_its_message_moved(path):
    # transformations of real failure lines: the host cut; the message put on a line of its
    # own; the message wrapped inside its quote
    line = _failure_line(path)
    ((kind, host, file, number, message),) = _failures(line + "\n")  # whole lines: each with its line end
    head, quoted = line.split(" '", 1)
    assert _failures(line.split(": ", 1)[1] + "\n") == [(kind, "", file, number, message)]
    assert _failures(f"{head}\n'{quoted}\n") == [(kind, host, file, number, message)]
    words = quoted.split(" ")
    if len(words) > 2:
        wrapped = f"{head} '{' '.join(words[:2])}\n{' '.join(words[2:])}\n"
        assert _failures(wrapped) == [(kind, host, file, number, message)]


def test_a_quoted_line_joins_only_the_failure_just_before_that_lacks_its_message():
    line = _failure_line(NT_FASTMOE)
    head = line.split(" '", 1)[0]
    # two failures in a row, the first with no message: the second is no message of the first
    assert [f[4] for f in _failures(f"{head}\n{line}\n")] == ["", "unhandled system error"]
    # a quoted line after a failure that had its message: not joined
    run = parse_nccl_tests(f"{line}\n'CUDA-capable device(s) is/are busy or unavailable'\n")
    assert [f.message for f in run.root_failures] == ["unhandled system error"] and run.unrecognized.count == 1
    # a blank line between: the message no longer the failure's
    assert _failures(f"{head}\n\n'unhandled system error'\n")[0][4] == ""
