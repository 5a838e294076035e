"""perftest (ib_write_bw / ib_read_bw / ib_send_bw) parser: every fixture with its values,
both sides interleaved, units, failures, the real binary, garbage, fuzz and linear time."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import FIXTURES, assert_linear, run_hc_inproc

from healthcheck.core.errors import ParseError
from healthcheck.parsers import TOOLS, parser_for
from healthcheck.parsers.perftest import (
    MIB_PER_S_TO_GBITS,
    PerftestFailureKind,
    PerftestRun,
    parse_perftest,
)

K = PerftestFailureKind

DIR = FIXTURES / "ib_write_bw"
GBITS_HEADER = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
MB_HEADER = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
MIB_HEADER = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"
TITLE = "                    RDMA_Write BW Test\n"


def read(name: str) -> str:
    return (DIR / name).read_text()


def parse(name: str) -> PerftestRun:
    return parse_perftest(read(name))


def kinds(run: PerftestRun) -> list[str]:
    return [f.kind.value for f in run.failures]


def mb(value: float) -> float:
    """perftest's MB/sec (= MiB/sec, 2^20 bytes) in Gb/s."""
    return value * 2**20 * 8 / 1e9


# -------------------------------------------------------------- every fixture

# file -> what its parse must hold (the attributes named; rows checked below per file)
EXPECTED: dict[str, dict] = {
    "client-bidir-4qp-all-sizes-ainic-800g.txt": {
        "side": "client", "test": "write", "device": "ionic_1", "bidirectional": True, "qps": 4, "link_type": "Ethernet",
        "mtu": 4096, "gid_index": 1, "transport": "IB", "connection": "RC", "data_exchange": "Ethernet", "unit": "Gb/sec",
        "failures": ()},
    "server-bidir-4qp-all-sizes-ainic-800g.txt": {
        "side": "server", "test": "write", "device": "ionic_7", "bidirectional": True, "qps": 4, "link_type": "Ethernet",
        "mtu": 4096, "gid_index": 1, "unit": "Gb/sec", "failures": ()},
    "loopback-8M-server-client-interleaved.txt": {
        "side": "both", "device": "ib0", "bidirectional": False, "qps": 1, "link_type": "IB", "mtu": 4096, "gid_index": None,
        "unit": "MB/sec", "cq_moderation": 1, "failures": ()},
    "loopback-all-sizes-interleaved.txt": {
        "side": "both", "device": "ib0", "bidirectional": False, "qps": 1, "link_type": "IB", "unit": "MB/sec", "failures": ()},
    "newest-perftest-rdma-cm-lock-free-ddp-fields-gbits.txt": {
        "side": "client", "device": "mlx5_0", "qps": 1, "link_type": "Ethernet", "gid_index": 0, "data_exchange": "rdma_cm",
        "rdma_cm_qps": True, "unit": "Gb/sec", "failures": ()},
    "ngc-multinode-perf-wrapper-bidir-2qp-bw-peak-warning.txt": {
        "device": "mlx5_3", "bidirectional": True, "qps": 2, "rows": (), "failures": (),
        "warnings": ("BW peak won't be measured in this run.",)},
    "post-list-8byte-60s-msgrate-gbits-ethernet.txt": {
        "title": "RDMA_Write Post List BW Test", "device": "ib0", "link_type": "Ethernet", "gid_index": 2, "post_list": 128,
        "tx_depth": 256, "unit": "Gb/sec", "failures": ()},
    "server-roce-duration-mode-header-gid-fragment.txt": {
        "side": "server", "device": "mlx5_0", "link_type": "Ethernet", "gid_index": 3, "unit": "MB/sec", "rows": (), "failures": ()},
    "server-roce-tabs-expanded-header-gid-index-3.txt": {
        "side": "server", "device": "mlx5_0", "link_type": "Ethernet", "gid_index": 3, "qps": 1, "unit": None, "rows": (), "failures": ()},
    "client-kernel-5.1-couldnt-create-ib-resources.txt": {"side": "unknown", "title": None, "device": None, "rows": ()},
    "server-kernel-5.1-couldnt-get-device-attributes-create-qp-failed.txt": {"side": "server", "device": None, "rows": ()},
    "completion-with-error-status-4-syndrom-0x51-use-cuda.txt": {"side": "unknown", "rows": ()},
    "failed-to-modify-qp-to-rtr-grh-required-two-qps.txt": {"side": "unknown", "rows": ()},
    "debian-perftest-no-device-plain.txt": {"side": "unknown", "device": None, "rows": ()},
    "debian-perftest-no-device-d-mlx5_0-report-gbits.txt": {"side": "unknown", "device": None, "rows": ()},
    "debian-perftest-no-device-client-localhost.txt": {"side": "unknown", "device": None, "rows": ()},
    "debian-perftest-no-device-ib_read_bw.txt": {"side": "unknown", "device": None, "rows": ()},
}


