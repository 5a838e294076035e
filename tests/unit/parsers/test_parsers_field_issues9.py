"""The mechanisms behind held-out-9's misses (issue 20's eleventh round), each on the real
file and on real lines of other fixtures (a transformation says so): gloo's transport
errors, every family (connectFullMesh under a Ray prefix and under torch 2.0's glog,
`writev` to an IPv6 peer, gloo::EnforceNotMet's what()); one reader of a peer's address and
port for gloo, torch's store and NCCL (IPv6 in brackets, a zone, IPv4-mapped, host names);
a line a writer put whole in markdown's inline code; oh-my-zsh's `➜` prompt.
"""

from __future__ import annotations

from pathlib import Path

from support import CORPUS, FIXTURES, assert_linear

from healthcheck.parsers import lines as layer
from healthcheck.parsers.lines import is_prompt, read_lines
from healthcheck.parsers.nccl_log import parse_nccl_log
from healthcheck.parsers.nvidia_smi import parse_nvidia_smi_q_pasted
from healthcheck.parsers.peers import Endpoint, endpoint
from healthcheck.parsers.perfquery import parse_perfquery
from healthcheck.parsers.torch_log import parse_torch_log

FIELD9 = FIXTURES / "field" / "issues-9"
RAY_MESH = FIELD9 / "torch-log" / "ray-worker-ip-prefix-gloo-connectfullmesh-no-error-one-line.txt"
GLOG_MESH = FIELD9 / "torch-log" / "occlum-jemalloc-noise-old-glog-connectfullmesh-rpc-traceback.txt"
WRITEV_V6 = FIELD9 / "torch-log" / "gtest-terminate-gloo-ioexception-writev-ipv6-loopback.txt"
ZSH_SMI = FIELD9 / "nvidia-smi-q" / "zsh-arrow-prompt-nvidia-smi-a-450-quadro-p2200.txt"
ZSH_PERFQUERY = FIXTURES / "field" / "issues" / "perfquery" / "ibsim-preloaded-no-header-cut.txt"
ZSH_TORCH = FIXTURES / "field" / "issues-6" / "torch-log" / "zsh-prompt-info-launch-configs-error-handler-json-connection.txt"
MESH_TIMEOUT = FIXTURES / "diagnose" / "env-world" / "rank0.log"
PEER_CLOSED = FIXTURES / "diagnose-live" / "kill-torchrun" / "rank1.log"
READ_ERROR = FIXTURES / "diagnose-live" / "size-torchrun" / "rank2.log"
CONNECT_REFUSED = FIXTURES / "field" / "issues" / "torch-log" / "gloo-new-group-pair-connection-refused-interleaved.txt"
CONNECT_TIMEOUT = FIXTURES / "field" / "issues" / "torch-log" / "gloo-pair-connect-timeout-mpirun-aborted.txt"
RECV_TIMEOUT = CORPUS / "torch-nccl-error" / "gloo-ddp-sync-params-broadcast-recv-timed-out-1800000ms-torch-1.4.txt"
NO_INTERFACE = (FIXTURES / "diagnose-jobs" / "held-out-4" / "saved" / "h4-gloo-socket-ifname-missing-plain-w3-r2"
                / "rank2.log")
SIZE_ABORT = FIXTURES / "diagnose" / "bcast-size" / "rank2.log"
LINK_LOCAL = FIXTURES / "field" / "issues" / "nccl-log" / "ib-error4-vendor81-linklocal-peers-h100-prose-first.txt"
STORE_WAIT = FIXTURES / "diagnose-jobs" / "tuning" / "preinit-config-plain-w3-r1" / "rank2.log"


def _line(path: Path, marker: str) -> str:
    """The first line of a real fixture that holds `marker`."""
    return next(x for x in path.read_text().split("\n") if marker in x)


# ---------------------------------------------------------------- gloo's transport errors


def test_connect_full_mesh_under_a_ray_prefix_in_inline_code_names_its_rank():
    log = parse_torch_log(RAY_MESH.read_text())
    [g] = log.gloo
    assert (g.kind, g.operation, g.rank, g.source) == ("connect", "connectFullMesh", 1, "pair.cc:144")
    assert "connectFullMesh failed" in g.message and g.message.endswith("no error")
    assert log.unrecognized.count == 0  # the Ray prefix and the backticks came off


