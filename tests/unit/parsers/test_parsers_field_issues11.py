"""The mechanisms behind held-out-11's misses (issue 20's thirteenth round), each on the real
file and on real lines of other fixtures (a transformation says so): the TCPStore client's
socket failures and connect retries (c10d's store family, as torch 2.x prints them); NCCL
WARN lines whose `host:pid:tid [dev]` prefix is gone (bare, or a source and `WARN` quoted in
a sentence) and old NCCL's completion error that names no peer; perftest's device named only
in the command line pasted before a run that failed before its banner; an ibstat port with no
`CA '...'` line above it; `nvidia-smi -q -x`'s XML, read as -q (cut mid-element too), its
entities refused.
"""

from __future__ import annotations

import pytest
from support import FIXTURES, assert_linear

from healthcheck.core.errors import ParseError
from healthcheck.parsers.ibstat import parse_ibstat
from healthcheck.parsers.nccl_log import parse_nccl_log
from healthcheck.parsers.nvidia_smi import parse_nvidia_smi_q, parse_nvidia_smi_q_pasted
from healthcheck.parsers.perftest import command_device, parse_perftest
from healthcheck.parsers.torch_log import parse_torch_log

FIELD11 = FIXTURES / "field" / "issues-11"
TORCH11 = FIELD11 / "torch-log"
RESET_RANK6 = TORCH11 / "rank6-recvvalue-localhost-29500-connection-reset-frames.txt"
SHOULD_DUMP = TORCH11 / "should-dump-flag-tcpstore-then-recvvalue-ipv4-mapped-frames-cut.txt"
MACOS_RETRY = TORCH11 / "macos-dashes-log-tcp-client-failed-to-connect-validate-retrying-reset.txt"
VLLM_REDACTED = TORCH11 / "vllm-debug-lines-then-recvvalue-redacted-hosts-connection-reset.txt"
TRAINER = TORCH11 / "trainer-role-prefix-old-glog-recvvalue-reset-hash-frames-elided.txt"
NCCL11 = FIELD11 / "nccl-log"
BARE_WARN = NCCL11 / "bare-nccl-warn-no-host-prefix-ib-completion-error-12-opcode-0.txt"
PROSE_WARN = NCCL11 / "prose-quoted-net-ib-cu-781-warn-len0-no-nccl-word.txt"
COMMAND_ONLY = FIELD11 / "ib_write_bw" / "command-then-couldnt-connect-18515-unable-to-init-socket-joined.txt"
EDR_BANNER = FIXTURES / "field" / "issues" / "ib_write_bw" / "edr-write-bw-header-forum-tabs-as-spaces.txt"
NGC_WRAPPER = FIXTURES / "field" / "issues" / "ib_write_bw" / "ngc-multinode-wrapper-bidir-2qp-cut.txt"
PORT_FRAGMENT = FIELD11 / "ibstat" / "ellipsis-fragment-port-1-down-polling-no-ca-line.txt"
ROCE_IBSTAT = FIXTURES / "corpus" / "ibstat" / "h100-roce-down-polling.txt"
XML_CUT = FIELD11 / "nvidia-smi-q" / "q-x-xml-535-rtx4090-dtd-v12-cut-at-driver-model.txt"
XML = FIXTURES / "nvidia-smi-q-xml"
# torch 2.13 captured here: a client whose store's process exited (recvValue, then sendBytes)
CAPTURED = FIXTURES / "torch-store" / "torch-2.13-client-after-store-host-exited.txt"
# real runs of the diagnose fixtures: a client that never reached the store (retrying, timed out),
# and one whose store's host exited while it waited (recvValueWithTimeout)
RETRIES = FIXTURES / "diagnose" / "env-port" / "rank2.log"
WITH_TIMEOUT = FIXTURES / "diagnose" / "rules4" / "ifname-w3-r1" / "rank2.log"


# ---------------------------------------------------------------- the store lost


def test_a_ranks_store_connection_reset_is_a_store_lost_with_the_stores_end():
    [lost] = parse_torch_log(RESET_RANK6.read_text()).store_lost
    assert (lost.operation, lost.rank, lost.address, lost.line) == ("recvValue", 6, "localhost:29500", 2)
    assert "Connection reset by peer" in lost.message


def test_the_should_dump_check_and_a_recv_of_0_bytes_name_their_ranks():
    lost = parse_torch_log(SHOULD_DUMP.read_text()).store_lost
    assert [(x.operation, x.rank) for x in lost] == [("should-dump-check", 3), ("recvValue", 2)]
    assert all("failed to recv, got 0 bytes" in x.message for x in lost)
    assert lost[0].pg_rank == 3 and lost[0].address == ""  # the check prints no endpoint
    assert lost[1].address == "127.0.0.1:6006"  # IPv4-mapped, as every store address is given


