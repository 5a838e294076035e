"""parsers/pickle_bounds.py: a pickle that states a memo index or a size CPython's C
unpickler would allocate by is refused before the unpickler runs; every pickle a pickler
writes (torch's real dumps, Python's at every protocol) passes and parses as before."""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import subprocess
import sys
import tracemalloc
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import FIXTURES, REPO

from healthcheck.core.errors import ParseError
from healthcheck.parsers import flight_recorder as fr
from healthcheck.parsers.pickle_bounds import check_bounds

# Every Flight Recorder pickle hc's tests read, save the held-out field dump
# (field/repos/facts.yaml: nvrx-gpu-error-1st-rank0-peer is held-out, not read here)
REAL_DUMPS = sorted([
    *(FIXTURES / "flight-recorder").glob("*.pickle"),
    FIXTURES / "h100-captures" / "flight-recorder-2.11-nccl-1rank-8-all_reduce.pickle",
    FIXTURES / "h100-captures" / "nccl-watchdog-timeout-1rank" / "nccl_trace_rank_0",
    *(FIXTURES / "diagnose").glob("*/nccl_trace_rank_*"),
    FIXTURES / "field" / "repos" / "flight-recorder" / "nvrx-gpu-error-1st-rank12-faulted.pickle",
    FIXTURES / "field" / "repos" / "flight-recorder" / "nvrx-lock-gil-1st-rank3.pickle",
])
REAL = FIXTURES / "h100-captures" / "flight-recorder-2.11-nccl-1rank-8-all_reduce.pickle"


def _u4(n: int) -> bytes:
    return n.to_bytes(4, "little")


def _u8(n: int) -> bytes:
    return n.to_bytes(8, "little")


# input -> the opcode refused. What each cost hc before the check (peak RSS / address space
# of `hc parse flight-recorder`, Python 3.11's C unpickler): see the report of this change.
HOSTILE = {
    # found by tests/unit/parsers/test_parsers_fuzz.py: SHORT_BINBYTES of 65 bytes, then
    # LONG_BINPUT 170,991,732 ("t 1\n"): the memo grown to 342 M entries, 2.7 GB touched
    "fuzz-ibstat-perfquery-text": (b"CA 'mlx5_0'\n# Port counters: Lid 1 port 1\n# Port counters: Lid 1 port 1\n",
                                   "LONG_BINPUT"),
    "put-text-index": (b"Np200000000\n.", "PUT"),  # 13 bytes: 3 GB touched, 12 s
    "long-binput-index": (b"\x80\x02Nr" + _u4(100_000_000) + b".", "LONG_BINPUT"),  # 1.6 GB
    "long-binput-index-max": (b"\x80\x02Nr" + _u4(0xFFFFFFFF) + b".", "LONG_BINPUT"),  # 64 GB asked
    "binput-past-the-stores": (b"\x80\x02Nq\x05.", "BINPUT"),
    "put-after-stores": (b"\x80\x02Nq\x00Nq\x01Np7\n.", "PUT"),
    "binbytes-size": (b"\x80\x03B" + _u4(0xFFFFFFFF) + b"abc.", "BINBYTES"),  # 4 GB reserved
    "binbytes8-size": (b"\x80\x04\x8e" + _u8(8 << 30) + b"abc.", "BINBYTES8"),  # 8 GB reserved
    "bytearray8-size": (b"\x80\x05\x96" + _u8(8 << 30) + b"abc.", "BYTEARRAY8"),
    "binunicode8-size": (b"\x80\x04\x8d" + _u8(1 << 40) + b"abc.", "BINUNICODE8"),
    "binunicode-size": (b"\x80\x02X" + _u4(0xFFFFFFFF) + b"abc.", "BINUNICODE"),
    "binstring-negative": (b"T" + (-5).to_bytes(4, "little", signed=True) + b"abc.", "BINSTRING"),
    "long4-size": (b"\x80\x02\x8b" + _u4(0x7FFFFFFF) + b".", "LONG4"),
    "frame-size": (b"\x80\x04\x95" + _u8(1 << 40) + b"N.", "FRAME"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_stated_index_or_size_beyond_the_input_is_refused_naming_its_opcode(name):
    data, opcode = HOSTILE[name]
    with pytest.raises(pickle.UnpicklingError, match=rf"^{opcode} at byte \d+ "):
        check_bounds(data)
    with pytest.raises(ParseError) as info:
        fr.parse_flight_recorder(data)
    message = str(info.value)
    assert opcode in message and "\n" not in message and len(message) < 400


@pytest.mark.parametrize("protocol", [4, 5])
def test_a_dump_holding_a_set_is_refused_before_it_is_built(protocol):
    """torch's pickler writes no set; EMPTY_SET builds 216 bytes from one."""
    for held in ({1, 2}, frozenset({1})):
        data = pickle.dumps({"version": "2.10", "entries": [], "pg_config": {"0": {"ranks": held}}}, protocol=protocol)
        with pytest.raises(ParseError, match="(EMPTY_SET|FROZENSET) at byte"):
            fr.parse_flight_recorder(data)
        check_bounds(data)  # a refusal the Flight Recorder asks for, not the rule for every pickle
    with pytest.raises(pickle.UnpicklingError, match="ADDITEMS at byte 4 builds what"):
        check_bounds(b"\x80\x04N(\x90.", refused=("ADDITEMS",))


def _facts(path: Path) -> bytes:
    return msgspec.json.encode(fr.parse_flight_recorder(path.read_bytes()))


@pytest.mark.parametrize("path", REAL_DUMPS, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_every_real_dump_passes_and_parses_to_the_same_facts_as_without_the_check(path, monkeypatch):
    data = path.read_bytes()
    check_bounds(data)
    checked = _facts(path)
    monkeypatch.setattr(fr, "check_bounds", lambda data, refused=(): None)
    assert checked == _facts(path)


def test_the_real_dumps_are_all_there():
    assert all(p.is_file() for p in REAL_DUMPS) and len(REAL_DUMPS) >= 25


_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=300)
    | st.binary(max_size=300),
    lambda inner: st.lists(inner, max_size=6) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=8), inner,
                                                                                           max_size=6),
    max_leaves=60,
)