def test_connect_full_mesh_in_torch_2_0s_glog_is_a_gloo_error():
    [g] = parse_torch_log(GLOG_MESH.read_text()).gloo
    assert (g.kind, g.operation, g.source, g.line) == ("connect", "connectFullMesh", "pair.cc:144", 6)
    assert "connectFullMesh failed" in g.message
    # its cause a connect timeout to no known peer (`[none]`): one fact, no peer
    first = parse_torch_log(MESH_TIMEOUT.read_text()).gloo[0]
    assert (first.kind, first.operation, first.source, first.peer, first.port) == (
        "connect", "connectFullMesh", "pair.h:311", "", None)
    assert "Connect timeout [none]" in first.message


def test_writev_to_an_ipv6_peer_names_its_address_and_port():
    [g] = parse_torch_log(WRITEV_V6.read_text()).gloo
    assert (g.kind, g.peer, g.port, g.source) == ("write-error", "::1", 54172, "pair.cc:374")
    assert g.message == "Connection reset by peer"


def test_every_gloo_family_on_its_real_line_is_an_error_with_its_peer():
    cases = [  # (fixture, marker, kind, peer, port)
        (PEER_CLOSED, "Connection closed by peer", "peer-closed", "10.79.0.13", None),
        (READ_ERROR, "Read error [", "read-error", "10.79.0.12", 35254),
        (CONNECT_REFUSED, "connect [", "connect", "172.31.71.170", 13195),
        (CONNECT_TIMEOUT, "Connect timeout [", "connect", "172.17.27.13", 27023),
        (WRITEV_V6, "writev [", "write-error", "::1", 54172),
        (RECV_TIMEOUT, "Timed out waiting", "timeout", "", None),
        (SIZE_ABORT, "op.preamble.length", "size-mismatch", "", None),
        (NO_INTERFACE, "enforce fail at", "enforce", "", None),
        (RAY_MESH, "connectFullMesh", "connect", "", None),
    ]
    for path, marker, kind, peer, port in cases:
        line = _line(path, marker)
        [g] = parse_torch_log(line + "\n").gloo  # the whole line: its line end
        assert (g.kind, g.peer) == (kind, peer), line
        assert port is None or g.port == port, line
        assert g.message and g.source, line
    [enforce] = parse_torch_log(_line(NO_INTERFACE, "enforce fail at") + "\n").gloo
    assert (enforce.source, enforce.message) == ("device.cc:84", "ifa != nullptr. Unable to find address for: ib0")


def test_a_gloo_peer_in_ipv6_or_by_name_is_read_where_ipv4_was():
    # real lines with their IPv4 peer written as gloo writes others (a transformation:
    # gloo's address.cc brackets every address)
    for path, marker, v4 in ((PEER_CLOSED, "Connection closed by peer", "10.79.0.13"),
                             (READ_ERROR, "Read error [", "10.79.0.12"),
                             (CONNECT_REFUSED, "connect [", "172.31.71.170")):
        for other in ("fe80::966d:ae03:8b:df78%ib0", "::ffff:10.1.1.1", "node-7.cluster"):
            [g] = parse_torch_log(_line(path, marker).replace(v4, other)).gloo
            assert g.peer == other and g.port is not None, (marker, other)


# ---------------------------------------------------------------- one reader of a peer


def test_a_peer_is_read_from_every_form_the_tools_print():
    assert endpoint("[::1]:54172") == Endpoint("::1", 54172)  # gloo (issues-9)
    assert endpoint("[10.1.3.122]:42916") == Endpoint("10.1.3.122", 42916)  # gloo (issues-9)
    assert endpoint("[none]") is None  # gloo knows no peer
    assert endpoint("fe80::966d:ae03:8b:df78%ib0<53249>") == Endpoint("fe80::966d:ae03:8b:df78%ib0", 53249)
    assert endpoint("10.216.210.236<54862>") == Endpoint("10.216.210.236", 54862)  # NCCL
    assert endpoint("ng30903-ib.narval.calcul.quebec<51159>") == Endpoint("ng30903-ib.narval.calcul.quebec", 51159)
    assert endpoint("[::ffff:127.0.0.1]:35790") == Endpoint("::ffff:127.0.0.1", 35790)  # torch's store
    assert endpoint("[::ffff:10.1.1.1]<33397>") == Endpoint("::ffff:10.1.1.1", 33397)  # the NCCL shape
    assert endpoint("node1:29500") == Endpoint("node1", 29500)
    assert endpoint("fe80::1") == Endpoint("fe80::1", None)  # no port printed: none read
    for junk in ("", "[", "a b<1>", "<1>", "[x]:123456", "[a]b"):
        assert endpoint(junk) is None, junk