def test_every_socket_operation_torch_2_13_prints_is_read():
    lost = parse_torch_log(CAPTURED.read_text()).store_lost
    assert [x.operation for x in lost] == ["recvValue"] + ["sendBytes"] * 6
    assert {x.address for x in lost} == {"127.0.0.1:29732"}
    assert "Broken pipe" in lost[-1].message and "Failed to recv" in lost[0].message
    [timed] = parse_torch_log(WITH_TIMEOUT.read_text()).store_lost
    assert (timed.operation, timed.address) == ("recvValueWithTimeout", "127.0.0.1:29640")


def test_hidden_hosts_and_elided_sockets_still_give_the_message():
    [redacted] = parse_torch_log(VLLM_REDACTED.read_text()).store_lost
    assert redacted.address == "[<redacted>]:58159" and "Connection reset" in redacted.message
    [elided] = parse_torch_log(TRAINER.read_text()).store_lost  # `SocketImpl(fd=24, ...)`: no remote printed
    assert elided.address == "" and "Connection reset by peer" in elided.message


def test_a_collapsed_exception_line_ends_the_message():
    """A renderer that put the C++ exception's next line on the socket error's (a
    transformation of the real capture: the line break become one blank)."""
    text = CAPTURED.read_text()
    head, _, tail = text.partition("\nException raised from")
    [first, *_] = parse_torch_log(head + " Exception raised from" + tail).store_lost
    assert first.message.endswith("Did the remote server shutdown or crash?")


# ---------------------------------------------------------------- connects retried


def test_the_store_clients_retry_line_names_the_store_and_the_retry():
    [z] = parse_torch_log(MACOS_RETRY.read_text()).rendezvous
    assert (z.kind, z.address, z.retry, z.seconds) == ("connect-failed", "100.64.0.1:59782", 6, 1800.0)
    assert z.message.endswith("Connection reset by peer")


def test_a_retry_whose_cause_is_the_sockets_timeout_stays_a_client_timeout():
    retries = [z for z in parse_torch_log(RETRIES.read_text()).rendezvous if z.retry is not None]
    assert [(z.kind, z.retry, z.address) for z in retries] == [("client-timeout", 0, "127.0.0.1:30521"),
                                                              ("client-timeout", 1, "127.0.0.1:30521")]
    assert "retrying" in retries[0].message and "timed out (try=1" in retries[1].message