@settings(max_examples=200, deadline=None)
@given(obj=_PLAIN, protocol=st.integers(0, pickle.HIGHEST_PROTOCOL), shared=st.booleans())
def test_every_pickle_python_writes_passes(obj, protocol, shared):
    """Memo stores numbered 0, 1, 2... and counts that fit: whatever the protocol, shared
    references (BINGET) and frames included."""
    data = pickle.dumps([obj, obj, [obj]] if shared else obj, protocol=protocol)
    check_bounds(data)
    check_bounds(pickletools.optimize(data))  # fewer stores, renumbered


def test_many_memo_stores_take_the_four_byte_form_and_pass():
    strings = [f"s{i}" for i in range(70_000)]  # past 256 stores: LONG_BINPUT; past 65,536 too
    for protocol in (1, 2, 3):
        check_bounds(pickle.dumps(strings, protocol=protocol))


# ------------------------------------------------------------ opcode streams, fuzzed


def _counted(code: bytes, width: int, payload: bytes, stated: int) -> bytes:
    return code + stated.to_bytes(width, "little") + payload


_BIG = st.one_of(st.integers(0, 300), st.integers(0, 2**32 - 1), st.sampled_from([255, 256, 65_536, 2**31, 2**32 - 1]))


@st.composite
def _op(draw: st.DrawFn) -> bytes:
    """One opcode with its argument: a plain push, a memo store or lookup whose index may
    be anything, or a counted opcode whose count may be its payload's or anything."""
    kind = draw(st.sampled_from(["push", "memo", "get", "counted", "frame"]))
    if kind == "push":
        return draw(st.sampled_from([b"N", b"]", b"}", b"(", b"e", b"0", b"K\x07", b"\x88", b")", b"\x94"]))
    if kind == "memo":
        index = draw(_BIG)
        form = draw(st.sampled_from(["q", "r", "p"]))
        if form == "q":
            return b"q" + bytes([index % 256])
        return b"r" + _u4(index) if form == "r" else b"p" + str(index).encode() + b"\n"
    if kind == "get":
        index = draw(_BIG)
        return b"h" + bytes([index % 256]) if draw(st.booleans()) else b"j" + _u4(index)
    if kind == "frame":  # a frame of NONEs, its length stated or anything past it
        payload = b"N" * draw(st.integers(0, 8))
        return b"\x95" + _u8(len(payload) + draw(st.sampled_from([0, 0, 1, 2**32, 2**40]))) + payload
    code, width = draw(st.sampled_from([(b"C", 1), (b"\x8c", 1), (b"B", 4), (b"X", 4), (b"\x8b", 4),
                                        (b"\x8e", 8), (b"\x8d", 8), (b"\x96", 8)]))
    payload = draw(st.binary(max_size=20)) if code in (b"C", b"B", b"\x8e", b"\x96") else b"1" * draw(
        st.integers(0, 20))  # text and LONG4 payloads that decode: only the count is on trial
    # the count as written, or past the whole stream (a 1-byte count cannot be: never
    # past the payload alone, which would read the opcodes after it out of step)
    over = 0 if width == 1 else draw(st.one_of(st.just(0), st.integers(65_536, 2**64)))
    return _counted(code, width, payload, min(len(payload) + over, (1 << (8 * width)) - 1))


def _genops_says_bounded(data: bytes) -> bool:
    """The same rule read by pickletools' own reader: every memo index at most the stores
    before it, every count and frame within the bytes after it (genops raises ValueError
    on a count that overruns, a missing STOP, a byte that is no opcode)."""
    stores = 0
    try:
        for op, arg, pos in pickletools.genops(data):
            if op.name in ("PUT", "BINPUT", "LONG_BINPUT"):
                if arg > stores:
                    return False
                stores += 1
            elif op.name == "MEMOIZE":
                stores += 1
            elif op.name == "FRAME" and arg > len(data) - pos - 9:
                return False
    except ValueError:
        return False
    return True