def test_every_fixture_has_its_facts_listed():
    assert {p.name for p in DIR.glob("*.txt")} == set(EXPECTED)
    listed = (DIR / "SOURCES.md").read_text()
    assert all(f"`{name}`" in listed for name in EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture(name):
    run = parse(name)
    for attr, value in EXPECTED[name].items():
        assert getattr(run, attr) == value, (attr, getattr(run, attr))
    assert run.rows or run.failures or run.title  # never an empty fact
    for row in run.rows:
        assert row.size_bytes > 0 and row.iterations > 0 and row.bw_avg_gbits >= 0
        assert row.bw_peak_gbits is None or row.bw_peak_gbits > 0


def test_ainic_bidir_client_all_sizes_in_gbits():
    run = parse("client-bidir-4qp-all-sizes-ainic-800g.txt")
    assert run.sizes == tuple(2**i for i in range(1, 24))
    assert run.avg_gbits(8388608) == run.avg_gbits() == 779.21
    row = run.rows_at(65536)[0]
    assert (row.iterations, row.bw_peak_gbits, row.bw_avg_gbits, row.msg_rate_mpps) == (20000, 775.85, 775.03, 1.478245)
    assert run.rows[0].bw_avg_gbits == 0.146472  # 6 decimals: perftest's REPORT_FMT_EXT below 0.1 Gb/s
    assert run.ok and run.first_failure is None
    assert len(run.addresses) == 8 and {a.role for a in run.addresses} == {"local", "remote"}
    assert run.addresses[0].gid == "253:147:22:211:89:182:01:80:06:144:129:255:254:54:91:176"
    assert run.addresses[0].lid == 0 and run.addresses[0].qpn == 0x0800


def test_ainic_server_prints_the_clients_table_and_newest_fields():
    server = parse("server-bidir-4qp-all-sizes-ainic-800g.txt")
    client = parse("client-bidir-4qp-all-sizes-ainic-800g.txt")
    assert server.rows == client.rows  # bidirectional: both sides print the sum
    assert server.warnings == ("Using sampled CPU speed 3295 MHz over reported speed 5037 MHz",)
    assert not server.cpu_frequency_conflict


def test_loopback_8m_interleaved_is_one_row_in_gbits():
    run = parse("loopback-8M-server-client-interleaved.txt")
    assert len(run.rows) == 1  # server and client printed it each
    row = run.rows[0]
    assert row.size_bytes == 8388608 and row.iterations == 20000
    assert row.bw_avg_gbits == pytest.approx(mb(24056.72)) and row.bw_avg_gbits == pytest.approx(201.8024, abs=1e-4)
    assert row.bw_peak_gbits == pytest.approx(mb(24056.74))
    assert row.msg_rate_mpps == 0.003007
    assert len(run.addresses) == 4 and run.addresses[0].lid == 0xD06


def test_loopback_all_sizes_interleaved_dedupes_the_servers_echo():
    run = parse("loopback-all-sizes-interleaved.txt")
    # the client prints 23 sizes; the write server echoes the client's last row once
    assert len(run.rows) == 23 and run.sizes == tuple(2**i for i in range(1, 24))
    assert run.avg_gbits(8388608) == pytest.approx(mb(23240.68))
    assert run.avg_gbits(65536) == pytest.approx(mb(21167.79))
    assert run.rows_at(4096)[0].bw_peak_gbits == pytest.approx(mb(10034.02))
    assert run.avg_gbits(3) is None


def test_duration_mode_peak_is_unknown_not_zero():
    run = parse("newest-perftest-rdma-cm-lock-free-ddp-fields-gbits.txt")
    (row,) = run.rows
    assert row.bw_peak_gbits is None and row.bw_avg_gbits == 42.31 and row.iterations == 403504
    run = parse("post-list-8byte-60s-msgrate-gbits-ethernet.txt")
    (row,) = run.rows
    assert (row.size_bytes, row.iterations, row.bw_peak_gbits, row.bw_avg_gbits, row.msg_rate_mpps) == (
        8, 224958464, None, 0.48, 7.498617)


def test_kernel_5_1_failures():
    client = parse("client-kernel-5.1-couldnt-create-ib-resources.txt")
    server = parse("server-kernel-5.1-couldnt-get-device-attributes-create-qp-failed.txt")
    for run in (client, server):
        assert kinds(run) == ["device-attributes", "create-qp", "create-qp", "ib-resources"]
        assert run.first_failure.kind is K.DEVICE_ATTRIBUTES
        assert run.first_failure.message == "Couldn't get device attributes"
        assert [f.message for f in run.failures[1:]] == ["Unable to create QP.", "Failed to create QP.",
                                                        "Couldn't create IB resources"]
        assert not run.ok


def test_completion_with_error_has_status_and_syndrome():
    run = parse("completion-with-error-status-4-syndrom-0x51-use-cuda.txt")
    assert kinds(run) == ["completion-error", "run"]
    f = run.first_failure
    assert (f.where, f.wc_status, f.wc_status_text, f.vendor_syndrome, f.wr_id) == (
        "client", 4, "local protection error", "0x51", 0)


def test_modify_qp_to_rtr_names_each_qp():
    run = parse("failed-to-modify-qp-to-rtr-grh-required-two-qps.txt")
    assert kinds(run) == ["modify-qp", "hca-connect", "modify-qp"]  # the repeated summary line once
    assert [(f.qp, f.qp_state) for f in run.failures if f.kind is K.MODIFY_QP] == [(122273, "RTR"), (122272, "RTR")]


@pytest.mark.parametrize("name", [n for n in EXPECTED if n.startswith("debian-perftest-no-device")])
def test_debian_no_device_captures(name):
    run = parse(name)
    assert run.first_failure.kind is K.NO_DEVICE and run.first_failure.message == "Did not detect devices"
    if "ib_read_bw" in name:  # this build's ib_read_bw stops after the first two lines (exit 7)
        assert kinds(run) == ["no-device"]
    else:
        assert kinds(run) == ["no-device", "device-not-found"]
        assert run.failures[1].message == "Unable to find the Infiniband/RoCE device"


# ------------------------------------------------------------- the real binary

def _real(args: list[str]) -> tuple[str, int]:
    r = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    return r.stdout + r.stderr, r.returncode


@pytest.mark.skipif(shutil.which("ib_write_bw") is None, reason="perftest's ib_write_bw is not installed")
@pytest.mark.parametrize("tool", ["ib_write_bw", "ib_read_bw", "ib_send_bw"])
def test_the_real_binary_without_the_device_is_a_typed_failure(tool):
    """A device that cannot exist: on a machine without HCAs perftest says it found none
    (Debian's 6.06: ' Did not detect devices '), with HCAs that the name is not one."""
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    out, code = _real([tool, "-d", "hc_no_such_hca_0", "--report_gbits"])
    assert code != 0
    run = parse_perftest(out)
    assert run.failures and not run.rows
    if Path("/sys/class/infiniband").is_dir() and any(Path("/sys/class/infiniband").iterdir()):
        assert K.DEVICE_NOT_FOUND in {f.kind for f in run.failures}
    else:  # Debian's 6.06: exit 1 (ib_write_bw, ib_send_bw) or 7 (ib_read_bw)
        assert run.first_failure.kind is K.NO_DEVICE
        assert set(kinds(run)) <= {"no-device", "device-not-found"}


@pytest.mark.skipif(shutil.which("ib_write_bw") is None, reason="perftest's ib_write_bw is not installed")
def test_the_real_binary_plain_on_a_machine_without_hcas():
    if Path("/sys/class/infiniband").is_dir():
        pytest.skip("this machine has an RDMA stack: plain ib_write_bw would start a server and wait")
    out, code = _real(["ib_write_bw"])
    assert code == 1
    assert parse_perftest(out).first_failure.kind is K.NO_DEVICE
    assert kinds(parse_perftest(out)) == kinds(parse("debian-perftest-no-device-plain.txt"))


# ------------------------------------------------------- sides, units, shapes

def _interleave(a: str, b: str) -> str:
    la, lb = a.splitlines(), b.splitlines()
    out = []
    for i in range(max(len(la), len(lb))):
        out += la[i:i + 1] + lb[i:i + 1]
    return "\n".join(out) + "\n"


def test_server_and_client_interleaved_are_one_table():
    server = read("server-bidir-4qp-all-sizes-ainic-800g.txt")
    client = read("client-bidir-4qp-all-sizes-ainic-800g.txt")
    run = parse_perftest(_interleave(server, client))
    assert run.side == "both" and run.devices == ("ionic_1", "ionic_7") and run.device == "ionic_1"
    assert run.rows == parse_perftest(client).rows and len(run.rows) == 23
    assert run.avg_gbits() == 779.21


def test_one_side_repeated_rows_are_kept_run_infinitely():
    rows = " 65536      183000          0.00               95.96                0.183037\n" \
           " 65536      183100          0.00               96.01                0.183132\n" \
           " 65536      183000          0.00               95.96                0.183037\n"
    run = parse_perftest(TITLE + " Device         : mlx5_0\n" + GBITS_HEADER + rows)
    assert len(run.rows) == 3 and all(r.bw_peak_gbits is None for r in run.rows)
    assert run.avg_gbits(65536) == pytest.approx((95.96 * 2 + 96.01) / 3)


def test_units_are_normalised_to_gbits():
    row = " 8388608    5000             24056.74            24056.72\t\t   0.003007\n"
    mb_run = parse_perftest(TITLE + MB_HEADER + row)
    mib_run = parse_perftest(TITLE + MIB_HEADER + row)  # perftest >= 24.07: same 2^20 value, new name
    g_run = parse_perftest(TITLE + GBITS_HEADER + row)
    assert mb_run.rows == mib_run.rows and mib_run.unit == "MiB/sec" and mb_run.unit == "MB/sec"
    assert mb_run.rows[0].bw_avg_gbits == pytest.approx(24056.72 * MIB_PER_S_TO_GBITS)
    assert MIB_PER_S_TO_GBITS == 0.008388608
    assert g_run.rows[0].bw_avg_gbits == 24056.72


def test_qos_cpu_util_and_per_port_columns():
    qos = " #bytes    #sl      #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n" \
          " 65536      3           5000           97.10            96.90                  0.184830\n"
    (row,) = parse_perftest(TITLE + qos).rows
    assert (row.sl, row.iterations, row.bw_avg_gbits) == (3, 5000, 96.90)
    cpu = GBITS_HEADER.rstrip("\n") + "    CPU_Util[%]\n 65536      5000           97.10            96.90\t\t     0.184830\t    12.50\n"
    (row,) = parse_perftest(TITLE + cpu).rows
    assert row.cpu_util_percent == 12.5 and row.bw_avg_gbits == 96.90
    per_port = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]   BW Port1[Gb/sec]"
                "   MsgRate Port1[Mpps]   BW Port2[Gb/sec]   MsgRate Port2[Mpps]\n"
                " 65536      5000         190.00            189.50\t\t   0.361400        94.75            0.180700"
                "              94.75            0.180700\n")
    (row,) = parse_perftest(TITLE + per_port).rows
    assert row.bw_avg_gbits == 189.5 and row.msg_rate_mpps == 0.3614


