"""`hc parse` and the parsers on input that is empty, garbage, endless, deeply nested or
not a file: always a one-line error and exit 4, never a hang, a traceback or exit 3."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading

import pytest
from support import CORPUS, REPO, run_hc, run_hc_inproc

from healthcheck.core.errors import HcError, ParseError
from healthcheck.core.inputs import (
    TOOL_OUTPUT_MAX_BYTES,
    InputNotFound,
    InputTooLarge,
    clip,
    read_bounded,
    read_stream_bounded,
)
from healthcheck.parsers import TOOLS, parser_for

GARBAGE = ["complete garbage\n", "x" * 200_000, "\n\n\n", ":" * 1000 + "\n", "{", "[" * 100_000]


def assert_one_line_exit_4(r: subprocess.CompletedProcess) -> str:
    err = r.stderr.decode()
    assert r.returncode == 4, (r.returncode, err[-500:])
    assert err.startswith("hc: error: ") and err.count("\n") == 1 and "Traceback" not in err, err[-500:]
    assert len(err) < 400, err[:500]  # echoed input is clipped
    return err


# ------------------------------------------------------------ every tool alike


@pytest.mark.parametrize("tool", sorted(TOOLS))
@pytest.mark.parametrize("text", ["", " \n\t\n", "\n"], ids=["empty", "blank", "newline"])
def test_empty_input_is_a_parse_error_for_every_tool(tool, text):
    with pytest.raises(ParseError, match="empty input"):
        parser_for(tool)(text)


# Every tool in process (hc's own entry point, the same exit code and stderr:
# tests/unit/suite/test_inproc_parity.py); one real `hc` per contract below it
@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_empty_input_exits_4_for_every_tool(tool):
    err = assert_one_line_exit_4(run_hc_inproc("parse", tool, "-", input=b""))
    assert "empty input" in err


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_garbage_exits_4_for_every_tool(tool):
    assert_one_line_exit_4(run_hc_inproc("parse", tool, "-", input=b"complete garbage\n" + b"x" * 100_000))


def test_a_real_hc_exits_4_on_empty_input_and_on_garbage():
    assert "empty input" in assert_one_line_exit_4(run_hc("parse", "nvidia-smi-q", "-", input=b""))
    assert_one_line_exit_4(run_hc("parse", "ibstat", "-", input=b"complete garbage\n" + b"x" * 100_000))


@pytest.mark.parametrize("tool", sorted(TOOLS))
@pytest.mark.parametrize("text", GARBAGE, ids=["words", "long-line", "newlines", "colons", "brace", "deep-brackets"])
def test_garbage_is_a_short_parse_error(tool, text):
    """Facts or ParseError, nothing else; a message never echoes more than a clip of it."""
    try:
        parser_for(tool)(text)
    except ParseError as exc:
        assert len(str(exc)) < 400 and "\n" not in str(exc)


# Well-formed lines holding numbers of 5,000 digits: int() refuses more than 4,300
# (ValueError), so each must read as "not a number" or be a ParseError.
HUGE = "9" * 5000
HUGE_NUMBERS = {
    "ibstat-port": ("ibstat", f"CA 'mlx5_0'\n\tPort {HUGE}:\n\t\tState: Active\n"),
    "ibstat-state": ("ibstat", f"CA 'mlx5_0'\n\tPort 1:\n\t\tState: {HUGE}: ACTIVE\n\t\tBase lid: {HUGE}\n"),
    "ibstatus-port": ("ibstatus", f"Infiniband device 'mlx5_0' port {HUGE} status:\n\tstate:\t 4: ACTIVE\n"),
    "ibstatus-state": ("ibstatus", f"Infiniband device 'mlx5_0' port 1 status:\n\tstate:\t {HUGE}: ACTIVE\n"),
    "perfquery-lid": ("perfquery", f"# Port counters: Lid {HUGE} port 1\nSymbolErrorCounter:....1\n"),
    "perfquery-value": ("perfquery", f"# Port counters: Lid 1 port 1\nSymbolErrorCounter:....{HUGE}\n"),
    "ip-link-index": ("ip-link", f"{HUGE}: eth0: <UP> mtu 1500 state UP\n    link/ether x\n"),
    "ip-link-mtu": ("ip-link", f"1: eth0: <UP> mtu {HUGE} state UP\n    link/ether x\n"),
    "ip-link-json-mtu": ("ip-link", f'[{{"ifname": "eth0", "mtu": "{HUGE}", "ifindex": "²"}}]'),
    "ip-link-json-int": ("ip-link", f'[{{"ifname": "eth0", "mtu": {HUGE}}}]'),
    "smi-q-memory": ("nvidia-smi-q", (
        "GPU 00000000:19:00.0\n    Product Name : X\n    PCI\n        Bus Id : 00000000:19:00.0\n"
        f"    FB Memory Usage\n        Total : {HUGE} MiB\n    PCI\n        Link Width\n            Max : {HUGE}x\n"
    )),
    "smi-q-lost": ("nvidia-smi-q", f"Unable to determine the device handle for GPU{HUGE}: Unknown Error\n"),
    "smi-q-lost-pci": ("nvidia-smi-q", f"Unable to determine the device handle for GPU{HUGE}: 0000:19:00.0: Unknown Error\n"),
    "query-index": ("nvidia-smi-query-gpu", f"index, pci.bus_id, memory.total [MiB]\n{HUGE}, 00000000:19:00.0, {HUGE} MiB\n"),
    "nvlink-link": ("nvidia-smi-nvlink", f"GPU 0: X (UUID: GPU-1)\n\t Link {HUGE}: 26.5 GB/s\n"),
    "topo-row": ("nvidia-smi-topo", f"\tGPU0\tGPU{HUGE}\nGPU0\t X \tNV18\n"),
    "hostfile": ("hostfile", f"gpu[1-{HUGE}]\n"),
}


@pytest.mark.parametrize("case", sorted(HUGE_NUMBERS))
def test_huge_numbers_are_not_a_crash(case):
    tool, text = HUGE_NUMBERS[case]
    try:
        parser_for(tool)(text)
    except ParseError as exc:
        assert len(str(exc)) < 400


def test_deeply_nested_json_exits_4_not_3():
    err = assert_one_line_exit_4(run_hc("parse", "ip-link", "-", input=b"[" * 100_000))
    assert "nested too deeply" in err


@pytest.mark.parametrize("line", ["ibwarn: " + "x" * 1_000_000, "iberror: " + "y" * 1_000_000], ids=["ibwarn", "iberror"])
def test_perfquery_error_lines_are_clipped(line):
    with pytest.raises(ParseError) as info:
        parser_for("perfquery")("# Port counters: Lid 1 port 1\n" + line + "\n")
    assert len(str(info.value)) < 200


# ------------------------------------------------------------ where input comes from


def test_no_file_on_a_terminal_is_a_usage_error_not_a_wait():
    """`hc parse ibstat` typed at a prompt used to wait silently for stdin."""
    controller, terminal = pty.openpty()
    try:
        r = subprocess.run([sys.executable, "-m", "healthcheck", "parse", "ibstat"], stdin=terminal,
                           capture_output=True, timeout=30, cwd=REPO, check=False)
    finally:
        os.close(terminal)
        os.close(controller)
    err = assert_one_line_exit_4(r)
    assert "give the file" in err and "or - to read stdin" in err


def test_no_file_with_piped_stdin_reads_it():
    r = run_hc("parse", "ibstat", input=(CORPUS / "ibstat/a100-ib-hdr200-all-active.txt").read_bytes())
    assert r.returncode == 0 and len(json.loads(r.stdout)["facts"]["ports"]) == 9


def test_dev_zero_as_file_is_refused():
    err = assert_one_line_exit_4(run_hc("parse", "xid", "/dev/zero"))
    assert "character device" in err


def test_dev_zero_on_stdin_is_capped():
    with open("/dev/zero", "rb") as zero:
        r = subprocess.run([sys.executable, "-m", "healthcheck", "parse", "ibstat", "-"], stdin=zero,
                           capture_output=True, timeout=60, cwd=REPO, check=False)
    err = assert_one_line_exit_4(r)
    assert f"larger than the {TOOL_OUTPUT_MAX_BYTES} bytes" in err


def test_a_pipe_named_as_file_is_read(tmp_path):
    """`hc parse ibstat <(ibstat)`: the shell passes a pipe; it is read, capped."""
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    text = (CORPUS / "ibstat/a100-ib-hdr200-all-active.txt").read_bytes()

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(text)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    r = run_hc("parse", "ibstat", str(fifo), timeout=30)
    writer.join(5)
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["facts"]["ports"]) == 9


def test_an_oversized_file_is_refused(tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(TOOL_OUTPUT_MAX_BYTES + 1)  # sparse: no disk, no time
    err = assert_one_line_exit_4(run_hc("parse", "ibstat", str(big)))
    assert "more than the" in err


# ------------------------------------------------------------ the helpers


def test_read_bounded_refuses_what_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(HcError, match="it is a FIFO"):
        read_bounded(fifo, 100)
    assert read_bounded(fifo, 100, allow_fifo=True) == b""  # no writer: end of file, no wait
    with pytest.raises(HcError, match="character device"):
        read_bounded("/dev/zero", 100, allow_fifo=True)
    with pytest.raises(InputTooLarge):
        read_bounded("/dev/zero", 100, regular_only=False)
    with pytest.raises(InputNotFound):
        read_bounded(tmp_path / "missing", 100)


def test_read_stream_bounded_stops_past_the_cap():
    with open("/dev/zero", "rb") as zero, pytest.raises(InputTooLarge, match="larger than the 4096 bytes"):
        read_stream_bounded(zero, 4096)


def test_clip():
    assert clip("short") == "short"
    assert clip("a\nb") == "a\\nb"
    long = clip("x" * 1000, 10)
    assert long.startswith("x" * 10) and long.endswith("(1000 characters)")