def _unpickle_peak(data: bytes) -> int:
    """Bytes the C unpickler held at its peak (tracemalloc sees its memo and stack: PyMem)."""
    tracemalloc.start()
    try:
        pickle.Unpickler(io.BytesIO(data)).load()  # plain data only: _op names no global
    except Exception:  # a stream may underflow its stack, miss a memo key...
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


@settings(max_examples=400, deadline=None)
@given(ops=st.lists(_op(), max_size=40))
def test_fuzzed_opcode_streams_are_refused_exactly_when_a_number_outgrows_them(ops):
    """check_bounds agrees with pickletools' reader on every stream; one it accepts costs
    the unpickler memory by its length (against `N.`'s cost, measured here)."""
    data = b"\x80\x05" + b"".join(ops) + b"."
    try:
        check_bounds(data)
        accepted = True
    except pickle.UnpicklingError:
        accepted = False
    assert accepted == _genops_says_bounded(data), data
    if accepted:
        assert _unpickle_peak(data) <= _unpickle_peak(b"N.") + 256 * len(data), data


# ------------------------------------------------------------ the bound, measured


# `hc parse` with its peak resident and address-space sizes written at exit
_MEASURED = r"""
import atexit, runpy, sys
out = sys.argv.pop(1)
def peaks():
    with open("/proc/self/status") as status, open(out, "w") as f:
        f.write("".join(line for line in status if line.startswith(("VmPeak:", "VmHWM:"))))
atexit.register(peaks)
sys.argv[0] = "hc"
runpy.run_module("healthcheck", run_name="__main__", alter_sys=True)
"""


def _hc_parse_peaks(path: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict[str, int]]:
    out = tmp_path / f"peaks-{path.name}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM"))}
    r = subprocess.run([sys.executable, "-c", _MEASURED, str(out), "parse", "flight-recorder", str(path)],
                       capture_output=True, env=env, cwd=REPO, timeout=120)
    peaks = {}
    for line in out.read_text().splitlines():
        key, _, value = line.partition(":")
        peaks[key] = int(value.split()[0])
    return r, peaks


def _real_dump_at(size: int) -> bytes:
    """The real H100 dump with its entries repeated (each its own record) to `size` bytes."""
    doc = pickle.loads(REAL.read_bytes())  # a fixture of this repository: plain data
    entries, data = doc["entries"], b""
    count = len(entries)
    while len(data) < size:
        count *= 2
        data = pickle.dumps(dict(doc, entries=[dict(entries[i % len(entries)], record_id=i) for i in range(count)]),
                            protocol=2)
    return data


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status")
def test_a_flood_of_sets_peaks_no_higher_than_a_real_dump_of_its_length(tmp_path):
    """A megabyte of EMPTY_SET built ~240x its length in sets (1 MB: 260 MB resident) where
    a real dump's objects are ~40x; refused unbuilt, it costs what a refusal costs."""
    real = tmp_path / "real-at-scale.pickle"
    real.write_bytes(_real_dump_at(1_000_000))
    flood = tmp_path / "sets.pickle"
    flood.write_bytes(b"\x80\x04" + b"\x8f" * real.stat().st_size + b".")
    r, real_peaks = _hc_parse_peaks(real, tmp_path)
    assert r.returncode == 0, r.stderr
    r, peaks = _hc_parse_peaks(flood, tmp_path)
    assert peaks["VmHWM"] <= real_peaks["VmHWM"], (peaks, real_peaks)
    assert r.returncode == 4 and b"EMPTY_SET" in r.stderr, r.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status")
def test_hc_parse_on_each_hostile_input_peaks_no_higher_than_on_a_real_dump(tmp_path):
    """Resident and address-space peaks of `hc parse flight-recorder` on each hostile input,
    against the same command on a real dump in the same test (no absolute size): a refused
    input may not cost more than a dump that is read. Before the check the 72-byte fuzz
    find peaked at ~100x the real dump's resident size, BINBYTES8's 8 GB at ~250x its
    address space."""
    real, real_peaks = _hc_parse_peaks(REAL, tmp_path)
    assert real.returncode == 0, real.stderr
    for name, (data, opcode) in sorted(HOSTILE.items()):
        path = tmp_path / f"{name}.pickle"
        path.write_bytes(data)
        r, peaks = _hc_parse_peaks(path, tmp_path)
        err = r.stderr.decode()
        assert r.returncode == 4 and err.count("\n") == 1 and opcode in err, (name, r.returncode, err[-300:])
        for key in ("VmHWM", "VmPeak"):
            assert peaks[key] <= 1.25 * real_peaks[key], (name, key, peaks[key], real_peaks[key])