def test_report_both_keeps_each_direction_apart():
    text = ("                    RDMA_Write Bidirectional BW Test\n" + GBITS_HEADER
            + " 65536      5000           0.00               380.00              0.724792\n"
            + "---------------------------------------------------------------------------------------\n"
            + "\n Local results: \n"
            + "---------------------------------------------------------------------------------------\n"
            + GBITS_HEADER + " 65536      5000           0.00               190.10              0.362584\n"
            + "---------------------------------------------------------------------------------------\n"
            + "\n Remote results: \n"
            + "---------------------------------------------------------------------------------------\n"
            + GBITS_HEADER + " 65536      5000           0.00               189.90              0.362202\n")
    run = parse_perftest(text)
    assert run.bidirectional and run.avg_gbits(65536) == 380.0
    assert [r.bw_avg_gbits for r in run.local_rows] == [190.1]
    assert [r.bw_avg_gbits for r in run.remote_rows] == [189.9]


def test_rows_that_are_not_numbers_are_not_rows():
    text = TITLE + GBITS_HEADER + " 65536      5000           inf               -nan              0.000000\n" \
                                  " 65536      5000           1.00               nan              0.000000\n" \
                                  " 65536      5000           1.00\n" + " 65536 " + "9" * 5000 + " 1.0 1.0 1.0\n"
    run = parse_perftest(text)
    assert run.rows == () and run.title == "RDMA_Write BW Test"


