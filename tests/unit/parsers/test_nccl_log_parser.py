"""NCCL debug log parser: every real log in tests/fixtures (corpus/nccl-debug, the H100
captures, NCCL lines inside nccl-tests output), each version's line shapes built from the
format strings in shared/notes/diagnose.md section 1, launcher prefixes, timestamps,
garbage, linear time and the JSON round trip."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import CORPUS, FIXTURES, assert_linear

from healthcheck.core.errors import ParseError
from healthcheck.parsers.nccl_log import (
    MAX_WARNS,
    NcclLog,
    parse_nccl_log,
    split_nccl_line,
)

DEBUG = CORPUS / "nccl-debug"


def parse(path) -> NcclLog:
    return parse_nccl_log(path.read_text())


def one(text: str) -> NcclLog:
    return parse_nccl_log(text)


# ------------------------------------------------------------ every fixture

# path (under tests/fixtures) -> (versions, networks of the processes, ranks, world sizes,
#                                  WARNs by kind, processes, comms)
EXPECTED: dict[str, tuple] = {
    # NET/IB listed devices, no `Using network` line and no plugin: IB, inferred
    "corpus/nccl-debug/azure-ib-completion-error12.txt":
        ((), {"IB"}, (), (), {"ib-completion": 1}, 1, 0),
    "corpus/nccl-debug/coll-opcount-rank-mismatch-allreduce-vs-allgather-rccl.txt":
        ((), set(), (), (4,), {}, 2, 2),
    "corpus/nccl-debug/coll-opcount-ray-128rank-allreduce-hang-mixed-opcounts.txt":
        ((), set(), (), (128,), {}, 3, 3),
    "corpus/nccl-debug/collnet-unsupported-warn-p2p-direct-pointer-net-ib-gdrdma-2node.txt":
        ((), set(), (), (), {"other": 1}, 2, 0),
    "corpus/nccl-debug/gh200-2node-ibext-v8-sharp-init-start-mnnvl0.txt":
        ((), {"IBext_v8"}, (0, 1), (2,), {}, 2, 2),
    "corpus/nccl-debug/horovod-old-nccl-mlx4-ibv-create-qp-failed-ring-lines.txt":
        ((), set(), (0, 1), (2,), {"ibverbs": 1}, 2, 2),
    "corpus/nccl-debug/ib-completion-error4-vendor81-service-thread-connection-closed.txt":
        ((), set(), (), (), {"ib-completion": 1}, 8, 0),
    "corpus/nccl-debug/mpirun-rank-prefixed-socket-shm-connected-all-rings-trees.txt":
        ((), set(), (), (), {}, 4, 0),
    "corpus/nccl-debug/nccl-2.10.3-2host-ib-init-trees-affinity.txt":
        (("2.10.3+cuda11.3",), {"IB"}, (), (), {}, 2, 0),
    "corpus/nccl-debug/nccl-2.12.12-socket-fallback-multi-iface-ipv6-veth.txt":
        (("2.12.12+cuda11.2",), {"Socket"}, (), (), {}, 4, 0),
    "corpus/nccl-debug/nccl-2.19.3-dgxh100-2node-roce-plugin-dlerror-init.txt":
        (("2.19.3+cuda12.3",), {"IB"}, (), (), {}, 2, 0),
    "corpus/nccl-debug/nccl-2.19.3-gcp-plugin-symbol-missing-socket-nranks1-channel-00-32.txt":
        (("2.19.3+cuda12.3",), {"Socket"}, (0,), (1,), {}, 1, 1),
    "corpus/nccl-debug/nccl-2.23.4-teardown-abort-complete-socket-chain.txt":
        ((), set(), (0, 3), (4,), {}, 3, 2),
    "corpus/nccl-debug/nccl-2.25.1-roce-bond-init-new-bootstrap-wording.txt":
        (("2.25.1+cuda12.8",), {"IB"}, (), (), {}, 2, 0),
    "corpus/nccl-debug/nccl-2.27-preview-mpirun-tag-output-10-roce-nics-init-start.txt":
        ((), {"IB"}, (0,), (4,), {}, 3, 1),
    "corpus/nccl-debug/nccl-2.29-single-gpu-init-socket-gin-first50.txt":
        (("2.29.7+cuda12.9",), {"Socket"}, (0,), (1,), {}, 1, 1),
    "corpus/nccl-debug/nccl-2.2x-16rank-init-complete-init-timings.txt":
        ((), set(), (0, 1, 4, 5, 6), (16,), {}, 1, 5),
    "corpus/nccl-debug/nccl-2.4-era-aws-many-hosts-ib-no-device-socket-fallback.txt":  # Socket inferred: no
        ((), {"Socket"}, (), (), {}, 17, 0),  # `Using network` line before 2.5, `NET/Socket : Using` last
    "corpus/nccl-debug/nccl-2.4.8-all-reduce-perf-hang-no-libibverbs-socket-init.txt":
        (("2.4.8+cuda10.0",), {"Socket"}, (), (), {"other": 1}, 1, 0),
    "corpus/nccl-debug/nccl-2.5-era-direct-shared-memory-ring-socket-nic-distance-realpath.txt":
        ((), set(), (), (), {}, 6, 0),
    "corpus/nccl-debug/nccl-2.5.6-256rank-bracket-rank-prefix-roce-mixed-ring-p2p-ipc.txt":
        ((), {"IB"}, (), (), {}, 1, 0),
    "corpus/nccl-debug/nccl-2.7.8-roce-2node-1gpu-ibv-create-cq-failed.txt":
        (("2.7.8+cuda11.0",), {"IB"}, (), (), {"ibverbs": 1}, 1, 0),
    "corpus/nccl-debug/nccl-2.8.3-socket-no-libibverbs-xml-realpath-failure.txt":
        (("2.8.3+cuda11.0",), {"Socket"}, (), (), {"other": 2}, 1, 0),
    "corpus/nccl-debug/net-socket-connect-fail-proxy-service-retcode2-socketprogress-closed.txt":
        ((), set(), (), (), {"socket": 1, "proxy": 2}, 3, 0),
    "corpus/nccl-debug/socketprogress-closed-then-cuda-failure-out-of-memory-calloc.txt":
        ((), set(), (), (), {"socket": 1, "cuda": 2, "proxy": 1}, 2, 0),
    "corpus/nccl-debug/socketprogress-connection-closed-socket-recv-failed-polling-opid.txt":
        ((), set(), (), (), {"socket": 1, "proxy": 2}, 1, 0),
    "h100-captures/nccl-2.28.9-debug-file-duplicate-gpu-rank0.txt":
        (("2.28.9+cuda13.0",), {"Socket"}, (0,), (2,), {"duplicate-gpu": 1}, 1, 1),
    "h100-captures/nccl-2.28.9-debug-info-1rank-torch-2.11.txt":
        (("2.28.9+cuda13.0",), {"Socket"}, (0,), (1,), {}, 1, 1),
    "nccl-tests/all_gather-h100-1gpu-2.19.6-nccl-debug-info-2.28.9.txt":
        (("2.28.9+cuda13.0",), {"Socket"}, (0,), (1,), {}, 1, 1),
    # NCCL lines inside other committed nccl-tests captures
    "nccl-tests/all_reduce-2gpu-mixed-gtx-p2p-disabled-socket-header-and-init-warn.txt":
        (("2.16.5+cuda11.8",), {"Socket"}, (), (), {"other": 1}, 1, 0),
    "nccl-tests/test-nccl-failure-common-cu-961-with-nccl-chains-two-hosts-4090.txt":
        ((), set(), (), (), {"socket": 1}, 2, 0),
    "nccl-tests/all_reduce-a100-pcie-4gpu-collective-test-starting-header-nccl-2.19.3-init.txt":
        (("2.19.3+cuda12.2",), set(), (), (), {}, 1, 0),
    "nccl-tests/all_reduce-1gpu-2.18-tail-scientific-notation.txt":
        ((), set(), (0,), (1,), {}, 1, 1),
}


def test_every_corpus_log_is_expected_and_listed_in_sources():
    names = sorted(p.name for p in DEBUG.glob("*.txt"))
    assert names == sorted(k.split("/")[-1] for k in EXPECTED if k.startswith("corpus/nccl-debug/"))
    sources = (CORPUS / "SOURCES.md").read_text()
    assert all(f"`nccl-debug/{name}`" in sources for name in names)
    h100 = sorted(p.name for p in (FIXTURES / "h100-captures").glob("nccl-2.28.9-*.txt"))
    assert all(f"h100-captures/{name}" in EXPECTED for name in h100)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture_parses(name):
    versions, networks, ranks, world_sizes, warns, n_procs, n_comms = EXPECTED[name]
    log = parse(FIXTURES / name)
    got = (log.versions, {p.network for p in log.processes if p.network}, log.ranks, log.world_sizes,
           log.warn_counts, len(log.processes), len(log.comms))
    assert got == (versions, networks, ranks, world_sizes, warns, n_procs, n_comms)
    assert sum(log.warn_counts.values()) == len(log.warns) == sum(p.warns for p in log.processes)
    assert not log.truncated
    assert log.nccl_lines == sum(p.lines for p in log.processes)
    # every fact's line is a line of the file, and it names that process
    lines = (FIXTURES / name).read_text().split("\n")
    for w in log.warns:
        assert f"{w.host}:{w.pid}:" in lines[w.line - 1] and "NCCL WARN" in lines[w.line - 1]
    for c in log.comms:
        assert f"{c.host}:{c.pid}:" in lines[c.line - 1] and c.comm in lines[c.line - 1]
    # the facts survive a JSON round trip (hc parse prints them)
    assert msgspec.json.decode(msgspec.json.encode(log), type=NcclLog) == log


# ------------------------------------------------------------ the real logs, value by value


def test_ib_completion_error_names_the_peer_status_and_vendor_error_across_a_wrapped_line():
    log = parse(DEBUG / "azure-ib-completion-error12.txt")
    (w,) = log.warns
    assert (w.kind, w.line, w.host, w.pid, w.tid, w.dev, w.src) == (
        "ib-completion", 2, "node-2", 5776, 5902, 0, "transport/net_ib.cc:1296")
    # the reporter's terminal wrapped the WARN: "vendor err 129 (Recv)" is on the next line
    assert (w.peer, w.status, w.vendor_err, w.request, w.hca) == ("10.2.0.5<33092>", 12, 129, "Recv", "")
    (p,) = log.processes
    assert [(d.name, d.port, d.link) for d in p.ib_devices] == [("ibP111p0s0", 1, "IB"), ("rdmaP1111p0s2", 1, "RoCE")]
    assert (p.error_returns, p.first_error_line, p.first_error_code) == (3, 4, 6)
    assert log.first_warn == w and log.first_warn_by_time is None


def test_ib_completion_of_a_plugin_and_the_service_thread_cascade():
    log = parse(DEBUG / "ib-completion-error4-vendor81-service-thread-connection-closed.txt")
    w = log.first_warn
    assert w is not None and (w.host, w.pid, w.src, w.peer, w.status, w.vendor_err, w.request) == (
        "kolyoz2", 25146, "ib_plugin.c:1105", "10.0.35.1<49189>", 4, 81, "Send")
    assert {p.host for p in log.processes} == {"kolyoz1", "kolyoz2"}


def test_socket_fallback_with_every_interface_listed():
    log = parse(DEBUG / "nccl-2.12.12-socket-fallback-multi-iface-ipv6-veth.txt")
    p = log.process("ip-172-31-12-104", 28053)
    assert p is not None and p.network == "Socket" and p.socket_fallback and not p.ib_devices
    assert [(d.index, d.name) for d in p.socket_devices] == [
        (0, "eth0"), (1, "br-8a9e04832258"), (2, "veth23bc2d7"), (3, "veth675c7d9")]
    assert p.socket_devices[2].addr == "fe80::d41a:9ff:febe:1c16%veth23bc2d7<0>"
    assert (p.bootstrap_if, p.bootstrap_addr) == ("eth0", "172.31.12.104<0>")
    # the bare "NCCL version" line (<= 2.21, no prefix) names no process
    assert p.version == "" and log.versions == ("2.12.12+cuda11.2",)


def test_ib_no_device_then_socket_on_2_29_and_2_28():
    for path in (DEBUG / "nccl-2.29-single-gpu-init-socket-gin-first50.txt",
                 FIXTURES / "h100-captures/nccl-2.28.9-debug-info-1rank-torch-2.11.txt"):
        (p,) = parse(path).processes
        assert p.ib_no_device and p.ib_devices == () and p.network == "Socket" and p.socket_fallback
        assert p.bootstrap_if in ("enp129s0", "eth0")  # >= 2.24 "Bootstrap: Using"
    log = parse(DEBUG / "nccl-2.4-era-aws-many-hosts-ib-no-device-socket-fallback.txt")
    assert sum(p.ib_no_device for p in log.processes) == 8
    assert sum(p.socket_fallback for p in log.processes) == 15  # two processes printed only the plugin line


def test_ib_devices_with_sharp_and_a_plugin_network():
    log = parse(DEBUG / "gh200-2node-ibext-v8-sharp-init-start-mnnvl0.txt")
    p = log.process("gh1", 185972)
    assert p is not None and p.network == "IBext_v8"
    assert [(d.index, d.name, d.port, d.link, d.extra) for d in p.ib_devices] == [(0, "mlx5_2", 1, "IB", "SHARP")]
    assert [(e.name, e.value, e.line) for e in p.env] == [("NCCL_SOCKET_IFNAME", "bond0", 3)]
    log = parse(DEBUG / "nccl-2.27-preview-mpirun-tag-output-10-roce-nics-init-start.txt")
    p = log.processes[0]
    assert [d.name for d in p.ib_devices] == [f"mlx5_{i}" for i in range(10)]
    assert {d.link for d in p.ib_devices} == {"RoCE"}


def test_init_start_without_complete_is_an_init_hang_and_maps_pid_to_rank():
    log = parse(DEBUG / "gh200-2node-ibext-v8-sharp-init-start-mnnvl0.txt")
    by_host = {c.host: c for c in log.comms}
    gh1, gh2 = by_host["gh1"], by_host["gh2"]
    assert (gh1.pid, gh1.rank, gh1.nranks, gh1.comm, gh1.func) == (185972, 0, 2, "0xaaacf8930f40", "ncclCommInitRank")
    assert (gh2.pid, gh2.rank, gh2.init_start_line, gh2.init_complete_line) == (15475, 1, 9, None)
    assert (gh1.cuda_dev, gh1.nvml_dev, gh1.bus_id, gh1.comm_id) == (0, 0, "901000", "0x6e99db63b024eb76")
    assert (gh1.nnodes, gh1.local_ranks, gh1.local_rank) == (2, 1, 0)  # "nRanks 2 nNodes 2 localRanks 1 ..."
    assert gh1.init_hung and gh2.init_hung
    assert log.comm_groups() == {"0x6e99db63b024eb76": (gh2, gh1)}
    assert log.rank_map() == {("gh1", 185972): (0,), ("gh2", 15475): (1,)}


def test_init_complete_and_timings_of_one_process_driving_many_gpus():
    log = parse(DEBUG / "nccl-2.2x-16rank-init-complete-init-timings.txt")
    (p,) = log.processes
    assert (p.pid, p.ranks, p.world_size) == (2017630, (0, 1, 4, 5, 6), 16)
    by_rank = {c.rank: c for c in log.comms}
    assert by_rank[6].init_complete_line == 2 and not by_rank[6].init_hung
    assert by_rank[6].init_total_s == 1.08 and by_rank[6].init_timings["bootstrap"] == 0.22
    assert by_rank[0].init_timings["kernels"] == 0.51
    assert by_rank[4].init_total_s is None  # its timings line is not in the fragment
    # rank 2's timings came before any line of its comm: nowhere to put them
    assert 2 not in by_rank


def test_init_complete_abort_and_timings_of_2_28():
    log = parse(FIXTURES / "h100-captures/nccl-2.28.9-debug-info-1rank-torch-2.11.txt")
    (c,) = log.comms
    assert (c.func, c.rank, c.nranks, c.init_start_line, c.init_complete_line) == (
        "ncclCommInitRankConfig", 0, 1, 14, 92)
    assert c.init_total_s == 0.5 and c.init_timings["alloc"] == 0.0 and len(c.init_timings) == 8
    assert (c.end, c.end_complete, c.end_line) == ("abort", True, 108)  # Abort START, then COMPLETE
    log = parse(FIXTURES / "nccl-tests/all_gather-h100-1gpu-2.19.6-nccl-debug-info-2.28.9.txt")
    (c,) = log.comms
    assert (c.end, c.end_complete, c.end_line, c.init_total_s) == ("destroy", True, 107, 0.43)
    (p,) = log.processes
    assert (p.version, p.cuda, p.cuda_driver) == ("2.28.9", "13.0", 13000)


def test_duplicate_gpu_warn_with_its_timestamp():
    log = parse(FIXTURES / "h100-captures/nccl-2.28.9-debug-file-duplicate-gpu-rank0.txt")
    (w,) = log.warns
    assert (w.kind, w.line, w.src, w.stamp) == ("duplicate-gpu", 18, "init.cc:904", "2026-11-23 07:20:55")
    assert w.time == 1795418455.0  # 2026-11-23 07:20:55, taken as UTC
    assert log.first_warn_by_time == w == log.first_warn
    assert log.comms[0].init_hung  # START, then the WARN: it never completed
    (p,) = log.processes
    assert (p.first_error_line, p.first_error_code) == (19, 5)  # ncclInvalidUsage


def test_teardown_abort_complete_on_2_23():
    log = parse(DEBUG / "nccl-2.23.4-teardown-abort-complete-socket-chain.txt")
    assert [(c.pid, c.rank, c.end, c.end_complete, c.bus_id) for c in log.comms] == [
        (5890, 0, "abort", True, "6000"), (5893, 3, "abort", True, "b000")]
    assert all(p.first_error_code == 3 for p in log.processes)


def test_coll_opcount_per_comm():
    log = parse(DEBUG / "coll-opcount-rank-mismatch-allreduce-vs-allgather-rccl.txt")
    summary = {(c.pid, c.comm): (c.coll_count, c.first_op_count, c.last_op_count, c.last_op, c.nranks)
               for c in log.comms}
    assert summary == {
        (45006, "0x55bef0201370"): (2, 0x28C, 0x28D, "AllReduce", 4),
        (45012, "0x559c24b55610"): (2, 0x28C, 0x28D, "AllGather", 4),
    }
    assert log.ranks == ()  # COLL lines name no rank
    log = parse(DEBUG / "coll-opcount-ray-128rank-allreduce-hang-mixed-opcounts.txt")
    by_pid = {c.pid: c for c in log.comms}
    assert (by_pid[22754].coll_count, by_pid[22754].last_op_count, by_pid[22754].last_coll_line) == (2, 0x139E, 4)
    assert (by_pid[615].last_op_count, by_pid[615].last_count) == (0x139D, 7382228)
    assert log.processes[0].host == "r24-02-22-23-29-0066-raycluster-lv52c-worker-l4-8-fqztx"  # Ray's prefix gone


def test_connections_counted_per_transport():
    log = parse(DEBUG / "collnet-unsupported-warn-p2p-direct-pointer-net-ib-gdrdma-2node.txt")
    nodea = log.process("nodea", 26799)
    assert nodea is not None
    assert {t.transport: t.count for t in nodea.transports} == {"P2P/direct pointer": 2, "NET/IB/GDRDMA": 3}
    assert log.process("nodeb", 65671).rings_connected == 4  # type: ignore[union-attr]
    log = parse(DEBUG / "mpirun-rank-prefixed-socket-shm-connected-all-rings-trees.txt")
    assert {(p.host, p.pid): ({t.transport for t in p.transports}, p.launcher_rank) for p in log.processes} == {
        ("node0", 13571): ({"NET/Socket"}, 0), ("node2", 22555): ({"NET/Socket"}, 1),
        ("node0", 13572): ({"SHM"}, 2), ("node2", 22556): (set(), 3)}
    log = parse(DEBUG / "nccl-2.5-era-direct-shared-memory-ring-socket-nic-distance-realpath.txt")
    assert {t.transport for p in log.processes for t in p.transports} == {"SHM", "NET/Socket"}
    log = parse(DEBUG / "nccl-2.5.6-256rank-bracket-rank-prefix-roce-mixed-ring-p2p-ipc.txt")
    (p,) = log.processes
    assert (p.launcher_rank, p.transports[0].transport, p.transports[0].count) == (155, "P2P/IPC", 3)
    assert [d.link for d in p.ib_devices] == ["IB", "IB", "IB", "RoCE", "IB"]


def test_socket_proxy_and_cuda_warns():
    log = parse(DEBUG / "socketprogress-closed-then-cuda-failure-out-of-memory-calloc.txt")
    kinds = [(w.kind, w.line, w.pid) for w in log.warns]
    assert kinds == [("socket", 1, 3063025), ("proxy", 4, 3063025), ("cuda", 14, 3063028), ("cuda", 16, 3063028)]
    assert log.warns[0].peer == "ng30903-ib.narval.calcul.quebec<51159>"
    assert log.warns[2].error == "out of memory"
    log = parse(DEBUG / "net-socket-connect-fail-proxy-service-retcode2-socketprogress-closed.txt")
    assert [w.kind for w in log.warns] == ["proxy", "proxy", "socket"]
    assert log.warns[2].peer == "<cluster_name>.ibnet<53735>" and log.warns[2].host == "<cluster_name>"
    assert {t.transport for p in log.processes for t in p.transports} == {"P2P/IPC", "NET/Socket"}


def test_verbs_failures_old_and_new():
    log = parse(DEBUG / "horovod-old-nccl-mlx4-ibv-create-qp-failed-ring-lines.txt")
    (w,) = log.warns
    assert (w.kind, w.call, w.error, w.src) == ("ibverbs", "ibv_create_qp", "", "misc/ibvwrap.cu:280")
    assert [(c.pid, c.rank, c.nranks) for c in log.comms] == [(2668, 0, 2), (2712, 1, 2)]  # "comm %p rank %d nranks %d"
    (w,) = parse(DEBUG / "nccl-2.7.8-roce-2node-1gpu-ibv-create-cq-failed.txt").warns
    assert (w.kind, w.call, w.line) == ("ibverbs", "ibv_create_cq", 13)


def test_libibverbs_missing_and_topology_warns_are_other():
    log = parse(DEBUG / "nccl-2.8.3-socket-no-libibverbs-xml-realpath-failure.txt")
    assert [(w.kind, w.src) for w in log.warns] == [("other", "misc/ibvwrap.cc:63"), ("other", "graph/xml.cc:332")]
    assert log.processes[0].network == "Socket"


# ------------------------------------------------------------ each version's shapes (the note's format strings)


def test_ib_completion_of_every_version():
    lines = {
        # 2.18-2.19
        "2.18": "h:1:2 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4567> "
                "with error 12, opcode 0, len 0, vendor err 129 (Recv)",
        # 2.20-2.21
        "2.20": "h:1:2 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4567> "
                "with status=12 opcode=0 len=0 vendor err 129 (Recv)",
        # >= 2.22, RoCE adds the GIDs; hca last
        "2.22": "h:1:2 [0] transport/net_ib.cc:1 NCCL WARN NET/IB: Got completion from peer 10.0.0.2<4567> "
                "with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.1 "
                "remoteGids::ffff:10.0.0.2 hca mlx5_3",
    }
    for version, line in lines.items():
        (w,) = one(line + "\n").warns
        assert (w.kind, w.peer, w.status, w.vendor_err, w.request) == (
            "ib-completion", "10.0.0.2<4567>", 12, 129, "Recv"), version
        assert w.hca == ("mlx5_3" if version == "2.22" else "")


def test_comm_lines_of_every_version():
    text = "\n".join([
        # 2.18-2.20: no function name
        "a:1:1 [0] NCCL INFO comm 0x1000 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0xaa - Init START",
        "a:1:1 [0] NCCL INFO comm 0x1000 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0xaa - Init COMPLETE",
        # 2.21-2.22 / >= 2.23: ncclCommInitRank and the split variant (>= 2.24 splitCount)
        "a:1:1 [0] NCCL INFO ncclCommSplit comm 0x2000 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 1b000 "
        "parent 0x1000 splitCount 1 color 7 key 0- Init START",
        "a:1:1 [0] NCCL INFO ncclCommSplit comm 0x2000 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 1b000 "
        "parent 0x1000 splitCount 1 color 7 key 0- Init COMPLETE",
        "a:1:1 [0] NCCL INFO Init timings: rank 0 nranks 1 total 0.12 (kernels 0.10, bootstrap 0.01)",  # 2.22
        # teardown, 2.18-2.20 then >= 2.22
        "a:1:3 [0] NCCL INFO comm 0x2000 rank 0 nranks 1 cudaDev 0 busId 1b000 - Destroy COMPLETE",
        "a:1:3 [0] NCCL INFO comm 0x1000 rank 0 nRanks 2 cudaDev 0 busId 1b000 - Abort START",
        # the pointer reused by a new communicator after the destroy
        "a:1:1 [0] NCCL INFO ncclCommInitRankConfig comm 0x2000 rank 1 nranks 4 cudaDev 0 nvmlDev 0 busId 1b000 "
        "commId 0xbb - Init START",
        "a:1:1 [0] NCCL INFO Init timings - ncclCommInitRankConfig: rank 1 nranks 4 total 3.50 (kernels 0.10, "
        "alloc 0.00, bootstrap 3.20, allgathers 0.01, topo 0.10, graphs 0.01, connections 0.05, rest 0.03)",
    ]) + "\n"
    log = one(text)
    world, split, reused = log.comms
    assert (world.comm, world.comm_id, world.init_start_line, world.init_complete_line) == ("0x1000", "0xaa", 1, 2)
    assert (world.end, world.end_complete, world.end_line) == ("abort", False, 7)
    assert (split.func, split.parent, split.init_total_s, split.end) == ("ncclCommSplit", "0x1000", 0.12, "destroy")
    assert (reused.comm, reused.rank, reused.nranks, reused.comm_id, reused.init_hung) == ("0x2000", 1, 4, "0xbb", True)
    assert reused.init_timings["bootstrap"] == 3.2 and reused.init_total_s == 3.5
    assert log.world_sizes == (1, 2, 4) and log.ranks == (0, 1)
    (p,) = log.processes
    assert (p.ranks, p.world_size) == ((1,), 4)


def test_comm_lines_of_2_29_rank_prefix_and_split_child_count():
    text = "\n".join([
        "h:1:2 [0] NCCL INFO [Rank 3] ncclCommSplit comm 0x9 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 "
        "commId 0xcc - Init START",
        "h:1:2 [0] NCCL INFO ncclCommSplit comm 0x9 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 parent 0x7 "
        "childCount 1 color 5 key 3 - Init COMPLETE",
        "h:1:2 [0] NCCL INFO Init timings - ncclCommSplit: rank 1 nranks 2 total 0.20 (kernels 0.00, alloc 0.00, "
        "bootstrap 0.15, allgathers 0.01, topo 0.01, graphs 0.01, connections 0.01, rest 0.01)",
    ]) + "\n"
    (c,) = one(text).comms
    assert (c.func, c.rank, c.nranks, c.comm_id, c.parent, c.init_start_line, c.init_complete_line) == (
        "ncclCommSplit", 1, 2, "0xcc", "0x7", 1, 2)
    assert c.init_timings["bootstrap"] == 0.15 and c.init_total_s == 0.2


def test_connected_rings_and_trees_go_to_the_comm_the_thread_initializes():
    text = "\n".join([
        # >= 2.18: START, the thread connects, COMPLETE (>= 2.24 wording "use ring PXN 1 GDR 1")
        "h:1:5 [0] NCCL INFO ncclCommInitRank comm 0xa rank 0 nranks 2 cudaDev 0 busId 1 commId 0x1 - Init START",
        "h:1:5 [0] NCCL INFO Connected all rings, use ring PXN 1 GDR 1",
        "h:1:6 [1] NCCL INFO ncclCommInitRank comm 0xb rank 1 nranks 2 cudaDev 1 busId 2 commId 0x1 - Init START",
        "h:1:6 [1] NCCL INFO Connected all rings",
        "h:1:6 [1] NCCL INFO Connected all trees",
        # <= 2.17: no START, the thread's lines come before its COMPLETE
        "h:2:7 [0] NCCL INFO Connected all trees",
        "h:2:7 [0] NCCL INFO comm 0xc rank 0 nranks 1 cudaDev 0 busId 1 - Init COMPLETE",
    ]) + "\n"
    log = one(text)
    assert [(c.comm, c.rings_connected, c.trees_connected) for c in log.comms] == [
        ("0xa", True, False), ("0xb", True, True), ("0xc", False, True)]
    assert [(p.rings_connected, p.trees_connected) for p in log.processes] == [(2, 1), (0, 1)]


def test_connection_transports_of_every_version():
    vias = {
        "P2P/CUMEM/read": "P2P/CUMEM", "P2P/IPC/read": "P2P/IPC", "P2P/CUMEM/CE": "P2P/CUMEM",
        "P2P/direct pointer": "P2P/direct pointer", "P2P/indirect/2[2]": "P2P/indirect",
        "SHM/direct/direct": "SHM", "direct shared memory": "SHM", "NET/IB/0/GDRDMA": "NET/IB/GDRDMA",
        "NET/IB/1(4)/GDRDMA": "NET/IB/GDRDMA", "NET/IB/0": "NET/IB", "NET/Socket/1": "NET/Socket",
        "NET/IB/0/GDRDMA/Shared": "NET/IB/GDRDMA/Shared", "NET/IBext_v8/0/GDRDMA": "NET/IBext_v8/GDRDMA",
    }
    for i, (via, transport) in enumerate(vias.items()):
        line = f"h:1:2 [0] NCCL INFO Channel {i:02d}/0 : 0[0] -> 1[1] [send] via {via}\n"
        (p,) = one(line).processes
        assert [t.transport for t in p.transports] == [transport], via
    (p,) = one("h:1:2 [0] NCCL INFO Channel 00 : 2[1] -> 0[0] via SHM/direct/direct\n"
               "h:1:2 [0] NCCL INFO Channel 01 : 2[1] -> 0[0] via SHM/direct/direct\n").processes
    assert [(t.transport, t.count, t.first_line) for t in p.transports] == [("SHM", 2, 1)]


def test_warn_classes_of_every_version():
    warns = {
        "socketProgressOpt: Call to recv from 10.0.0.2<40318> failed : Connection reset by peer":
            ("socket", "10.0.0.2<40318>", "Connection reset by peer"),
        "ncclSocketConnect: connect to 10.0.0.2<40318> failed : Connection refused":
            ("socket", "10.0.0.2<40318>", "Connection refused"),
        "socketPollConnect to 10.0.0.2<40318> failed with error Connection refused":
            ("socket", "10.0.0.2<40318>", ""),
        "Bootstrap : no socket interface found": ("no-interface", "", ""),
        "NET/Socket : No usable listening interface found": ("no-interface", "", ""),
        "Cuda failure 1 'invalid argument'": ("cuda", "", "invalid argument"),  # driver, >= 2.20
        "Cuda failure 'out of memory'": ("cuda", "", "out of memory"),
        "Call to ibv_modify_qp failed with error Network is unreachable": ("ibverbs", "", "Network is unreachable"),
        "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1b000": ("duplicate-gpu", "", ""),
        "Error : ring 0 does not loop back to start (3 != 0)": ("other", "", ""),
    }
    for message, (kind, peer, error) in warns.items():
        (w,) = one(f"\nh:1:2 [0] misc/x.cc:1 NCCL WARN {message}\n").warns
        assert (w.kind, w.peer, w.error) == (kind, peer, error), message
    (w,) = one("h:1:2 [0] NCCL WARN Cuda failure 3 'initialization error'\n").warns  # no src
    assert (w.kind, w.code, w.error, w.src) == ("cuda", 3, "initialization error", "")
    (w,) = one("h:1:2 [0] proxy.cc:1 NCCL WARN [Proxy Service 3] Failed to execute operation Connect\n").warns
    assert w.kind == "proxy"


def test_env_echoes_driver_and_bootstrap_wordings():
    text = "\n".join([
        "h:1:2 [0] NCCL INFO NCCL_IB_HCA set to mlx5_0,mlx5_1",
        "h:1:2 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0",
        "h:1:2 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 8388608.",
        "h:1:2 [0] NCCL INFO NCCL_IB_HCA set to mlx5_2",
        "h:1:2 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
        "h:9:2 [0] NCCL INFO Bootstrap: Using ib0:10.0.0.9<0>",
        "h:9:2 [0] NCCL INFO NCCL version 2.27.7+cuda12.9",
    ]) + "\n"
    a, b = one(text).processes
    assert [(e.name, e.value) for e in a.env] == [
        ("NCCL_IB_HCA", "mlx5_2"), ("NCCL_SOCKET_IFNAME", "ib0"), ("NCCL_BUFFSIZE", "8388608")]
    assert (a.bootstrap_if, a.bootstrap_addr, b.bootstrap_addr) == ("ib0", "10.0.0.1<0>", "10.0.0.9<0>")
    assert (b.version, b.cuda) == ("2.27.7", "12.9")


def test_versions_bare_and_prefixed_but_never_a_sentence():
    text = "\n".join([
        "NCCL version 2.18.3+cuda12.2",
        "[1,0]<stdout>:NCCL version 2.21.5+cuda12.4",
        "RuntimeError: NCCL error in: ../NCCLUtils.cpp:93, invalid usage, NCCL version 2.28.9",
        "Last error: NCCL version 2.3.7+cuda9.0 is old",
    ]) + "\n"
    log = one(text)
    assert log.versions == ("2.18.3+cuda12.2", "2.21.5+cuda12.4") and log.nccl_lines == 0 and log.processes == ()


# ------------------------------------------------------------ prefixes: timestamps, launchers, levels


def test_timestamped_prefixes_of_2_26_and_later():
    text = "\n".join([
        # INFO stamped (NCCL_DEBUG_TIMESTAMP_LEVELS=WARN,INFO), the note's real line
        "[2026-04-28 14:14:48] t-worker-0:2339:3738 [1] NCCL INFO Channel 07/0 : 1[1] -> 0[0] via P2P/IPC",
        "",
        # WARNs out of time order: host b's WARN is later in the file but earlier in time
        "[2026-04-28 14:20:00.250] a:10:11 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed "
        "by remote peer 10.0.0.2<1>",
        "",
        "[2026-04-28 14:19:59.125000] b:20:21 [3] transport/net_ib.cc:1 NCCL WARN NET/IB: Got completion from "
        "peer 10.0.0.1<2> with status=12 opcode=0 len=0 vendor err 129 (Send) hca mlx5_1",
    ]) + "\n"
    log = one(text)
    assert [p.host for p in log.processes] == ["t-worker-0", "a", "b"]
    first, later = log.warns
    assert log.first_warn == first and log.first_warn_by_time == later
    assert (later.hca, later.peer, later.stamp) == ("mlx5_1", "10.0.0.1<2>", "2026-04-28 14:19:59.125000")
    assert first.time is not None and later.time is not None and first.time - later.time == pytest.approx(1.125)
    p = split_nccl_line("[2026-04-28 14:14:48] t-worker-0:2339:3738 [1] NCCL INFO x")
    assert p is not None and (p.host, p.pid, p.tid, p.dev, p.stamp, p.label) == (
        "t-worker-0", 2339, 3738, 1, "2026-04-28 14:14:48", "")


@pytest.mark.parametrize("label, rank", [
    ("[rank3]:", 3), ("0: ", 0), ("  12: ", 12), ("[1,5]<stdout>:", 5), ("[1,5]<stderr>:", 5), ("[155] ", 155),
    ("[default0]:", None), ("(WorkerDict pid=4242) ", None), ("(RayTrainWorker pid=615, ip=10.72.7.6) ", None),
    ("[rank3]:[2026-01-02 03:04:05] ", 3), ("", None),
])
def test_launcher_prefixes_are_stripped(label, rank):
    line = f"{label}gpu017:4242:4250 [2] transport/net.cc:12 NCCL WARN Cuda failure 'out of memory'"
    p = split_nccl_line(line)
    assert p is not None and (p.host, p.pid, p.tid, p.dev, p.level, p.src) == (
        "gpu017", 4242, 4250, 2, "WARN", "transport/net.cc:12")
    assert p.message == "Cuda failure 'out of memory'" and p.label_rank == rank
    assert (p.stamp != "") == ("2026" in label)
    (proc,) = one(line + "\n").processes
    assert proc.launcher_rank == rank


def test_trace_and_call_levels():
    p = split_nccl_line("h:1:2 [0] 1234.567890 ncclProxyProgress:88 NCCL TRACE progress op 3")
    assert p is not None and (p.level, p.src, p.dev, p.message) == ("TRACE", "ncclProxyProgress:88", 0, "progress op 3")
    p = split_nccl_line("h:1:2 NCCL CALL ncclCommInitRank(0x1,2,0xab,0)")
    assert p is not None and (p.level, p.dev, p.host) == ("CALL", None, "h")
    for not_nccl in ("h:1:2 [0] NCCL DEBUG x", "h:1:2 [0] NCCL INFOx", "NCCL INFO x", "h:x:2 [0] NCCL INFO x",
                     " NCCL INFO x", "h:1:2 [0] NCCL", ":1:2 [0] NCCL INFO x", "[rank0]:h:1 NCCL INFO x"):
        assert split_nccl_line(not_nccl) is None, not_nccl
    # a host named before its [dev] with no pid:tid is NCCL's (field/issues-6's Kubernetes log
    # prints `gpu-server320 [5] NCCL INFO ...`): one process per host, pid 0; a name without a
    # digit only after NCCL's own stamp (a word of a sentence is no host)
    p = split_nccl_line("[rank0]:h1 [0] NCCL INFO x")
    assert p is not None and (p.host, p.pid, p.dev, p.label_rank) == ("h1", 0, 0, 0)
    assert split_nccl_line("[rank0]:h [0] NCCL INFO x") is None
    p = split_nccl_line("[2025-11-24 11:20:21] h [0] misc/socket.cc:46 NCCL WARN x")
    assert p is not None and (p.host, p.stamp) == ("h", "2025-11-24 11:20:21")


def test_crlf_lines_and_line_numbers_count_newlines_only():
    text = "x\r\nh:1:2 [0] NCCL INFO Using network IB\r\n\x0bh:1:2 [0] NCCL INFO cudaDriverVersion 12040\r\n"
    (p,) = one(text).processes
    assert (p.network, p.cuda_driver, p.first_line, p.last_line) == ("IB", 12040, 2, 3)


# ------------------------------------------------------------ garbage, bounds and cost


@pytest.mark.parametrize("text", [
    "", "\n\n", "complete garbage\n", "\x00\x01\x02\xff" * 1000, "x" * 1_000_000,
    "host:1:2 [0] NCCL INF\n" * 1000, "NCCL version 2.x\n", ":" * 10_000, "[" * 100_000,
])
def test_garbage_is_a_short_parse_error(text):
    with pytest.raises(ParseError) as exc:
        parse_nccl_log(text)
    assert len(str(exc.value)) < 400 and "\n" not in str(exc.value)


def test_lists_are_bounded_and_counters_are_not():
    text = "".join(f"\nh:1:2 [0] x.cc:1 NCCL WARN oops {i}\n" for i in range(MAX_WARNS + 5))
    log = one(text)
    assert len(log.warns) == MAX_WARNS and log.warn_counts == {"other": MAX_WARNS + 5} and log.truncated
    assert log.processes[0].warns == MAX_WARNS + 5
    assert log.first_warn is not None and log.first_warn.text == "oops 0"


def test_huge_numbers_and_long_fields_are_no_crash():
    huge = "9" * 5000
    text = "\n".join([
        f"h:{huge}:2 [0] NCCL INFO x",
        f"h:1:2 [{huge}] NCCL INFO Using network IB",
        f"h:1:2 [0] NCCL INFO comm 0x1 rank {huge} nranks {huge} cudaDev {huge} - Init START",
        f"h:1:2 [0] NCCL INFO AllReduce: opCount {huge} sendbuff 0x1 recvbuff 0x1 count {huge} datatype 7 op 0 "
        "root 0 comm 0x1 [nranks=2] stream 0x1",
        f"h:1:2 [0] NCCL INFO Init timings: rank 0 nranks 1 total {huge}.5 (kernels {huge})",
        f"\nh:1:2 [0] x.cc:1 NCCL WARN NET/IB : Got completion from peer {'a' * 5000} with status={huge}",
        "h:1:2 [0] NCCL INFO NET/IB : Using " + "[0]mlx5_0:1/IB " * 1000,
        "h:1:2 [0] NCCL INFO " + "NCCL_X set to " * 10_000,
    ]) + "\n"
    log = one(text)
    assert len(log.processes[0].ib_devices) == 64 and log.truncated


NEAR_MISSES = [
    "h:1:2 [0] NCCL INF", "h:x:2 [0] NCCL INFO comm 0x1", " NCCL INFO ", "h:1:2 [0] NCCL WARN NET/IB : Got completion ",
    "h:1:2 [0] NCCL INFO AllReduce: opCount 1 sendbuff ", "h:1:2 [0] NCCL INFO comm 0x1 rank 1 nranks ",
    "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] via ", "NCCL version 2.1.1+cuda", "[rank0]:h:1:2 [x] NCCL",
    "h:1:2 [0] NCCL INFO NET/IB : Using [0]", "h:1:2 [0] NCCL INFO Init timings: rank 1 nranks 2 total ",
]


@pytest.mark.parametrize("shape", ["near-misses", "long-line", "many-colons", "real-log", "coll-lines"])
def test_cost_is_linear(shape):
    """The 10x input against the 1x one, measured here (the machine is shared: no absolute
    time): linear is ~10x, quadratic ~100x."""
    def make(n: int) -> str:
        if shape == "near-misses":  # 11k then 110k lines that almost parse
            return "".join(f"{m}{'a :[' * (i % 7)}\n" for i in range(n // 10) for m in NEAR_MISSES)
        if shape == "long-line":  # one line: the prefix, then a run that makes patterns backtrack
            return "h:1:2 [0] src.cc:1 NCCL WARN Call to " + "ibv_ x " * (n * 5) + "\n"
        if shape == "many-colons":
            return "[1,0]<stdout>:" + "a:1:" * (n * 10) + " [0] NCCL INFO x\n"
        if shape == "real-log":
            return (FIXTURES / "h100-captures/nccl-2.28.9-debug-info-1rank-torch-2.11.txt").read_text() * (n // 100)
        return "".join(f"h{i % 64}:{i % 64}:1 [0] NCCL INFO AllReduce: opCount {i:x} sendbuff 0x1 recvbuff 0x2 "
                       f"count 4 datatype 7 op 0 root 0 comm 0x{i % 64:x} [nranks=64] stream 0x3\n" for i in range(n))
    assert_linear(parse_nccl_log, make(10_000), make(100_000), slack=0.1, what=shape)


# ------------------------------------------------------------ fuzz

_FRAGMENTS = st.sampled_from([
    "h:1:2 [0] NCCL INFO ", "h:1:2 [0] x.cc:1 NCCL WARN ", "[2026-01-01 00:00:00] ", "[1,0]<stdout>:", "0: ",
    "comm 0x1 rank 0 nranks 2 ", "- Init START", "- Abort COMPLETE", "AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 ",
    "count 1 datatype 7 op 0 root 0 comm 0x1 [nranks=2] stream 0x1", "NET/IB : Using [0]mlx5_0:1/IB ",
    "Got completion from peer 1<2> with status=", "vendor err ", "Init timings: rank 0 nranks 1 total ",
    "Channel 00/0 : 0[0] -> 1[0] via NET/", "NCCL version 2.1.1+cuda1.1", "Cuda failure '", "\n", "\x00", ":", "[",
])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.lists(_FRAGMENTS | st.text(max_size=12), max_size=40).map("".join))
def test_never_anything_but_facts_or_parse_error(text):
    try:
        log = parse_nccl_log(text)
    except ParseError:
        return
    assert msgspec.json.decode(msgspec.json.encode(log), type=NcclLog) == log


# ------------------------------------------------------------ issue 20: shapes from the field

FIELD = FIXTURES / "field"


def test_a_line_without_the_host_pid_tid_prefix_is_read_as_no_process():
    # tests/fixtures/field/repos/nccl-log/net-ib-8-hca-relaxed-ordering-oob-no-prefix.txt:
    # a grep's excerpt, `NCCL INFO NET/IB : Using ...; OOB eno1:...` and nothing before it
    log = parse(FIELD / "repos/nccl-log/net-ib-8-hca-relaxed-ordering-oob-no-prefix.txt")
    (proc,) = log.processes
    assert (proc.host, proc.pid, proc.lines) == ("", 0, 1)
    assert [d.name for d in proc.ib_devices] == [f"mlx5_{i}" for i in range(8)]
    # the OOB interface is NCCL_SOCKET_IFNAME's pick, as bootstrap's; no plugin, so IB
    assert (proc.bootstrap_if, proc.network, proc.network_inferred) == ("eno1", "IB", True)
    # a bare WARN line after a launcher label is read too, and its wrapped tail is no NCCL line
    text = "3: NCCL WARN NET/IB : Got completion from peer 10.0.0.5<33092> with status=12 opcode 0 vendor err 129 (Send)\n"
    (w,) = one(text).warns
    assert (w.kind, w.host, w.pid, w.peer, w.status, w.vendor_err) == ("ib-completion", "", 0, "10.0.0.5<33092>", 12, 129)
    # a sentence that names NCCL is still no line of NCCL's
    with pytest.raises(ParseError):
        one("NCCL is a library\nNCCL INFOx\n")


def test_a_printed_network_wins_over_the_inferred_one_and_a_plugin_blocks_the_guess():
    text = (FIELD / "repos/nccl-log/net-ib-8-hca-plus-roce-bond-oob-ibp-no-prefix.txt").read_text()
    (proc,) = one(text + "NCCL INFO Using network Socket\n").processes
    assert (proc.network, proc.network_inferred, proc.bootstrap_if) == ("Socket", False, "ibp25s0")
    (proc,) = one("NCCL INFO P2P plugin IBext_v8\n" + text).processes
    assert (proc.network, proc.net_plugin, proc.net_plugin_version) == ("", "IBext_v8", "v8")


def test_a_masked_pid_behind_a_timestamp_still_names_the_host_and_the_warn():
    # tests/fixtures/field/issues/nccl-log/timestamped-modify-qp-110-rtr-gids-2.27.txt: NCCL
    # 2.27's `[%F %T] ` stamp, then `host:XXXXXX` (the reporter masked the pid, tid gone)
    log = parse(FIELD / "issues/nccl-log/timestamped-modify-qp-110-rtr-gids-2.27.txt")
    (w,) = log.warns
    assert (w.kind, w.host, w.pid, w.dev, w.call, w.stamp) == (
        "ibverbs", "host-01.example.com", 0, 5, "ibv_modify_qp", "2026-03-13 22:26:02")
    assert w.error == "110 Connection timed out"  # 2.27 drops "error" from "failed with error E"
    p = split_nccl_line("[2026-03-13 22:26:02] h:XXXXXX [5] ibvwrap.c:262 NCCL WARN x")
    assert p is not None and p.masked and (p.host, p.pid) == ("h", 0)
    assert split_nccl_line("h:x:2 [0] NCCL INFO x") is None  # one letter is no mask


def test_external_net_plugins_name_themselves_and_their_version():
    # aws-ofi-nccl 1.5 (`NET/OFI Using aws-ofi-nccl 1.5.0aws`, `Using network AWS Libfabric`)
    log = parse(FIELD / "repos/nccl-log/p4d-2node-srun-label-nccl-2.18.3-aws-ofi-efa-full-job-out.txt")
    plugged = [p for p in log.processes if p.net_plugin]
    assert len(plugged) == 16
    assert {(p.net_plugin, p.net_plugin_version, p.network, p.net_provider, p.net_nics) for p in plugged} == {
        ("aws-ofi-nccl 1.5.0aws", "1.5.0aws", "AWS Libfabric", "efa", 4)}
    # aws-ofi-nccl 1.13 (`NET/OFI Initializing aws-ofi-nccl 1.13.2-aws`)
    log = parse(FIELD / "repos/nccl-log/fsdp-p5-4node-srun-label-nccl-2.26.2-aws-ofi-1.13.2-elided.txt")
    assert {(p.host, p.net_plugin_version) for p in log.processes if p.net_plugin} == {("p5-dy-gpu-4", "1.13.2-aws")}
    # HPC-X's IBext_v8: the plugin, its path, and the network it names
    log = parse(CORPUS / "nccl-debug/gh200-2node-ibext-v8-sharp-init-start-mnnvl0.txt")
    gh1 = next(p for p in log.processes if p.host == "gh1")  # gh2's lines here are after init
    assert (gh1.net_plugin, gh1.net_plugin_version, gh1.network) == ("IBext_v8", "v8", "IBext_v8")
    assert gh1.net_plugin_path.endswith("/nccl_rdma_sharp_plugin/lib/libnccl-net.so")


def test_the_last_net_transport_to_list_its_devices_names_the_network_when_no_line_does():
    # NCCL tries its nets in order (a plugin, IB, Socket) and stops at the first with
    # devices, so the last device list printed is the chosen network's
    # field/repos/nccl-log/net-fastsocket-8-ifaces-no-prefix.txt: a plugin's own list
    log = parse(FIELD / "repos/nccl-log/net-fastsocket-8-ifaces-no-prefix.txt")
    (proc,) = log.processes
    assert (proc.network, proc.network_inferred, proc.socket_fallback) == ("FastSocket", True, False)
    assert [(d.index, d.name, d.addr) for d in proc.plugin_devices] == [
        (i, f"ibs{108 + i}", f"10.0.19.{12 + i}<0>") for i in range(8)]
    assert not proc.socket_devices and not proc.ib_devices
    # field/repos/nccl-log/net-socket-eth0-fallback-no-prefix.txt: NCCL's own socket list
    socket_text = (FIELD / "repos/nccl-log/net-socket-eth0-fallback-no-prefix.txt").read_text()
    (proc,) = one(socket_text).processes
    assert (proc.network, proc.network_inferred, proc.socket_fallback) == ("Socket", True, True)
    assert [(d.name, d.addr) for d in proc.socket_devices] == [("eth0", "10.0.0.23<0>")]
    # IB listed, then Socket (NCCL_NET=Socket: IB still initializes first); the two real
    # lines of the field files above, joined
    ib_text = (FIELD / "repos/nccl-log/net-ib-8-hca-relaxed-ordering-oob-no-prefix.txt").read_text()
    (proc,) = one(ib_text + socket_text).processes
    assert (proc.network, proc.network_inferred, proc.socket_fallback, len(proc.ib_devices)) == ("Socket", True, True, 8)
    # a printed `Using network` still wins, and a loaded plugin still blocks guessing a built-in one
    (proc,) = one(socket_text + "NCCL INFO Using network IB\n").processes
    assert (proc.network, proc.network_inferred) == ("IB", False)
    (proc,) = one("NCCL INFO P2P plugin IBext_v8\n" + socket_text).processes
    assert (proc.network, proc.network_inferred) == ("", False)


def test_an_indented_grep_of_bare_lines_after_its_prompt_is_read():
    # field/repos/nccl-log/grep-selected-provider-efa-32-nics-no-prefix.txt: a paste indented
    # 4 blanks as a whole, its first line the prompt (`$ cat ... | grep "Selected Provider is"`)
    log = parse(FIELD / "repos/nccl-log/grep-selected-provider-efa-32-nics-no-prefix.txt")
    (proc,) = log.processes
    assert (proc.network, proc.net_provider, proc.net_nics, proc.lines) == ("AWS Libfabric", "efa", 32, 2)
    # an indented excerpt reads as the unindented one (a transformation of a real field file)
    text = (FIELD / "repos/nccl-log/net-ib-8-hca-relaxed-ordering-oob-no-prefix.txt").read_text()
    assert one("".join("    " + line for line in text.splitlines(keepends=True))) == one(text)


def test_lines_are_read_through_named_handlers_and_the_unread_ones_counted():
    # field/repos/nccl-log/p4d-2node-srun-label-nccl-2.18.3-aws-ofi-efa-full-job-out.txt: a
    # whole job's stdout, NCCL lines among PMIx and libfabric ones, all under srun labels
    from healthcheck.parsers import lines, nccl_log, parser_for
    from healthcheck.parsers.explain import explain, recording_dispatch

    path = FIELD / "repos/nccl-log/p4d-2node-srun-label-nccl-2.18.3-aws-ofi-efa-full-job-out.txt"
    text = path.read_text()
    assert nccl_log.dispatch is lines.dispatch
    log, ex = explain("nccl-log", parser_for("nccl-log"), text)
    assert ex.how == "handlers"
    with recording_dispatch() as record:  # every line's handler (explain lists the first 200)
        parse_nccl_log(text)
    by = {number: names[0] for number, names in record.items()}
    raw = text.splitlines()
    first = {word: next(i for i, t in enumerate(raw, 1) if word in t)
             for word in ("PMIX ERROR", "NCCL INFO Bootstrap", "NET/OFI Selected Provider", "Using network",
                          "Init COMPLETE", "via NET/AWS Libfabric")}
    assert [by[first[w]] for w in first] == [
        "unrecognized", "bootstrap", "net-plugin", "network", "comm", "connection"]
    # the parser's own count is what --explain calls unrecognized, with a sample to send
    assert log.unrecognized.count == ex.counts["unrecognized"] > 16
    assert log.unrecognized.sample[0].line == first["PMIX ERROR"]
    assert "PMIX ERROR" in log.unrecognized.sample[0].text
    # another program's lines take nothing from the facts: blanked, the log reads the same
    kept = "".join(line + "\n" if "NCCL" in line else "\n" for line in raw)
    alone = parse_nccl_log(kept)
    assert alone.unrecognized.count < log.unrecognized.count
    assert msgspec.structs.replace(alone, unrecognized=log.unrecognized) == log


def test_a_modify_qp_warn_names_the_hca_the_qp_states_and_both_gids():
    # field/issues/nccl-log/timestamped-modify-qp-110-rtr-gids-2.27.txt (tuning): 2.27 prints the
    # device, the QP's state and the next, the GID index and both RoCE GIDs (IPv4-mapped)
    (warn,) = parse_nccl_log((FIELD / "issues" / "nccl-log" / "timestamped-modify-qp-110-rtr-gids-2.27.txt")
                             .read_text()).warns
    assert (warn.kind, warn.call, warn.error, warn.hca) == ("ibverbs", "ibv_modify_qp", "110 Connection timed out",
                                                            "mlx_x")
    assert (warn.qp_state, warn.next_qp_state, warn.gid_index) == ("INIT", "RTR", 3)
    assert (warn.local_gid, warn.remote_gid) == ("::ffff:xxx.xx.xx.xx", "::ffff:xxx.xx.xxx.xx")
    # an older verbs WARN without the detail keeps none
    old = parse_nccl_log((DEBUG / "nccl-2.7.8-roce-2node-1gpu-ibv-create-cq-failed.txt").read_text())
    assert all(w.qp_state == "" and w.gid_index is None for w in old.warns if w.kind == "ibverbs")


def test_the_comm_line_says_whether_it_spans_a_multi_node_nvlink_domain():
    # corpus nccl-debug/gh200-...-mnnvl0.txt: `nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0`
    log = parse_nccl_log((DEBUG / "gh200-2node-ibext-v8-sharp-init-start-mnnvl0.txt").read_text())
    assert {c.mnnvl for c in log.comms if c.nnodes == 2} == {0}