def test_reading_the_store_family_costs_its_length():
    def parse(text: str) -> None:
        parse_torch_log(text)
    for filler in ("recvValue failed on SocketImpl(", "SocketImpl(remote=", "TCP client failed to connect/validate to host ",
                   "a:1 - retrying (try=1, timeout=1ms", '"should dump" flag on TCPStore with error: '):
        assert_linear(parse, filler * (100_000 // len(filler)), filler * (1_000_000 // len(filler)), what=filler)


# ---------------------------------------------------------------- NCCL WARNs without their prefix


def test_old_nccls_completion_error_without_a_peer_is_an_ib_completion():
    [w] = parse_nccl_log(BARE_WARN.read_text()).warns
    assert (w.kind, w.status, w.vendor_err, w.peer, w.host) == ("ib-completion", 12, 129, "", "")


def test_a_warn_quoted_in_a_sentence_with_its_source_is_read_to_its_closing_quote():
    [w] = parse_nccl_log(PROSE_WARN.read_text()).warns
    assert (w.kind, w.status, w.vendor_err, w.src) == ("ib-completion", 12, 129, "transport/net_ib.cu:781")
    assert w.text.endswith("vendor err 129")  # the sentence after the quote is not the WARN's
    # newer NCCL's `NCCL WARN` after the source, in the same sentence (a transformation of the real one)
    newer = PROSE_WARN.read_text().replace("net_ib.cu:781 WARN", "net_ib.cc:781 NCCL WARN")
    [n] = parse_nccl_log(newer).warns
    assert (n.kind, n.src, n.status) == ("ib-completion", "transport/net_ib.cc:781", 12)


def test_a_sentences_own_warn_is_no_nccl_line():
    """The real sentence with NCCL's phrase replaced by its own words: a source and `WARN`
    before prose are not a WARN line."""
    prose = PROSE_WARN.read_text().replace("NET/IB : Got completion with error 12", "I am running")
    with pytest.raises(ParseError):
        parse_nccl_log(prose)


def test_reading_sourced_warns_costs_its_length():
    def parse(text: str) -> None:
        try:
            parse_nccl_log(text)
        except ParseError:
            pass
    for filler in (" WARN ", "a.cc:1 WARN ", "'a.cu:1 WARN NET/IB : Got completion with error 1", "x" * 40 + " "):
        assert_linear(parse, filler * (100_000 // len(filler)), filler * (1_000_000 // len(filler)), what=filler)


# ---------------------------------------------------------------- perftest's command line


def test_a_run_that_failed_before_its_banner_takes_the_device_its_command_names():
    run = parse_perftest(COMMAND_ONLY.read_text())
    assert run.device == "rocep133s0f0" and run.title is None
    assert run.failures[0].kind == "connect" and run.failures[0].port == 18515
    assert run.unrecognized.count == 2  # the fence lines only: the command line was read
    # without the command line, no device (a transformation of the real paste)
    without = COMMAND_ONLY.read_text().replace("# ib_write_bw -d rocep133s0f0 192.168.125.211\n", "")
    assert parse_perftest(without).device is None


def test_the_banners_device_wins_and_two_commands_devices_name_none():
    edr = EDR_BANNER.read_text()
    assert edr.startswith("~> ib_write_bw -d mlx5_1 ")
    assert parse_perftest(edr.replace("-d mlx5_1", "-d mlx5_9", 1)).device == "mlx5_1"  # the banner's
    # the wrapper's commands for two devices (mlx5_3, mlx5_4), then the real failure above instead of
    # their banners (a transformation): which device failed is unknown
    commands = [x for x in NGC_WRAPPER.read_text().split("\n") if x.startswith("INFO: run ib_write_bw")]
    assert {command_device(x) for x in commands} == {"mlx5_3", "mlx5_4"}
    failed = COMMAND_ONLY.read_text().split("\n")[2]
    run = parse_perftest("\n".join([*commands, failed]) + "\n")  # whole lines, each its line end
    assert run.device is None and run.failures[0].kind == "connect"


@pytest.mark.parametrize(("line", "device"), [
    ("# ib_write_bw -d rocep133s0f0 192.168.125.211", "rocep133s0f0"),
    ("root@u1:/dev/shm/pt/bin# /dev/shm/pt/bin/ib_write_bw -d mlx5_3 -a --use_cuda", "mlx5_3"),
    ("INFO: run ib_write_bw server on clx-host-108: sudo taskset -c 28 ib_write_bw -d mlx5_3 -s 65536", "mlx5_3"),
    ("ib_send_bw --ib-dev=mlx5_0 -F", "mlx5_0"), ("ib_read_bw --ib-dev mlx5_2", "mlx5_2"),
    ("ib_write_bw -dmlx5_1 -a", "mlx5_1"),
    ("ib_write_bw 10.0.0.1", None), ("ib_write_bw: error while loading shared libraries", None),
    ("ib_write_bw -d -a", None),
])
def test_the_command_lines_device(line, device):
    assert command_device(line) == device


def test_reading_command_lines_costs_its_length():
    def parse(text: str) -> None:
        try:
            parse_perftest(text)
        except ParseError:
            pass
    for filler in ("ib_write_bw ", " -d ", "/ib_write_bw -d a", "ib_"):
        assert_linear(parse, filler * (100_000 // len(filler)), filler * (1_000_000 // len(filler)), what=filler)


# ---------------------------------------------------------------- ibstat's port without its CA


def test_a_port_fragment_with_no_ca_line_is_read_with_its_ca_unknown():
    parsed = parse_ibstat(PORT_FRAGMENT.read_text())
    [port] = parsed.ports
    assert (port.ca, port.port, port.state, port.phys_state) == ("", 1, "Down", "Polling")
    assert port.cut and port.rate_gbps is None  # the fragment ends before its rate: unknown, never invented


def test_a_port_printed_alone_unindented_reads_every_field():
    """`ibstat CA PORT` prints the port alone, unindented (a transformation of a real
    all-CA output: its first CA's port block without the CA lines, dedented)."""
    lines = ROCE_IBSTAT.read_text().split("\n")
    start = next(i for i, x in enumerate(lines) if x.strip() == "Port 1:")
    end = next(i for i, x in enumerate(lines) if i > start and x.startswith("CA '"))
    [port] = parse_ibstat("\n".join(x.strip() for x in lines[start:end]) + "\n").ports
    whole = parse_ibstat(ROCE_IBSTAT.read_text()).ports[0]
    assert (port.state, port.phys_state, port.rate_gbps, port.link_layer, port.port_guid) == (
        whole.state, whole.phys_state, whole.rate_gbps, whole.link_layer, whole.port_guid)
    assert port.ca == "" and not port.cut


def test_a_port_line_that_says_no_state_is_no_port():
    text = PORT_FRAGMENT.read_text()
    with pytest.raises(ParseError):
        parse_ibstat(text[:text.index("Port 1:") + len("Port 1:")] + "\n")
    with pytest.raises(ParseError):  # fields with no port line: nothing of ibstat's
        parse_ibstat(text.replace("Port 1:", "Status:"))


# ---------------------------------------------------------------- nvidia-smi -q -x


def test_xml_cut_mid_element_reads_what_came_before():
    facts = parse_nvidia_smi_q_pasted(XML_CUT.read_text())
    [gpu] = facts.gpus
    assert (facts.driver_version, facts.cuda_version) == ("535.86.05", "12.2")
    assert (gpu.name, gpu.pci_bus_id, gpu.persistence_mode) == ("NVIDIA GeForce RTX 4090", "0000:84:00.0", True)
    assert gpu.uuid is None and gpu.memory_total_mib is None  # after the cut: unknown, never invented


def test_xml_gives_the_same_facts_as_q_under_the_same_keys():
    """netdata's real -q -x outputs (tests/fixtures/nvidia-smi-q-xml)."""
    [a100] = parse_nvidia_smi_q(XML.joinpath("a100-sxm4-mig.xml").read_text()).gpus
    assert (a100.mig_mode, a100.ecc_enabled, a100.virtualization_mode) == (True, True, "Pass-Through")
    assert a100.memory_total_mib == 40960  # the GPU's, not a MIG device's 19968
    assert a100.ecc_volatile_uncorrected is None and a100.ecc_aggregate_uncorrected == 0  # N/A is unknown
    assert a100.throttle_reasons == []  # a reason's value broken over two lines still read
    assert a100.remapped_rows_pending is None
    [p100] = parse_nvidia_smi_q(XML.joinpath("tesla-p100.xml").read_text()).gpus
    assert (p100.ecc_aggregate_corrected, p100.ecc_volatile_uncorrected) == (3, 0)  # the single-bit totals
    assert (p100.retired_pages_sbe, p100.retired_pages_dbe, p100.retired_pages_pending) == (0, 0, False)
    assert p100.processes == [] and p100.throttle_reasons == ["gpu_idle"]
    [rtx] = parse_nvidia_smi_q(XML.joinpath("rtx-3060.xml").read_text()).gpus
    assert (rtx.pcie_gen_current, rtx.pcie_gen_max, rtx.pcie_width_current, rtx.pcie_width_max) == (1, 4, 8, 16)
    [proc] = rtx.processes or []
    assert (proc.pid, proc.name, proc.type, proc.used_memory_mib) == (28543, "/usr/libexec/Xorg", "G", 4)


def test_a_value_the_cut_split_is_dropped_and_a_paste_around_the_xml_is_read():
    text = XML.joinpath("tesla-p100.xml").read_text()
    cut = text[:text.index("<driver_version>") + len("<driver_version>510.4")]
    with pytest.raises(ParseError):  # no version whose end was read, no GPU: nothing of the log
        parse_nvidia_smi_q_pasted(cut)
    pasted = "$ nvidia-smi -q -x\n```xml\n" + text + "```\n"  # a prompt and a fence around it
    assert parse_nvidia_smi_q_pasted(pasted).gpus == parse_nvidia_smi_q(text).gpus


@pytest.mark.parametrize("doctype", [
    '<!DOCTYPE nvidia_smi_log [<!ENTITY a "x">]>',
    '<!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>',
    '<!DOCTYPE nvidia_smi_log [<!ENTITY e SYSTEM "file:///etc/passwd">]>',
    '<!DOCTYPE nvidia_smi_log [<!ENTITY % p SYSTEM "http://127.0.0.1:9/x.dtd"> %p;]>',
])
def test_an_entity_declaration_refuses_the_xml(doctype):
    """The real XML with its DOCTYPE replaced (a transformation): no entity ever expands."""
    text = XML.joinpath("tesla-p100.xml").read_text()
    hostile = text.replace('<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v11.dtd">', doctype)
    hostile = hostile.replace("<product_name>Tesla P100-PCIE-16GB", "<product_name>&b;&e;")
    with pytest.raises(ParseError):
        parse_nvidia_smi_q_pasted(hostile)


def test_reading_xml_costs_its_length():
    def parse(text: str) -> None:
        try:
            parse_nvidia_smi_q_pasted(text)
        except ParseError:
            pass
    head = "<nvidia_smi_log><gpu id=\"00000000:01:00.0\">"
    for filler in ("<a>", "<a>x</a>", "&amp;", "x", "<product_name>", "</a>"):
        assert_linear(parse, head + filler * (100_000 // len(filler)), head + filler * (1_000_000 // len(filler)),
                      what=filler)