def test_rdma_cm_server_lines():
    text = ("---------------------------------------------------------------------------------------\n"
            + TITLE
            + " Dual-port       : OFF\t\tDevice         : mlx5_2\n"
            + " Number of qps   : 1\t\tTransport type : IB\n"
            + " Link type       : Ethernet\n GID index       : 3\n"
            + " rdma_cm QPs\t : ON\n"
            + " Data ex. method : rdma_cm \tTOS    : 106\n"
            + "---------------------------------------------------------------------------------------\n"
            + " Waiting for client rdma_cm QP to connect\n"
            + " Please run the same command with the IB/RoCE interface IP\n"
            + "---------------------------------------------------------------------------------------\n")
    run = parse_perftest(text)
    assert (run.side, run.device, run.data_exchange, run.rdma_cm_qps, run.gid_index) == (
        "server", "mlx5_2", "rdma_cm", True, 3)
    client = parse_perftest("Unable to connect (retries = 5)\n Unable to perform rdma_client function\n")
    assert client.side == "client" and kinds(client) == ["rdma-cm", "rdma-cm"]


def test_conflicting_cpu_frequency_warning_alone_and_inside_a_row():
    warning = "Conflicting CPU frequency values detected: 3000.000000 != 2400.000000. CPU Frequency is not max.\n"
    text = warning + TITLE + GBITS_HEADER + " 8388608    5000             196.08" + warning + \
        "             195.76            0.002917\n"
    run = parse_perftest(text)
    assert run.cpu_frequency_conflict
    assert run.warnings == ("Conflicting CPU frequency values detected: 3000.000000 != 2400.000000. CPU Frequency is not max.",)
    (row,) = run.rows  # the row a stderr line cut in two is whole again
    assert (row.size_bytes, row.iterations, row.bw_peak_gbits, row.bw_avg_gbits) == (8388608, 5000, 196.08, 195.76)


