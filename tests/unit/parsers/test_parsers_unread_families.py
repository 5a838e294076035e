"""Message families the parsers left unread in real outputs (issue 20's audit of unread lines,
tests/field/unread.py): each test reads a real tuning or corpus file and asserts the fact its
once-unread lines carry, and that the line is no longer counted unread. The audit itself:
`lines.collecting_unread` hands over every unread line, not only the sample, and the audit
never opens a held-out file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from field import unread as audit

from healthcheck.parsers import parser_for
from healthcheck.parsers.lines import SAMPLE_MAX, collecting_unread, is_command_echo, is_prompt
from healthcheck.parsers.nccl_log import parse_nccl_log
from healthcheck.parsers.nccl_tests import parse_nccl_tests
from healthcheck.parsers.nvidia_smi import parse_nvidia_smi_q_pasted
from healthcheck.parsers.torch_log import parse_torch_log
from healthcheck.parsers.xid import INIT_FAILED, PROBE, parse_kernel_log

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CORPUS = FIXTURES / "corpus"
FIELD = FIXTURES / "field"


def unread_texts(facts) -> list[str]:
    return [s.text for s in facts.unrecognized.sample]


# ---------------------------------------------------------------- the audit's mechanism


def test_collecting_unread_hands_over_every_unread_line_not_only_the_sample():
    # a real EFA job's output: NCCL's lines among libfabric's and PMIx's, far more unread than sampled
    text = (FIELD / "repos/nccl-log/p4d-2node-srun-label-nccl-2.18.3-aws-ofi-efa-full-job-out.txt").read_text()
    with collecting_unread() as every:
        log = parse_nccl_log(text)
    assert log.unrecognized.count > SAMPLE_MAX
    assert len(every) == log.unrecognized.count
    assert [line.number for line in every[:SAMPLE_MAX]] == [s.line for s in log.unrecognized.sample]
    parse_nccl_log(text)  # outside the block nothing is collected
    assert len(every) == log.unrecognized.count


def test_the_audit_reads_only_tuning_files_of_the_field_collections():
    tuning = {path for _, path in audit.tuning_files()}
    held_out = {ff.path for ff in audit.field_facts.load() if ff.split != "tuning"}
    assert tuning and held_out and not tuning & held_out


def test_the_audit_sets_apart_the_lines_another_parser_reads_in_the_same_text():
    # NCCL's `Bootstrap : Using eth0:...` lines in an nccl-tests job's output: unread by nccl-tests,
    # read by nccl-log (tuning)
    path = FIELD / "repos/nccl-tests/all_reduce-p4d-2node-srun-label-full-slurm-out-pmix-libfabric-noise.txt"
    lines = audit.unread_lines("nccl-tests", path)
    nccl = {line.number for line in lines if "NCCL INFO Bootstrap" in line.text}
    assert nccl and nccl <= audit.read_elsewhere("nccl-tests", path, lines)
    assert audit.read_elsewhere("xid", CORPUS / "xid-dmesg/libnccl-segfault.txt", []) == set()


def test_the_audit_marks_health_tokens_and_folds_values():
    assert audit.relevant("NVRM: GPU Board Serial Number: 0322716036227")  # NVRM: the driver speaking
    assert audit.relevant("NCCL INFO Connected all rings") is False
    assert audit.relevant("misc/socket.cc:503 NCCL WARN socketProgress: Connection closed by remote peer")
    assert audit.relevant("pcieport 0000:00:03.1: AER: Uncorrected (Fatal) error received: 0000:00:03.1")
    assert audit.relevant("NCCL INFO Using network Socket") is False
    assert audit.relevant("peer 10.1.2.3<54862>")
    assert audit.normalised("busId 4c000 commId 0x1f2e - Init START") == audit.normalised(
        "busId 5d000 commId 0xabc - Init START")


# ---------------------------------------------------------------- xid: the board's serial


@pytest.mark.parametrize("path, bus, serial", [
    # `GPU Board Serial Number: N` after `GPU at PCI:0000:9b:00: GPU-...` (corpus)
    (CORPUS / "xid-dmesg/xid119-gsp-rpc-timeout.txt", "0000:9b:00.0", "1650124014249"),
    # both forms, the second `GPU 0000:91:00.0: GPU serial number is N.` naming its bus (tuning)
    (FIELD / "repos/xid/xid79-sxid20034-md-blockquote-with-empty-quote-lines.txt", "0000:91:00.0", "1653723052734"),
    (FIELD / "issues/xid/aer-surprise-down-then-xid79-tesla.txt", "0000:02:00.0", "0322716036227"),
])
def test_the_board_serial_the_driver_logs_with_an_xid_is_kept_by_bus(path, bus, serial):
    log = parse_kernel_log(path.read_text())
    assert log.gpu_serials.get(bus) == serial
    assert not any("Serial Number" in t or "serial number is" in t for t in unread_texts(log))


def test_a_board_without_a_serial_logs_zero_or_nothing_read_and_kept_as_none():
    for name in ("xid79-bare-lines-rtx5090.txt", "xid79-pid0-crash-dump-multiline-then-aer-corrected.txt"):
        log = parse_kernel_log((FIELD / "issues/xid" / name).read_text())
        assert log.gpu_serials == {}
        assert not any("Serial Number" in t for t in unread_texts(log))
        assert [x.code for x in log.xids][:1] == [79]


# ---------------------------------------------------------------- xid: a probe that failed


def test_a_probe_that_failed_for_n_devices_is_the_lost_gpus_init_failure():
    # the GPU fell off the bus at probe, then the driver's summary of the probe (tuning)
    log = parse_kernel_log((FIELD / "issues/xid/fallen-off-bus-no-xid-multiline-570.txt").read_text())
    (fault,) = log.faults
    assert (fault.kind, fault.stage, fault.pci_bus_id) == (INIT_FAILED, PROBE, "0000:b3:00.0")
    assert "probe routine failed for 1 device" in fault.message
    assert log.unrecognized.count == 0


def test_the_drivers_probe_summary_after_the_kernels_probe_failure_is_one_failure():
    # `nvidia: probe of 0000:5d:00.0 failed with error -1`, then the driver's summary (tests/fixtures/kernel-log)
    log = parse_kernel_log((FIXTURES / "kernel-log/dmesg-probe-fallen-off-bus-continuation.txt").read_text())
    assert [(f.kind, f.stage, f.pci_bus_id) for f in log.faults] == [(INIT_FAILED, PROBE, "0000:5d:00.0")]
    assert not any("probe routine failed" in t for t in unread_texts(log))


def test_a_probe_failure_with_no_gpu_named_before_it_names_none():
    # the same real line alone: the driver names no GPU, so neither does the fault
    text = (FIELD / "issues/xid/fallen-off-bus-no-xid-multiline-570.txt").read_text().splitlines()[3]
    (fault,) = parse_kernel_log(text + "\n").faults  # the whole line: its line end
    assert (fault.kind, fault.stage, fault.pci_bus_id, fault.devices) == (INIT_FAILED, PROBE, None, None)


# ---------------------------------------------------------------- torch: the watchdog's exception report


def test_torch_2_3_exception_hit_in_nccl_work_is_the_groups_exception_at():
    log = parse_torch_log((FIELD / "issues/torch-log/watchdog-hard-wrapped-at-fixed-width-2.3.txt").read_text())
    exceptions = [(p.kind, p.seq, p.pg_rank, p.pg_id) for p in log.progress]
    assert exceptions == [("exception-at", 2, 0, "0")]
    assert not any("Exception hit" in t for t in unread_texts(log))


def test_a_watchdog_exception_line_cut_before_its_counters_still_names_the_rank():
    log = parse_torch_log((FIELD / "issues/torch-log/watchdog-reduce-scatter-base-pg1.txt").read_text())
    cut = [p for p in log.progress if p.pg_rank == 3]
    assert [(p.kind, p.seq, p.pg_id) for p in cut] == [("exception-at", None, "1")]
    # the lines with their counters are read as before: one each, not twice
    assert sorted((p.pg_rank, p.seq) for p in log.progress if p.seq is not None) == [(0, 7753), (4, 7753)]
    assert not any("detected by watchdog" in t for t in unread_texts(log))


# ---------------------------------------------------------------- nccl-log: IB that never started


@pytest.mark.parametrize("name, why", [
    ("nccl-2.4.8-all-reduce-perf-hang-no-libibverbs-socket-init.txt", "Failed to open libibverbs.so[.1]"),  # WARN
    ("nccl-2.12.12-socket-fallback-multi-iface-ipv6-veth.txt", "Failed to open libibverbs.so[.1]"),  # INFO
    ("nccl-2.29-single-gpu-init-socket-gin-first50.txt", "Failed to initialize NET plugin IB"),
])
def test_why_ncclS_ib_transport_never_started_is_kept(name, why):
    log = parse_nccl_log((CORPUS / "nccl-debug" / name).read_text())
    told = [p for p in log.processes if p.ib_unavailable]
    assert told and all(p.ib_unavailable == why and p.socket_fallback for p in told)
    assert not any(why in t and "NCCL INFO" in t for t in unread_texts(log))


def test_ibvwraps_warn_that_ib_never_started_is_still_a_warn():
    log = parse_nccl_log((CORPUS / "nccl-debug/nccl-2.4.8-all-reduce-perf-hang-no-libibverbs-socket-init.txt")
                         .read_text())
    assert any("libibverbs" in w.text for w in log.warns)


# ---------------------------------------------------------------- xid: an older kernel's AER recovery


def test_an_older_kernels_no_aer_aware_driver_is_the_gpus_recovery_outcome():
    # a 4.x kernel's words for what newer ones print as `AER: can't recover (...)` (tuning)
    log = parse_kernel_log((FIELD / "issues/xid/aer-surprise-down-then-xid79-tesla.txt").read_text())
    assert [(r.pci_bus_id, r.driver, r.outcome) for r in log.aer_recovery] == [
        ("0000:02:00.0", "nvidia", "device has no AER-aware driver")]
    assert not any("AER-aware" in t for t in unread_texts(log))


# ---------------------------------------------------------------- xid: a markdown reply's empty quote lines


def test_a_replys_empty_quote_lines_are_blank_not_unread():
    # a reply that quoted a kernel log with `>` alone between its lines (tuning)
    text = (FIELD / "repos/xid/xid79-sxid20034-md-blockquote-with-empty-quote-lines.txt").read_text()
    assert any(line.strip() == ">" for line in text.splitlines())
    log = parse_kernel_log(text)
    assert not any(t == ">" for t in unread_texts(log))
    assert [x.code for x in log.xids] == [79]


# ---------------------------------------------------------------- xid: hung tasks and segfaults


GPUD_SCAN = FIELD / "repos/xid/xid119-gsp-rpc-timeout-quoted-in-gpud-scan-output.txt"


def test_hung_tasks_the_kernel_reports_are_kept_with_process_and_seconds():
    # the kernel's hung-task lines as gpud quoted them, beside the Xid 119s (tuning)
    log = parse_kernel_log(GPUD_SCAN.read_text())
    hung = {(t.process, t.pid, t.seconds) for t in log.hung_tasks}
    assert ("nvidia-smi", 3228970, 241) in hung and ("python", 4072565, 120) in hung
    assert len(log.hung_tasks) == 10
    assert not any("blocked for more than" in t for t in unread_texts(log))
    assert {x.code for x in log.xids} == {119}


def test_a_hung_task_line_the_kernel_printed_itself_is_read_too():
    # transformation: the kernel's own line as gpud quoted it, taken out of its quotes (a bare dmesg line)
    quoted = next(line for line in GPUD_SCAN.read_text().splitlines() if "INFO: task nvidia-smi:" in line)
    bare = quoted[quoted.index('"INFO: task') + 1:quoted.rindex("\\n")]
    (task,) = parse_kernel_log(bare + "\n").hung_tasks  # a whole line: its line end
    assert (task.process, task.pid, task.seconds, task.line) == ("nvidia-smi", 3228970, 120, bare)


def test_a_segfault_names_the_process_and_the_library_it_died_in():
    log = parse_kernel_log((CORPUS / "xid-dmesg/libnccl-segfault.txt").read_text())
    assert [(s.process, s.pid, s.library, s.error) for s in log.segfaults] == [
        ("pt_main_thread", 2536443, "libnccl.so.2", 4)] * 2
    assert log.segfaults[0].time is not None and log.unrecognized.count == 0
    assert (log.xids, log.sxids) == ([], [])


# ---------------------------------------------------------------- nccl-tests: NCCL's WARNs, the failure's cause


def test_an_ncclwarn_in_an_nccl_tests_output_is_kept_classified_with_its_peer():
    # NCCL_DEBUG=WARN: the peer that closed the connection, then nccl-tests' failure (tuning)
    run = parse_nccl_tests((FIELD / "issues/nccl-tests/socket-closed-by-peer-then-nccl-failure-921.txt").read_text())
    assert [(w.kind, w.host, w.src) for w in run.nccl_warns] == [("socket", "server1", "include/socket.h:385")]
    assert run.failures and "Connection closed by remote peer" in run.nccl_warns[0].text
    assert not any("NCCL WARN" in t for t in unread_texts(run))


def test_a_socket_warns_peer_address_and_port_are_read_by_peers_endpoint():
    # a two-host 4090 run: NCCL's socketProgress WARN names the peer, then nccl-tests fails (tests/fixtures)
    run = parse_nccl_tests((FIXTURES / "nccl-tests/test-nccl-failure-common-cu-961-with-nccl-chains-two-hosts-4090.txt")
                           .read_text())
    (warn,) = run.nccl_warns
    assert (warn.kind, warn.host, warn.peer_address, warn.peer_port) == ("socket", "DisAI-4090-3", "10.102.0.232",
                                                                         40318)
    assert run.failures


def test_an_ncclwarn_that_is_no_failure_is_kept_as_other():
    name = "nccl-tests/all_reduce-2gpu-mixed-gtx-p2p-disabled-socket-header-and-init-warn.txt"
    run = parse_nccl_tests((FIXTURES / name).read_text())
    assert [w.kind for w in run.nccl_warns] == ["other"]  # `Could not find a path for pattern 4`: NCCL's own
    assert not run.failures


# ---------------------------------------------------------------- prompts and command echo: noise, never unread


def test_a_root_prompt_with_a_host_and_no_user_is_a_prompt():
    # `[gpu6000 ~]# nvidia-smi -q -d MEMORY,PERFORMANCE` (tuning): as `[root@host ~]# ` always was
    assert is_prompt("[gpu6000 ~]# nvidia-smi -q -d MEMORY,PERFORMANCE")
    facts = parse_nvidia_smi_q_pasted((FIELD / "issues/nvidia-smi-q/rtx-pro-6000-q-d-memory-performance-580.txt")
                                      .read_text())
    assert facts.unrecognized.count == 0
    # a bracketed launcher label or a kernel stamp is never one
    assert not any(is_prompt(t) for t in ("[1,0]<stdout>: # nThread 1", "[ 1843.439662] NVRM: Xid", "[0] NCCL INFO"))


@pytest.mark.parametrize("tool, path", [
    ("nvidia-smi", FIELD / "repos/nvidia-smi/h100-8gpu-570.195.03-command-line-no-processes.txt"),
    ("nvidia-smi-nvlink", FIELD / "issues/nvidia-smi-nvlink/gb200-nvlink-s-18-links-elided.txt"),
])
def test_the_command_echoed_before_a_table_is_noise_not_unread(tool, path):
    # `nvidia-smi` / `nvidia-smi nvlink -s` alone on the paste's first line (tuning)
    text = path.read_text()
    assert is_command_echo(text.splitlines()[0])
    facts = parser_for(tool)(text)
    assert facts.unrecognized.count == 0
