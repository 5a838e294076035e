"""Flight Recorder: real dumps (torch 2.11 + NCCL on an H100, torch 2.13 + gloo on CPU, pickle
and JSON), comparing ranks (progress, missing seqs, mismatches as rank sets), the analyzers'
text (torchfrtrace, NVRx), and hostile dumps: a pickle that would run code runs nothing."""

from __future__ import annotations

import os
import pickle
import time

import msgspec
import pytest
from support import CORPUS, FIXTURES, assert_linear, run_hc_inproc

from healthcheck.core.errors import ParseError
from healthcheck.parsers import TOOLS, parser_for
from healthcheck.parsers import flight_recorder as fr
from healthcheck.parsers.flight_recorder import (
    FlightRecorderDump,
    FrAnalysis,
    FrEntry,
    FrPgStatus,
    FrProcessGroup,
    FrVariant,
    compare_ranks,
    parse_flight_recorder,
    parse_fr_analysis,
    rank_from_filename,
)

DIR = FIXTURES / "flight-recorder"
H100 = FIXTURES / "h100-captures" / "flight-recorder-2.11-nccl-1rank-8-all_reduce.pickle"
SCENARIOS = ("healthy", "size-mismatch", "op-mismatch", "skip")


def dump(scenario: str, rank: int, ext: str = "pickle") -> FlightRecorderDump:
    return parse_flight_recorder((DIR / f"gloo-2.13-{scenario}-rank{rank}.{ext}").read_bytes())


def dumps(scenario: str, ext: str = "pickle") -> dict[int, FlightRecorderDump]:
    return {r: dump(scenario, r, ext) for r in (0, 1)}


# ------------------------------------------------------------ every dump

# file -> (format, entries, pg_status groups, backends, last entry's profiling_name)
EXPECTED = {
    H100.name: ("pickle", 8, 1, ("nccl",), "nccl:all_reduce"),
    **{f"nccl-2.11-h100-1rank-{name}.{ext}": (ext, 6, 1, ("nccl",), "nccl:all_reduce")
       for name in ("inflight-behind-gpu-sleep", "done") for ext in ("pickle", "json")},
    **{f"nccl-2.11-h100-dump_fr_trace-no-entries.{ext}": (ext, 0, 0, (), None) for ext in ("pickle", "json")},
    **{f"gloo-2.13-{s}-rank{r}.{ext}": (ext, n, g, ("gloo",), last)
       for ext in ("pickle", "json")
       for s, r, n, g, last in [
           ("healthy", 0, 6, 2, "gloo:all_reduce"), ("healthy", 1, 6, 2, "gloo:all_reduce"),
           ("size-mismatch", 0, 5, 1, "gloo:all_reduce"), ("size-mismatch", 1, 5, 1, "gloo:all_reduce"),
           ("op-mismatch", 0, 4, 1, "gloo:all_reduce"), ("op-mismatch", 1, 4, 1, "gloo:broadcast"),
           ("skip", 0, 5, 1, "gloo:all_reduce"), ("skip", 1, 4, 1, "gloo:all_reduce")]},
}


def _path(name: str):
    return H100 if name == H100.name else DIR / name