def test_azure_nhc_failures_listen_socket_connect():
    # Azure/azurehpc PR #691 (check_ib_bw_gdr), as quoted in the research note: server
    # and client in one log, two messages on one line
    text = ("Couldn't listen to port 18515\n"
            "Unable to open file descriptor for socket connection Unable to init the socket connection\n"
            "Couldn't connect to slurmcluster-hpc-pg0-277:18515\n")
    run = parse_perftest(text)
    assert kinds(run) == ["listen", "socket", "socket", "connect"]
    assert run.failures[0].port == 18515 and run.failures[0].host is None
    assert run.failures[1].message == "Unable to open file descriptor for socket connection"
    assert run.failures[2].message == "Unable to init the socket connection"
    assert (run.failures[3].host, run.failures[3].port) == ("slurmcluster-hpc-pg0-277", 18515)
    assert run.side == "both"


# Lines as perftest's format strings print them (src/*.c @00b55b6), each alone
@pytest.mark.parametrize("text, kind, fields", [
    ("Couldn't connect to 10.0.0.7:18516\n Unable to init the socket connection\n", K.CONNECT,
     {"host": "10.0.0.7", "port": 18516}),
    ("Couldn't connect to fe80::1:18515\n", K.CONNECT, {"host": "fe80::1", "port": 18515}),
    ("Couldn't listen to port 18515\n Unable to init the socket connection\n", K.LISTEN, {"port": 18515}),
    (" Unable to init the socket connection\n", K.SOCKET, {}),
    ("IB device mlx5_9 not found\n Unable to find the Infiniband/RoCE device\n", K.DEVICE_NOT_FOUND,
     {"device": "mlx5_9"}),
    ("No IB devices found\n", K.NO_DEVICE, {}),
    (" Couldn't get context for the device\n", K.DEVICE_CONTEXT, {}),
    ("Couldn't open IB device mlx5_1\n", K.DEVICE_CONTEXT, {"device": "mlx5_1"}),
    ("Couldn't allocate MR\n Couldn't create IB resources\n", K.ALLOCATE_MR, {}),
    ("Couldn't allocate MR with error=14\n", K.ALLOCATE_MR, {"message": "Couldn't allocate MR with error=14"}),
    ("Failed to create QP.\n", K.CREATE_QP, {}),
    ("Failed to modify QP to RTS\n", K.MODIFY_QP, {"qp_state": "RTS"}),
    (" Completion with error at server\n Failed status-transport retry counter exceeded (12): wr_id 0 syndrom 0x81\n rcnt=5\n",
     K.COMPLETION_ERROR, {"where": "server", "wc_status": 12, "vendor_syndrome": "0x81",
                                       "wc_status_text": "transport retry counter exceeded"}),
    ("Poll send CQ error status=12 qp 0 credit=0 scredit=0\n", K.COMPLETION_ERROR,
     {"wc_status": 12, "qp": 0, "wc_status_text": "transport retry counter exceeded"}),
    ("Current implementation is not compatible with versions older than 5.70\n", K.VERSION_MISMATCH, {}),
    ("ethernet_read_keys: Couldn't read remote address\n", K.EXCHANGE, {}),
    ("Couldn't init GPU context: 100\n", K.GPU, {}),
    (" Parser function exited with Error\n", K.USAGE, {}),
    ("Couldn't frobnicate the widget\n", K.OTHER, {"message": "Couldn't frobnicate the widget"}),
])
def test_failure_lines(text, kind, fields):
    f = parse_perftest(text).first_failure
    assert f.kind is kind
    for attr, value in fields.items():
        assert getattr(f, attr) == value, (attr, getattr(f, attr))


