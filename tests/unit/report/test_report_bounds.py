"""Saved reports as hostile input to every command that reads one (report show, diff, html,
tickets; baseline): nesting without end and a started_at that is no time are one line and
exit 4, never a RecursionError, and runs are ordered by time, not by their text."""

from __future__ import annotations

import datetime as dt
import json
import subprocess

import msgspec
import pytest
from support import assert_linear, run_hc

from healthcheck.core.errors import HcError
from healthcheck.core.model import Finding, NodeResult, Report
from healthcheck.core.status import Status
from healthcheck.core.typed import MAX_DEPTH, TooDeep, check_depth, decode_json
from healthcheck.report.build import make_report
from healthcheck.report.diff import diff
from healthcheck.report.jsonio import decode, encode, parse_time
from healthcheck.report.tickets import decode_run

T0 = dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.timezone.utc)

# every command that reads a saved report, {r} the report
READERS = {
    "show": ["report", "show", "{r}"],
    "diff": ["report", "diff", "{r}", "{r}"],
    "html": ["report", "html", "{r}", "-o", "{tmp}/page.html"],
    "tickets": ["report", "tickets", "{r}", "--no-webhook"],
    "baseline": ["baseline", "--fabric", "h100-ndr400", "-o", "{tmp}/learned.yaml", "{r}"],
}


def report(k: int = 0, value: object = None, started_at: str | None = None) -> Report:
    start = T0 + dt.timedelta(hours=k)
    finding = Finding(id="ib.E002", status=Status.FAIL, message="down", component="mlx5_0/1", node="gpu01",
                      check="ib.ports", subject="gpu01:mlx5_0/1", value=value)
    made = make_report(command="sweep", tier="quick", config_digest="sha256:" + "0" * 64, config_path="/x",
                       started=start, finished=start,
                       nodes=[NodeResult(node="gpu01", fabric="f", status=Status.FAIL, findings=[finding])])
    return msgspec.structs.replace(made, started_at=started_at) if started_at is not None else made


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def with_value(raw: str) -> bytes:
    """A report whose one finding's value is `raw` JSON (msgspec decodes it as Any)."""
    doc = json.loads(encode(report(value="PLACEHOLDER")))
    return json.dumps(doc).replace('"PLACEHOLDER"', raw).encode()


def assert_one_line_exit_4(r: subprocess.CompletedProcess, meaning: str) -> str:
    err = r.stderr.decode()
    assert r.returncode == 4, (r.returncode, err[-500:])
    assert err.startswith("hc: error: ") and err.count("\n") == 1, err[-500:]
    assert "Traceback" not in err and "RecursionError" not in err and "internal error" not in err, err[-500:]
    assert meaning in err, err
    return err


def run_reader(reader: str, tmp_path, content: bytes) -> subprocess.CompletedProcess:
    path = tmp_path / "r.json"
    path.write_bytes(content)
    cfg = tmp_path / "hc.yaml"  # no history anywhere near the machine's
    cfg.write_text(f"default_fabric: h100-ndr400\nhistory: {{path: {tmp_path}/history.sqlite}}\n")
    return run_hc(*[a.format(r=path, tmp=tmp_path) for a in READERS[reader]], env={"HC_CONFIG": str(cfg)})


# ------------------------------------------------------------------------ nesting


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("content", [
    b'{"schema": "hc.report/2", "nodes": ' + b"[" * 100_000,  # as the issue found it: never closed
    with_value(nested(100_000)),  # well formed, in a field of any type
], ids=["open", "closed"])
def test_a_report_nested_100000_deep_is_one_line_and_exit_4_in_every_reader(tmp_path, reader, content):
    assert_one_line_exit_4(run_reader(reader, tmp_path, content), f"nested deeper than {MAX_DEPTH} levels")


@pytest.mark.parametrize("reader", READERS)
def test_a_report_with_bytes_that_are_not_utf8_in_a_string_is_one_line_and_exit_4(tmp_path, reader):
    """msgspec raises UnicodeDecodeError (not its DecodeError) for such bytes inside a string:
    every reader said "internal error", exit 3. typed.decode_json makes it a DecodeError."""
    content = with_value('"gpu-x"').replace(b'"gpu-x"', b'"gpu\xff\xfe"')
    assert b'"gpu\xff\xfe"' in content
    assert_one_line_exit_4(run_reader(reader, tmp_path, content), "not UTF-8")