def test_nccl_warns_give_the_peers_address_and_port():
    warns = [w for w in parse_nccl_log(LINK_LOCAL.read_text()).warns if w.peer]
    assert warns and all(w.peer_address.startswith("fe80::") and w.peer_address.endswith("%ib0") for w in warns)
    assert {w.peer_port for w in warns} >= {53249, 39391}
    assert all(w.peer == f"{w.peer_address}<{w.peer_port}>" for w in warns)  # `peer` kept as printed
    # the IPv4-mapped form in brackets (a transformation of the real line)
    line = _line(LINK_LOCAL, "Got completion from peer fe80::966d:ae03:9c:f5f8%ib0<39391>")
    mapped = line.replace("fe80::966d:ae03:9c:f5f8%ib0<39391>", "[::ffff:10.1.1.1]<39391>")
    [w] = [w for w in parse_nccl_log(mapped[mapped.index("H100-5"):]).warns if w.peer]
    assert (w.peer_address, w.peer_port) == ("::ffff:10.1.1.1", 39391)


def test_torchs_store_address_is_read_by_the_same_reader():
    [z] = [z for z in parse_torch_log(STORE_WAIT.read_text()).rendezvous if z.kind == "store-wait"][:1]
    assert z.address == "127.0.0.1:55325"


def test_reading_peers_costs_its_length():
    def parse(text: str) -> None:
        parse_torch_log(text)
    for filler in ("connectFullMesh failed with [", "[enforce fail at /gloo/", "writev [::1", "Read error [",
                   "Connection closed by peer [" + "f" * 300):
        assert_linear(parse, filler * (100_000 // len(filler)), filler * (1_000_000 // len(filler)), what=filler)
    for filler in ("[", "a<", ":" * 10, "[::1]:1"):
        assert_linear(endpoint, filler * (100_000 // len(filler)), filler * (1_000_000 // len(filler)), what=filler)


# ---------------------------------------------------------------- inline code, zsh's prompt


def test_a_line_in_inline_code_is_its_text_and_a_message_quoting_code_stays():
    raw = RAY_MESH.read_text().split("\n")[0]
    assert raw.startswith("`") and raw.endswith("`")
    [line] = list(read_lines(raw))
    assert line.rank == 1 and line.text.startswith("Gloo connectFullMesh") and "code" in line.repairs
    for kept in ("use `torchrun` instead", "``` ", "```", "`", "``", "`a`b`", "  `x` and `y`"):
        assert layer.uncoded(kept) == kept, kept
    assert layer.uncoded("  `nvidia-smi -a`") == "  nvidia-smi -a"


def test_oh_my_zshs_arrow_prompt_is_noise_for_every_parser():
    smi = parse_nvidia_smi_q_pasted(ZSH_SMI.read_text())
    assert smi.unrecognized.count == 0 and smi.driver_version == "450.80.02"
    assert parse_perfquery(ZSH_PERFQUERY.read_text()).unrecognized.count == 0
    first = next(iter(read_lines(ZSH_TORCH.read_text())))
    assert first.noise == "prompt"
    for real in ("➜ nvidia-smi -a", "➜  opensm git:(master) ✗ LD_PRELOAD=x perfquery 5 1",
                 "(yczhong) ➜  pipeline_resnet50 git:(pytorch-pipeline) ✗ ./run.sh"):
        assert is_prompt(real), real
    for output in ("step ➜ 3", "Driver Version : 450.80.02", "➜x"):
        assert not is_prompt(output), output


def test_an_arrow_prompt_before_every_field_capture_reads_the_same():
    # every field file of nvidia-smi-q and torch-log with oh-my-zsh's prompt line first (a
    # transformation): the same facts, no more unread lines
    for tool, parse in (("nvidia-smi-q", parse_nvidia_smi_q_pasted), ("torch-log", parse_torch_log)):
        for path in sorted((FIXTURES / "field").glob(f"*/{tool}/*.txt"))[:40]:
            text = path.read_text(errors="replace")
            try:
                clean = parse(text)
            except Exception:
                continue
            prompted = parse("➜  ~ nvidia-smi -q\n" + text)
            assert prompted.unrecognized.count == clean.unrecognized.count, path