# --------------------------------------------------------------------- garbage

def _truncated() -> list[str]:
    text = read("loopback-8M-server-client-interleaved.txt")
    return [text[:10], text[:40], "************************************\n* Waiting for client to connect... *\n"]


@pytest.mark.parametrize("text", [
    "", "\n\n", "hello world\nfoo: bar\n", bytes(range(256)).decode("latin-1") * 4, "\x00" * 100,
    MB_HEADER, " 8388608    20000            24056.74            24056.72\t\t   0.003007\n",
    *_truncated(),
], ids=["empty", "newlines", "words", "binary", "nul", "header-only", "row-without-header",
        "truncated-10", "truncated-40", "waiting-only"])
def test_garbage_is_a_parse_error(text):
    with pytest.raises(ParseError) as e:
        parse_perftest(text)
    assert "\n" not in str(e.value) and len(str(e.value)) < 400


def test_a_server_that_only_waited_says_so():
    with pytest.raises(ParseError, match="waiting"):
        parse_perftest(_truncated()[2])


_FRAGMENTS = st.sampled_from([
    TITLE, "RDMA_Write Bidirectional BW Test\n", " Dual-port       : OFF\t\tDevice         : mlx5_0\n",
    " Mtu             : 4096[B]\n", GBITS_HEADER, MB_HEADER, " 65536      5000   0.00   95.96   0.183037\n",
    " 2 20000 0.147331 0.146472 9.154486\n", "Couldn't connect to a:1\n", "Failed to modify QP 1 to RTR\n",
    " Completion with error at client\n", "  Failed status 4: wr_id 0 syndrom 0x51\n", " Local results: \n",
    " local address: LID 0xd06 QPN 0x095f PSN 0x3c9e82\n", " GID: 00:00:01\n", "Conflicting CPU frequency ",
    "values detected: 1.0 != 2.0. CPU Frequency is not max.\n", "* Waiting for client to connect... *\n",
    "\x00", "\n", "\t", ":", "IB device ", " not found",
])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(st.text(max_size=600), st.lists(_FRAGMENTS | st.text(max_size=30), max_size=40).map("".join)))
def test_arbitrary_text_raises_nothing_but_parse_error(text):
    try:
        run = parse_perftest(text)
    except ParseError:
        return
    # what it accepted is evidence of some kind: rows (either side's, with --report-both), a failure, a banner;
    # or the parameters box's device or link type, or a QP's address, pasted alone (`incomplete` says so)
    assert (run.rows or run.local_rows or run.remote_rows or run.failures or run.title
            or (run.incomplete and (run.device or run.link_type or run.addresses)))