def test_every_typed_decode_refuses_bytes_that_are_not_utf8_as_a_decode_error():
    from healthcheck.core.typed import NotUtf8

    for data in (b'{"a": "x\xff"}', b'["\xc3("]', b'{"\xff": 1}'):
        with pytest.raises(NotUtf8, match=r"JSON is not UTF-8 \(byte \d+"):
            decode_json(data, dict if data[:1] == b"{" else list)
    assert issubclass(NotUtf8, msgspec.DecodeError)
    with pytest.raises(HcError, match="not UTF-8"):
        decode_run(b'{"schema": "hc.report/2", "run_id": "\xff"}', "history run x")


def test_nesting_is_bounded_for_every_decode_and_counted_right():
    assert decode(with_value(nested(40))).nodes[0].findings[0].value is not None  # deep, within the bound
    with pytest.raises(HcError, match="nested deeper"):
        decode(with_value(nested(MAX_DEPTH)))  # the report's own levels come on top
    with pytest.raises(HcError, match="nested deeper"):
        decode_run(with_value(nested(100_000)), "history run x")
    with pytest.raises(TooDeep):  # a msgspec.DecodeError: every caller's one-line path
        decode_json(b"[" * 100_000, list)
    assert issubclass(TooDeep, msgspec.DecodeError)
    for ok in (nested(MAX_DEPTH), json.dumps({"s": "[" * 1000, "e": '\\"[[[' + "\\\\" * 3}),
               '{"a": [' * 30 + "1" + "]}" * 30, "]" * 100_000, "[" * MAX_DEPTH):
        check_depth(ok)  # brackets in strings and escapes do not count; unbalanced ones are the decoder's
    for bad in (nested(MAX_DEPTH + 1), '{"a": [' * 33 + "1" + "]}" * 33, "[[]" * (MAX_DEPTH + 1)):
        with pytest.raises(TooDeep):
            check_depth(bad)


def test_the_depth_check_is_linear():
    def doc(n: int) -> bytes:
        node = {"node": "gpu[01]", "evidence": "x [1] {2} \\ \" " * 4, "m": [[1, 2], {"a": [3]}]}
        return json.dumps({"nodes": [node] * n, "deep": json.loads(nested(MAX_DEPTH - 2))}).encode()

    def measure(data: bytes) -> None:
        try:
            check_depth(data)
        except TooDeep:
            pass

    assert_linear(measure, doc(20_000), doc(200_000), what="a report-like document")
    assert_linear(measure, b"[" * 200_000, b"[" * 2_000_000, what="open brackets")
    assert_linear(measure, b"[[]" * 100_000, b"[[]" * 1_000_000, what="nesting that never closes")
    assert_linear(measure, nested(MAX_DEPTH).encode() * 5_000, nested(MAX_DEPTH).encode() * 50_000,
                  what="as deep as allowed, many times")


# --------------------------------------------------------------------- started_at


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("started_at", ["not a time", "", "2026-13-01T00:00:00Z", "2026-11-22T03:00:00Z\n;x"])
def test_a_started_at_that_is_no_time_is_one_line_and_exit_4_in_every_reader(tmp_path, reader, started_at):
    err = assert_one_line_exit_4(run_reader(reader, tmp_path, encode(report(started_at=started_at))), "started_at")
    assert "not a timestamp" in err


def test_a_history_run_with_a_started_at_that_is_no_time_is_refused():
    with pytest.raises(HcError, match="started_at 'yesterday' is not a timestamp"):
        decode_run(encode(report(started_at="yesterday")), "history run x")


def test_runs_are_ordered_by_time_whatever_offset_they_are_written_in():
    early = report(0, started_at="2026-11-22T10:00:00+09:00")  # 01:00Z: sorts after "2026-11-22T02..." as text
    late = report(1, started_at="2026-11-22T02:00:00.5Z")
    for given in ((early, late), (late, early)):
        d = diff(*(decode(encode(r)) for r in given))
        assert (d.old.started_at, d.new.started_at) == (early.started_at, late.started_at)
        assert d.swapped is (given[0] is late)
    assert parse_time("2026-11-22T03:00:00.123Z") == dt.datetime(2026, 11, 22, 3, 0, 0, 123000, dt.timezone.utc)
    assert parse_time("2026-11-22 03:00") == dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.timezone.utc)
    assert parse_time("2026-11-22T03:00:00-0130").utcoffset() == -dt.timedelta(hours=1, minutes=30)
    for bad in ("not a time", "2026-02-30T00:00:00Z", "2026-11-22T03:00:00+25:00", "2026-11-22", "1" * 10_000):
        assert parse_time(bad) is None, bad