def test_every_dump_is_expected_and_described():
    found = sorted(p.name for p in DIR.iterdir() if p.suffix in (".pickle", ".json"))
    assert found == sorted(n for n in EXPECTED if n != H100.name)
    readme = (DIR / "README.md").read_text()
    assert all(f"`{s}`" in readme for s in SCENARIOS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_dump_parses(name):
    fmt, n, groups, backends, last = EXPECTED[name]
    d = parse_flight_recorder(_path(name).read_bytes())
    assert (d.format, d.version, len(d.entries), len(d.pg_status), d.backends,
            d.entries[-1].profiling_name if d.entries else None, d.bad_entries) == (fmt, "2.10", n, groups, backends,
                                                                                   last, 0)
    assert [e.record_id for e in d.entries] == list(range(n))
    # the facts survive a JSON round trip (hc parse prints them)
    assert msgspec.json.decode(msgspec.json.encode(d), type=FlightRecorderDump) == d


# ------------------------------------------------------------ the dumps, value by value


def test_h100_nccl_dump():
    d = parse_flight_recorder(H100.read_bytes())
    assert d.comm_lib_version == "2.28.9"
    assert d.process_groups == (FrProcessGroup(key="0", name="0", desc="default_pg", ranks=(0,)),)
    assert d.pg_status == (FrPgStatus(pg="0", last_enqueued=8),)  # started/completed -1: None
    first, last = d.entries[0], d.entries[-1]
    assert (first.collective_seq_id, first.op_id, first.p2p_seq_id, first.pg_id, first.pg_name, first.pg_desc) == (
        1, 1, 0, 0, "0", "default_pg")
    assert (first.op, first.backend, first.state, first.is_p2p, first.retired, first.timeout_ms) == (
        "all_reduce", "nccl", "completed", False, False, 30000)
    assert (first.input_sizes, first.input_dtypes, first.output_sizes, first.output_dtypes) == (
        ((1048576,),), ("Float",), ((1048576,),), ("Float",))
    assert (first.time_created_ns, first.time_discovered_started_ns, first.time_discovered_completed_ns) == (
        1795418438443582801, None, 1795418438444501378)
    assert (first.thread_id, first.thread_name) == ("140594658657024", "python3")
    assert [(f.name, f.line) for f in first.frames] == [("all_reduce", 3068), ("wrapper", 83), ("<module>", 22)]
    assert first.frames[2].filename == "/work/main/.gpu/hang.py"
    assert last.collective_seq_id == 8 and last.seq == 8
    progress = compare_ranks({0: d}).groups[0].progress[0]
    # the entries say completed where pg_status still says -1: both are read
    assert (progress.last_enqueued, progress.last_started, progress.last_completed, progress.first_seq) == (
        8, 8, 8, 1)


def test_nccl_states_lag_until_the_watchdog_looks():
    """Seq 1-4 had completed (synchronized) before the GPU sleep, yet the dump taken during
    it says scheduled for all 6: entry states are what the watchdog last saw."""
    inflight = parse_flight_recorder((DIR / "nccl-2.11-h100-1rank-inflight-behind-gpu-sleep.pickle").read_bytes())
    done = parse_flight_recorder((DIR / "nccl-2.11-h100-1rank-done.pickle").read_bytes())
    assert [e.state for e in inflight.entries] == ["scheduled"] * 6
    assert [e.state for e in done.entries] == ["completed"] * 6
    assert all(e.time_discovered_started_ns is None for e in inflight.entries)
    assert all(e.time_discovered_completed_ns >= e.time_discovered_started_ns >= e.time_created_ns
               for e in done.entries)
    assert inflight.pg_status == done.pg_status == (FrPgStatus(pg="0"),)  # -1 throughout
    last = done.entries[-1]
    assert (last.input_sizes, last.input_dtypes, last.collective_seq_id) == (((4, 1024),), ("BFloat16",), 6)
    assert [f.name for f in last.frames] == ["all_reduce", "wrapper", "train_step", "<module>"]
    progress = compare_ranks({0: inflight}).groups[0].progress[0]
    assert (progress.last_enqueued, progress.last_started, progress.last_completed) == (6, None, None)
    empty = parse_flight_recorder((DIR / "nccl-2.11-h100-dump_fr_trace-no-entries.pickle").read_bytes())
    assert (empty.entries, empty.process_groups, empty.pg_status) == ((), (), ())
    assert compare_ranks({0: empty}).groups == ()


def test_gloo_dump_and_its_quirks():
    d = dump("healthy", 0)
    assert d.comm_lib_version == ""
    assert d.process_groups == (FrProcessGroup(key="", ranks=()),)  # gloo 2.13: one '' key, ranks '[]'
    assert d.pg_status == (FrPgStatus(pg="0", last_enqueued=5, last_completed=5),
                           FrPgStatus(pg="1", last_enqueued=1, last_completed=1))
    assert [(e.pg_name, e.pg_desc, e.collective_seq_id, e.op) for e in d.entries] == [
        ("0", "default_pg", 1, "all_reduce"), ("0", "default_pg", 2, "broadcast"), ("0", "default_pg", 3, "barrier"),
        ("0", "default_pg", 4, "all_reduce"), ("0", "default_pg", 5, "all_gather"), ("1", "dp", 1, "all_reduce")]
    assert all(e.state == "scheduled" and e.retired for e in d.entries)  # done, yet "scheduled": no events
    assert not any(e.is_p2p for e in d.entries)  # the send/recv is not recorded
    barrier, gather, dp = d.entries[2], d.entries[4], d.entries[5]
    assert (barrier.input_sizes, barrier.input_dtypes) == ((), ())
    assert (gather.input_sizes, gather.output_sizes) == (((2,),), ((2, 2),))
    assert (dp.input_dtypes, dp.timeout_ms) == (("BFloat16",), 1800000)  # new_group's own default timeout
    assert [f.name for f in d.entries[0].frames] == ["all_reduce", "wrapper", "rank_main", "<module>"]
    assert dump("healthy", 0, "json").entries[0].frames == ()  # the JSON form has no stacks


def test_the_json_form_reads_like_the_pickle():
    for scenario in SCENARIOS:
        for rank in (0, 1):
            p, j = dump(scenario, rank), dump(scenario, rank, "json")
            assert j.process_groups == p.process_groups
            if (scenario, rank) == ("skip", 1):  # its last all_reduce completed between the two dumps
                assert (p.pg_status[0].last_completed, j.pg_status[0].last_completed) == (3, 4)
                assert (p.entries[-1].retired, j.entries[-1].retired) == (False, True)
                p = msgspec.structs.replace(p, entries=p.entries[:-1] + (
                    msgspec.structs.replace(p.entries[-1], retired=True),), pg_status=j.pg_status)
            assert j.pg_status == p.pg_status  # "4" strings in JSON
            assert [msgspec.structs.replace(e, frames=()) for e in p.entries] == list(j.entries)


def test_a_str_is_read_as_the_json_form():
    text = (DIR / "gloo-2.13-skip-rank1.json").read_text()
    assert parse_flight_recorder(text) == dump("skip", 1, "json")
    mangled = (DIR / "gloo-2.13-skip-rank1.pickle").read_bytes().decode("utf-8", errors="replace")
    with pytest.raises(ParseError):
        parse_flight_recorder(mangled)


# ------------------------------------------------------------ comparing ranks


def test_healthy_ranks_agree():
    c = compare_ranks(dumps("healthy"))
    assert c.consistent and c.ranks == (0, 1)
    assert [(g.pg_name, g.pg_desc, g.ranks, g.behind) for g in c.groups] == [
        ("0", "default_pg", (0, 1), ()), ("1", "dp", (0, 1), ())]
    assert [(p.rank, p.last_enqueued, p.last_started, p.last_completed, p.first_seq, p.entries)
            for p in c.groups[0].progress] == [(0, 5, None, 5, 1, 5), (1, 5, None, 5, 1, 5)]


def test_same_bytes_different_shapes_is_a_size_disagreement():
    (g,) = compare_ranks(dumps("size-mismatch")).groups
    assert g.missing == () and g.mismatch_count == 2
    assert [(m.seq, m.field, m.variants) for m in g.mismatches] == [
        (4, "input_sizes", (FrVariant("[[3, 4]]", (0,)), FrVariant("[[4, 3]]", (1,)))),
        (4, "output_sizes", (FrVariant("[[3, 4]]", (0,)), FrVariant("[[4, 3]]", (1,)))),
    ]


def test_different_ops_at_one_seq():
    (g,) = compare_ranks(dumps("op-mismatch")).groups
    assert [(m.seq, m.field, m.variants) for m in g.mismatches] == [
        (4, "op", (FrVariant("gloo:all_reduce", (0,)), FrVariant("gloo:broadcast", (1,))))]


def test_a_skipped_collective_leaves_a_rank_behind():
    c = compare_ranks(dumps("skip"))
    (g,) = c.groups
    assert not c.consistent and g.mismatches == ()
    assert [(m.seq, m.op, m.present, m.missing) for m in g.missing] == [(5, "gloo:all_reduce", (0,), (1,))]
    assert g.behind == (1,)
    assert [(p.rank, p.last_enqueued, p.last_completed) for p in g.progress] == [(0, 5, 5), (1, 4, 3)]
    json = compare_ranks(dumps("skip", "json"))
    assert json.groups[0].missing == g.missing and json.groups[0].progress[1].last_completed == 4


def _entry(seq: int, op: str = "nccl:all_reduce", sizes=((4,),), dtype: str = "Float", pg: str = "0",
           state: str = "completed", p2p: bool = False) -> FrEntry:
    return FrEntry(profiling_name=op, state=state, pg_name=pg, pg_desc="default_pg", collective_seq_id=seq,
                   is_p2p=p2p, input_sizes=sizes, input_dtypes=(dtype,), output_sizes=sizes, output_dtypes=(dtype,))


def _dump(*entries: FrEntry, status: tuple[FrPgStatus, ...] = (), groups=()) -> FlightRecorderDump:
    return FlightRecorderDump(format="pickle", version="2.10", entries=entries, pg_status=status,
                              process_groups=groups)


def test_an_evicted_ring_buffer_is_not_missing_and_a_hole_is():
    full = _dump(*(_entry(s) for s in range(1, 61)))
    recent = _dump(*(_entry(s) for s in range(50, 61)))  # older entries overwritten
    holed = _dump(*(_entry(s) for s in range(1, 61) if s != 30))
    (g,) = compare_ranks({0: full, 1: recent, 2: holed}).groups
    assert [(m.seq, m.present, m.missing) for m in g.missing] == [(30, (0,), (2,))]  # rank 1: overwritten, unknown
    assert [p.first_seq for p in g.progress] == [1, 50, 1]


def test_ranks_without_dump_or_data_and_the_order_of_variants():
    members = (FrProcessGroup(key="0", name="0", desc="default_pg", ranks=(0, 1, 2, 3, 4)),)
    a = _dump(_entry(1), _entry(2, sizes=((8,),)), groups=members)
    b = _dump(_entry(1), _entry(2, sizes=((8,),)))
    c = _dump(_entry(1), _entry(2, sizes=((9,),), dtype="Half"))
    other = _dump(_entry(1, pg="7"))  # a dump that knows nothing of group 0
    comparison = compare_ranks({0: a, 1: b, 2: c, 3: other})
    g = comparison.groups[0]
    assert (g.pg_name, g.ranks, g.no_dump, g.unknown) == ("0", (0, 1, 2), (4,), (3,))
    assert [(m.field, m.variants) for m in g.mismatches] == [
        ("input_sizes", (FrVariant("[[8]]", (0, 1)), FrVariant("[[9]]", (2,)))),
        ("input_dtypes", (FrVariant("['Float']", (0, 1)), FrVariant("['Half']", (2,)))),
        ("output_sizes", (FrVariant("[[8]]", (0, 1)), FrVariant("[[9]]", (2,)))),
        ("output_dtypes", (FrVariant("['Float']", (0, 1)), FrVariant("['Half']", (2,)))),
    ]
    assert comparison.groups[1].pg_name == "7"


def test_asymmetric_ops_and_p2p_are_not_size_mismatches():
    root = _dump(_entry(1, op="nccl:gather", sizes=((2,), (2,))), _entry(2, op="nccl:send", p2p=True))
    leaf = _dump(_entry(1, op="nccl:gather", sizes=()))
    (g,) = compare_ranks({0: root, 1: leaf}).groups
    assert g.mismatches == () and g.missing == ()


def test_pg_status_alone_tells_a_rank_that_never_started():
    ahead = _dump(_entry(1), _entry(2))
    silent = _dump(status=(FrPgStatus(pg="0"),))  # -1 everywhere: nothing enqueued
    (g,) = compare_ranks({0: ahead, 1: silent}).groups
    assert [(m.seq, m.missing) for m in g.missing] == [(1, (1,)), (2, (1,))]
    assert g.behind == () and [p.last_enqueued for p in g.progress] == [2, None]


def test_long_divergences_are_listed_up_to_a_cap_and_counted():
    ahead = _dump(*(_entry(s) for s in range(1, 1001)))
    stuck = _dump(_entry(1))
    (g,) = compare_ranks({0: ahead, 1: stuck}).groups
    assert g.missing_count == 999 and len(g.missing) == fr.MAX_LISTED and g.missing[0].seq == 2


# ------------------------------------------------------------ hostile dumps

PWNED: list[str] = []


def _pwn(marker: str) -> None:  # what a malicious pickle would call
    PWNED.append(marker)


class _CallsSystem:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


class _CallsHere:
    def __reduce__(self):
        return (_pwn, ("called",))


@pytest.mark.parametrize("protocol", [0, 1, 2, 4, 5])
def test_a_malicious_pickle_runs_nothing(tmp_path, protocol):
    marker = tmp_path / "pwned"
    for payload in (_CallsSystem(str(marker)), _CallsHere()):
        data = pickle.dumps({"version": "2.10", "entries": [payload]}, protocol=protocol)
        with pytest.raises(ParseError, match="refused global"):
            parse_flight_recorder(data)
    assert not marker.exists() and PWNED == []


@pytest.mark.parametrize("data", [
    b"cos\nsystem\n(S'true'\ntR.",  # GLOBAL + REDUCE, protocol 0
    b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x94.",  # STACK_GLOBAL
    b"(S'true'\nios\nsystem\n.",  # INST
    b"\x80\x02(cos\nsystem\nS'true'\no.",  # OBJ
    b"\x80\x02\x82\x01.",  # EXT1 (no extension registered)
    b"\x80\x02X\x01\x00\x00\x00aQ.",  # BINPERSID
    b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01cbuiltins\neval\nq\x02s.",  # a global as a value
], ids=["global-reduce", "stack-global", "inst", "obj", "ext1", "persistent-id", "global-value"])
def test_every_way_to_name_a_callable_is_refused(data):
    with pytest.raises(ParseError):
        parse_flight_recorder(data)


def _laughs(levels: int) -> bytes:
    """{"version": "2.10", "entries": L} where L is a list of two references to the list
    before it, `levels` deep: 9 bytes a level, 2**levels strings once walked."""
    body = bytearray(b"X\x03\x00\x00\x00lolq\x00")  # BINUNICODE 'lol', BINPUT 0
    for i in range(1, levels + 1):  # POP the level before (it stays in the memo), EMPTY_LIST, BINPUT i,
        body += b"0]q" + bytes([i]) + b"(h" + bytes([i - 1]) + b"h" + bytes([i - 1]) + b"e"  # MARK, BINGET x2, APPENDS
    return (b"\x80\x02}(X\x07\x00\x00\x00versionX\x04\x00\x00\x002.10X\x07\x00\x00\x00entries"
            + bytes(body) + b"u.")


def test_the_laughs_pickle_is_what_it_says():
    assert pickle.loads(_laughs(3))["entries"] == [[["lol"] * 2] * 2] * 2  # plain data: safe to load here


def test_shared_references_that_expand_are_refused_quickly():
    data = _laughs(25)
    start = time.perf_counter()
    with pytest.raises(ParseError, match="expand"):
        parse_flight_recorder(data)
    assert time.perf_counter() - start < 5, "the walk must stop at the budget"


def test_a_cycle_is_refused():
    loop: list = []
    loop.append(loop)
    with pytest.raises(ParseError, match="cycle|expand|nested"):
        parse_flight_recorder(pickle.dumps({"version": "2.10", "entries": loop}))


def test_deep_nesting_is_refused():
    deep: list = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(ParseError, match="nested"):
        parse_flight_recorder(pickle.dumps({"version": "2.10", "entries": deep}))
    with pytest.raises(ParseError):
        parse_flight_recorder(b"{" + b'"a":[' * 100_000)


def test_oversized_input_is_refused_before_reading(monkeypatch):
    monkeypatch.setattr(fr, "MAX_DUMP_BYTES", 1000)
    with pytest.raises(ParseError, match="more than the 1000"):
        parse_flight_recorder(H100.read_bytes())


@pytest.mark.parametrize("obj, match", [
    ([1, 2], "expected a dict"), ({"entries": []}, "no 'version'"), ({"version": "3.0"}, "only the 2.x"),
    ({"version": 2.1}, "no 'version'"), ({"version": "2.10", "entries": {"a": 1}}, "Flight Recorder dump"),
    ({"version": "2.10", "pg_status": [1]}, "Flight Recorder dump"),
])
def test_dicts_that_are_no_dump(obj, match):
    with pytest.raises(ParseError, match=match):
        parse_flight_recorder(pickle.dumps(obj))


def test_entries_of_the_wrong_types_are_counted_not_fatal():
    good = {"profiling_name": "nccl:all_reduce", "collective_seq_id": 3, "process_group": ("0", "default_pg"),
            "state": "started"}
    d = parse_flight_recorder(pickle.dumps({"version": "2.5", "entries": [
        good, {"collective_seq_id": "x"}, 7, {"input_sizes": [[1, "a"]]}, {"seq_id": 9}]}))
    assert d.bad_entries == 3 and [e.collective_seq_id for e in d.entries] == [3, 9]


@pytest.mark.parametrize("data", [b"complete garbage\n", b"x" * 200_000, b"[" * 100_000, b"\x80\x02", b"\x80\x05",
                                  b"{not json", b"\x00\x01\x02", "\n\n\n", b"N."])
def test_garbage_is_a_short_parse_error(data):
    with pytest.raises(ParseError) as info:
        parse_flight_recorder(data)
    assert len(str(info.value)) < 400 and "\n" not in str(info.value)


def test_rank_from_filename():
    assert [rank_from_filename(n) for n in ("/tmp/nccl_trace_rank_3", "fr_trace_rank_12.json", "rank_1.pickle",
                                            "dump", "trace_rank_x")] == [3, 12, 1, None, None]


# ------------------------------------------------------------ linear time


def _big_dump(n: int) -> bytes:
    entry = {"record_id": 0, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": 1,
             "profiling_name": "nccl:all_reduce", "input_sizes": [[1024, 1024]], "input_dtypes": ["Float"],
             "state": "completed", "frames": [{"name": "all_reduce", "filename": "/x/c10d.py", "line": 1}] * 4}
    return pickle.dumps({"version": "2.10", "entries": [dict(entry, record_id=i, collective_seq_id=i)
                                                         for i in range(n)]})


def test_dumps_cost_linear_time():
    assert_linear(parse_flight_recorder, _big_dump(2_000), _big_dump(20_000))


def test_hostile_pickles_cost_their_length():
    for unit in (b"(", b"N", b"]", b"\x88", b"K\x01"):
        assert_linear(parse_flight_recorder, unit * 50_000 + b".", unit * 500_000 + b".", what=unit)


def test_comparing_many_ranks_costs_linear_time():
    def make(ranks: int) -> dict[int, FlightRecorderDump]:
        one = _dump(*(_entry(s) for s in range(1, 201)))
        return {r: one for r in range(ranks)}

    assert_linear(compare_ranks, make(20), make(200))


# ------------------------------------------------------------ the analyzers' text

ANALYSES = {
    "corpus/nvrx-fr-attribution-summary-gpu-error-missing-rank-12.txt": ("nvrx", 0, 1, (12,)),
    "corpus/nvrx-fr-attribution-summary-lock-gil-two-missing-ranks.txt": ("nvrx", 0, 2, (10, 15)),
    "corpus/torchfrtrace-verbose-missing-rank-allreduce-2ranks.txt": ("torchfrtrace", 1, 0, (1,)),
    "local/torchfrtrace-2.13-gloo-op-mismatch.txt": ("torchfrtrace", 1, 0, ()),
    "local/torchfrtrace-2.13-gloo-size-mismatch.txt": ("torchfrtrace", 1, 0, ()),
    "local/torchfrtrace-2.13-gloo-skip.txt": ("torchfrtrace", 1, 0, (1,)),
}


def read_analysis(name: str) -> str:
    where, _, file = name.partition("/")
    return ((CORPUS / "flight-recorder") if where == "corpus" else DIR).joinpath(file).read_text()


def test_every_analysis_is_expected_and_the_corpus_is_listed():
    found = sorted([f"corpus/{p.name}" for p in (CORPUS / "flight-recorder").glob("*.txt")]
                   + [f"local/{p.name}" for p in DIR.glob("*.txt")])
    assert found == sorted(ANALYSES)
    sources = (CORPUS / "SOURCES.md").read_text()
    assert all(f"`flight-recorder/{p.name}`" in sources for p in (CORPUS / "flight-recorder").glob("*.txt"))


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_every_analysis_parses(name):
    tool, findings, rows, missing = ANALYSES[name]
    a = parse_fr_analysis(read_analysis(name))
    assert (a.tool, len(a.findings), len(a.attribution), a.missing_ranks) == (tool, findings, rows, missing)
    assert msgspec.json.decode(msgspec.json.encode(a), type=FrAnalysis) == a


def test_torchfrtrace_findings_value_by_value():
    (skip,) = parse_fr_analysis(read_analysis("local/torchfrtrace-2.13-gloo-skip.txt")).findings
    assert (skip.kind, skip.seq, skip.record_id, skip.group, skip.collective, skip.missing_ranks, skip.input_sizes,
            skip.world_size, skip.expected_ranks, skip.state) == (
        "missing-ranks", 5, 4, "0:default_pg", "gloo:all_reduce", (1,), "[[8]]", 2, (0, 1), "scheduled")
    assert skip.frames[0].startswith("all_reduce at /") and skip.frames[-1].startswith("<module> at ")
    assert len(skip.frames) == 4
    size = parse_fr_analysis(read_analysis("local/torchfrtrace-2.13-gloo-size-mismatch.txt"))
    assert size.entries_without_errors == 1
    (error,) = size.findings[0].errors
    assert (error.rank, error.error_type, error.detail) == (
        1, "SIZE_OR_SYNTAX_MISMATCH", "Expected input sizes: '[[3, 4]]' does not match found input sizes: '[[4, 3]]'")
    op = parse_fr_analysis(read_analysis("local/torchfrtrace-2.13-gloo-op-mismatch.txt")).findings[0]
    assert op.kind == "errors" and op.errors[0].error_type == "COLLECTIVE_TYPE_MISMATCH"
    old = parse_fr_analysis(read_analysis("corpus/torchfrtrace-verbose-missing-rank-allreduce-2ranks.txt")).findings[0]
    assert (old.seq, old.entry, old.world_size, old.expected_ranks, old.frames) == (
        3, 2, 2, (), ("<module> at /home/cpio/test/c.py:66",))  # older torchfrtrace printed the count


def test_several_errors_undecided_and_nvrx_rows():
    text = ("Collective sequence number: 9 has errors\ngroup info: 1:tp\ncollective: nccl:all_gather\n"
            "error msg: Culprit rank 2; Error type: COLLECTIVE_DTYPE_MISMATCH, Expected dtypes: '['Float']' does not "
            "match found dtype: '['Half']', Culprit rank 3; Error type: COLLECTIVE_STATE_MISMATCH, Expected state: "
            "'completed' does not match found state: 'scheduled'\n"
            "We cannot decide what's wrong with this collective entry because we missed FR dumps from ranks "
            "({4, 5}) so we don't have enough information. If you want to debug further use -j to dump all raw trace\n"
            "INFO:root:PGID   | Process Group Desc        | Op Type    | Size     | Dtype    | Completed Ranks\n"
            "INFO:root:3      | DATA_PARALLEL_GROUP,1     | nccl:all_reduce | 1024 | Float | 0,1,2\n")
    a = parse_fr_analysis(text)
    errors = a.findings[0].errors
    assert [(e.rank, e.error_type) for e in errors] == [(2, "COLLECTIVE_DTYPE_MISMATCH"), (3, "COLLECTIVE_STATE_MISMATCH")]
    assert errors[0].detail == "Expected dtypes: '['Float']' does not match found dtype: '['Half']'"
    assert (a.findings[1].kind, a.findings[1].ranks_without_dumps) == ("undecided", (4, 5))
    (row,) = a.attribution
    assert (row.pg_id, row.pg_desc, row.op, row.ranks, row.column) == (
        3, "DATA_PARALLEL_GROUP,1", "nccl:all_reduce", (0, 1, 2), "completed")
    assert a.missing_ranks == ()


@pytest.mark.parametrize("text", ["complete garbage\n", "x" * 200_000, "a | b | c\n", "missing ranks: {1}\n"])
def test_analysis_garbage_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_fr_analysis(text)


def test_analysis_costs_linear_time():
    one = read_analysis("local/torchfrtrace-2.13-gloo-skip.txt")
    assert_linear(parse_fr_analysis, one * 1_000, one * 10_000)
    for line in ("error msg: " + "Culprit rank 1; Error type: X, " * 20_000, "collective stack trace: \n" + "a at b" * 50_000,
                 "PGID | a\n" + "1 |" * 50_000):
        head = "Collective sequence number: 1 has errors\n"
        assert_linear(parse_fr_analysis, head + line[: len(line) // 10], head + line, what=line[:30])


def test_the_proposed_tools_entries(monkeypatch):
    """flight-recorder takes bytes: through `parser_for` (text) only its JSON form works."""
    monkeypatch.setitem(TOOLS, "flight-recorder", ("healthcheck.parsers.flight_recorder", "parse_flight_recorder",
                                                   "torch Flight Recorder dump (pickle: read as bytes; or JSON)"))
    monkeypatch.setitem(TOOLS, "flight-recorder-analysis", ("healthcheck.parsers.flight_recorder",
                                                            "parse_fr_analysis",
                                                            "torchfrtrace / NVRx FR attribution output"))
    assert parser_for("flight-recorder")((DIR / "gloo-2.13-skip-rank0.json").read_text()).format == "json"
    assert parser_for("flight-recorder-analysis")(read_analysis("local/torchfrtrace-2.13-gloo-skip.txt")).findings


def test_hc_parse_reads_a_dump_as_bytes_and_refuses_a_malicious_one_with_exit_4(tmp_path):
    import json

    real = FIXTURES / "h100-captures" / "flight-recorder-2.11-nccl-1rank-8-all_reduce.pickle"
    r = run_hc_inproc("parse", "flight-recorder", str(real))
    assert r.returncode == 0, r.stderr
    facts = json.loads(r.stdout)["facts"]
    assert (facts["format"], facts["version"], len(facts["entries"])) == ("pickle", "2.10", 8)

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    evil = tmp_path / "evil.pickle"
    evil.write_bytes(pickle.dumps(Evil()))
    r = run_hc_inproc("parse", "flight-recorder", str(evil))
    assert r.returncode == 4 and not marker.exists()
    assert len(r.stderr.decode().strip().splitlines()) == 1 and b"refused global" in r.stderr


def test_json_with_bytes_that_are_not_utf8_in_a_string_is_a_parse_error():
    """msgspec raises UnicodeDecodeError there, not its DecodeError: `hc parse flight-recorder`
    said "internal error", exit 3."""
    with pytest.raises(ParseError, match="not UTF-8"):
        parse_flight_recorder(b'{"version": "2.4", "pg_config": {"x\xff": 1}, "entries": []}')


NVRX_DUMP = FIXTURES / "field" / "repos" / "flight-recorder" / "nvrx-lock-gil-1st-rank3.pickle"


def test_an_older_dumps_nccl_version_key_is_surfaced_and_the_pickle_still_runs_nothing(monkeypatch):
    """NVRx's "2.9" dumps (field corpus, tuning) name NCCL's version `nccl_version`, not
    `comm_lib_version`: it was dropped. Read as data: no global may be looked up."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("a global was looked up")

    monkeypatch.setattr(pickle, "Unpickler", None)  # the restricted unpickler is bound at import, not looked up
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    d = parse_flight_recorder(NVRX_DUMP.read_bytes())
    assert d.version == "2.9"
    assert d.nccl_version == d.comm_lib_version == "2.27.3"
    assert "nccl" in d.backends


def test_a_newer_dump_names_its_nccl_version_from_comm_lib_and_gloo_none():
    assert parse_flight_recorder(H100.read_bytes()).nccl_version == "2.28.9"
    gloo = parse_flight_recorder((DIR / "gloo-2.13-skip-rank0.pickle").read_bytes())
    assert gloo.nccl_version == "" and gloo.comm_lib_version == ""