# ------------------------------------------------------------------ linear time

def _rows(n: int) -> str:
    rows = "".join(f" {2 ** (i % 24)}    {1000 + i}       {i % 400}.25            {i % 400}.10\t\t     0.{i:06d}\n"
                   for i in range(n))
    return TITLE + GBITS_HEADER + rows


def test_parse_time_is_linear_in_rows():
    assert len(parse_perftest(_rows(200_000)).rows) == 200_000
    assert_linear(parse_perftest, _rows(20_000), _rows(200_000), slack=0.0)


def test_interleaved_logs_at_scale_are_linear():
    run = parse_perftest(_interleave(_rows(100_000), _rows(100_000)))
    assert run.side == "both" and len(run.rows) == 100_000  # every row printed twice, kept once
    assert_linear(parse_perftest, _interleave(_rows(10_000), _rows(10_000)),
                  _interleave(_rows(100_000), _rows(100_000)), slack=0.0)


# ----------------------------------------------------------------------- hc parse

def test_registered_for_hc_parse():
    assert TOOLS["ib_write_bw"][:2] == ("healthcheck.parsers.perftest", "parse_perftest")
    assert parser_for("ib_write_bw")(read("loopback-8M-server-client-interleaved.txt")).side == "both"


def test_hc_parse_prints_the_facts_as_json():
    r = run_hc_inproc("parse", "ib_write_bw", str(DIR / "loopback-all-sizes-interleaved.txt"))
    assert r.returncode == 0, r.stderr
    facts = json.loads(r.stdout)["facts"]
    assert facts["side"] == "both" and facts["unit"] == "MB/sec" and len(facts["rows"]) == 23
    assert facts["rows"][-1]["bw_avg_gbits"] == pytest.approx(mb(23240.68), abs=1e-6)
    r = run_hc_inproc("parse", "ib_write_bw", "--format", "json", str(DIR / "failed-to-modify-qp-to-rtr-grh-required-two-qps.txt"))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["facts"]["failures"][0] == {
        "kind": "modify-qp", "message": "Failed to modify QP 122273 to RTR", "qp": 122273, "qp_state": "RTR"}
    r = run_hc_inproc("parse", "ib_write_bw", "-", input=b"complete garbage\n")
    assert r.returncode == 4 and r.stderr.decode().startswith("hc: error: perftest: ")


# --------------------------------------------- pasted the way people paste (issue 20)

FIELD = FIXTURES / "field" / "issues" / "ib_write_bw"


def field(name: str) -> str:
    return (FIELD / name).read_text()


def test_a_reply_quoted_in_markdown_is_read():
    # real: an ib_write_bw -a --report_gbits client pasted inside a '> ' quote, prose and a fence first
    run = parse_perftest(field("write-bw-gbits-mlx5-quoted-markdown.txt"))
    assert (run.title, run.side, run.device, run.mtu, run.link_type, run.unit) == (
        "RDMA_Write BW Test", "client", "mlx5_0", 4096, "IB", "Gb/sec")
    assert [(r.size_bytes, r.bw_avg_gbits) for r in run.rows] == [(2, 0.042185), (4, 0.084457), (8, 0.17)]
    assert run.failures == ()


@pytest.mark.parametrize("quote", ["> ", ">", "> > ", "  > "])
def test_every_quote_depth_reads_as_the_unquoted_output(quote):
    # a transformation of a real capture: the same lines, each behind a markdown quote
    text = read("loopback-all-sizes-interleaved.txt")
    quoted = "".join(quote + line for line in text.splitlines(keepends=True))
    assert parse_perftest(quoted) == parse_perftest(text)


def test_mr_allocation_failure_keeps_its_errno_text_and_the_segfault_after_it():
    # real: ib_write_bw --use_cuda -R on a vGPU (A30-8C): MR registration refused, rdma_cm
    # errors each followed by "ERRNO: Bad address.", then the shell's "Segmentation fault"
    run = parse_perftest(field("gpudirect-use-cuda-a30-vgpu-mr-bad-address-segfault.txt"))
    assert run.first_failure.kind is K.ALLOCATE_MR and run.first_failure.message == "Couldn't allocate MR"
    assert [f.errno_text for f in run.failures][-3:] == ["Bad address"] * 3
    assert run.failures[-1].kind is K.RDMA_CM and run.failures[0].errno_text is None
    assert run.crashed == "Segmentation fault (core dumped)"


def test_softiwarp_mr_failure_and_segfault_with_the_older_gid_label():
    run = parse_perftest(field("softiwarp-send-bw-mr-fail-segfault.txt"))
    assert (run.test, run.device, run.transport, run.gid_index) == ("send", "siw_ens33", "IW", 0)  # "Gid index"
    assert kinds(run) == ["allocate-mr"] * 3 and run.crashed == "Segmentation fault (core dumped)"


def test_an_errno_line_with_no_failure_before_it_is_a_failure_of_its_own():
    run = parse_perftest(TITLE + "ERRNO: Connection refused.\nERRNO: No such device.\n")
    assert [(f.kind.value, f.errno_text) for f in run.failures] == [
        ("other", "Connection refused"), ("other", "No such device")]
    assert run.crashed is None


@pytest.mark.parametrize("name", ["loopback-8M-server-client-interleaved.txt", "client-bidir-4qp-all-sizes-ainic-800g.txt",
                                  "newest-perftest-rdma-cm-lock-free-ddp-fields-gbits.txt"])
def test_a_banner_whose_whitespace_a_forum_squeezed_reads_the_same(name):
    # a transformation of real captures: every run of tabs and spaces made one space
    text = read(name)
    squeezed = "".join(" ".join(line.split()) + "\n" for line in text.splitlines())  # whole lines: each its end
    run, plain = parse_perftest(squeezed), parse_perftest(text)
    for attr in ("device", "devices", "qps", "transport", "connection", "link_type", "mtu", "gid_index",
                 "data_exchange", "rdma_cm_qps", "tx_depth", "cq_moderation", "unit", "rows"):
        assert getattr(run, attr) == getattr(plain, attr), attr
    assert run.device is not None and run.transport == "IB"


def test_duration_mode_says_the_peak_was_not_measured():
    assert parse("ngc-multinode-perf-wrapper-bidir-2qp-bw-peak-warning.txt").peak_not_measured  # the WARNING line
    assert parse("post-list-8byte-60s-msgrate-gbits-ethernet.txt").peak_not_measured  # every peak printed 0.00
    assert not parse("client-bidir-4qp-all-sizes-ainic-800g.txt").peak_not_measured
    # after the warning, a peak column is not a peak whatever it holds
    warned = parse_perftest(" WARNING: BW peak won't be measured in this run.\n" + read("loopback-all-sizes-interleaved.txt"))
    assert warned.rows and all(r.bw_peak_gbits is None for r in warned.rows)


def test_use_cuda_names_the_gpu_perftest_picked():
    # real: the --use_cuda preamble before the MR failure
    run = parse_perftest(field("gpudirect-use-cuda-a30-vgpu-mr-bad-address-segfault.txt"))
    assert (run.cuda_device, run.cuda_device_name, run.cuda_pci) == (0, "NVIDIA A30-8C", "02:00")
    assert parse("client-bidir-4qp-all-sizes-ainic-800g.txt").cuda_device is None  # host memory


def test_lines_no_handler_read_are_counted_and_kept_as_evidence():
    # field/issues-3's libibverbs-warnings file: two driver warnings before the waiting box
    run = parse_perftest((FIXTURES / "field" / "issues-3" / "ib_write_bw" /
                          "libibverbs-warnings-then-server-banner-rocep-gid1.txt").read_text())
    assert run.unrecognized.count == 2
    assert all(s.text.startswith("libibverbs: Warning: couldn't load driver") for s in run.unrecognized.sample)
    # a whole clean run leaves nothing unread: rules, the waiting box, the banner, the rows
    assert parse_perftest((DIR / "loopback-all-sizes-interleaved.txt").read_text()).unrecognized.count == 0
    # a root prompt is the paste's, and a completion's `Failed status` line is read into its failure
    cm = (FIXTURES / "field" / "issues-3" / "ib_write_bw" / "rdma-cm-event-rejected-111-errno-lines.txt").read_text()
    assert parse_perftest(cm).unrecognized.count == 0
    completion = parse_perftest((DIR / "completion-with-error-status-4-syndrom-0x51-use-cuda.txt").read_text())
    assert [s.line for s in completion.unrecognized.sample] == [3]  # `scnt=828, ccnt=700` alone
