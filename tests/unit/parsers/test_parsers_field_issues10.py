"""The mechanisms behind held-out-10's misses (issue 20's twelfth round), each on the real
file and on real lines of other fixtures (a transformation says so): an NCCL error whose
lines a terminal collapsed into one, its line breaks become runs of blanks
(lines.uncollapsed); `--format=csv,noheader` output read with the field list of the
`--query-gpu=` command line pasted with it.
"""

from __future__ import annotations

import msgspec
import pytest
from support import CORPUS, FIXTURES, assert_linear

from healthcheck.core.errors import ParseError
from healthcheck.parsers import parser_for
from healthcheck.parsers.lines import collapsed_pieces
from healthcheck.parsers.nvidia_smi_query import command_fields, parse_nvidia_smi_query
from healthcheck.parsers.torch_log import parse_torch_log
from healthcheck.parsers.torch_log.reader import COLLAPSED_LINES

FIELD10 = FIXTURES / "field" / "issues-10"
COLLAPSED = FIELD10 / "torch-log" / "distbackenderror-collapsed-one-line-space-padded-remote-error-vendor-249.txt"
NET_CLOSED = CORPUS / "torch-nccl-error" / "distbackenderror-internal-error-nccl-2.14.3-net-connection-closed.txt"
NOHEADER = FIELD10 / "nvidia-smi-query-gpu" / "noheader-name-and-pci-device-id-h100-nvl.txt"
ALL_FIELDS = CORPUS / "nvidia-smi-query-gpu" / "h100-590-all-fields-idle.txt"
CUDA_999 = CORPUS / "torch-nccl-error" / "distbackenderror-nccl-2.26.2-unhandled-cuda-error-999-unknown.txt"


def _errors(text: str) -> list[dict]:
    """The backend errors as plain data, without their line numbers."""
    return [{k: v for k, v in msgspec.to_builtins(e).items() if k != "line"}
            for e in parse_torch_log(text).backend_errors]


# ---------------------------------------------------------------- lines collapsed into one


def test_a_distbackenderror_collapsed_onto_one_line_reads_its_nccl_result_and_last_error():
    """The real paste (DeepEP issue 106): torch's DistBackendError on one line, each line
    break become a run of blanks (2 before `ncclRemoteError:`, 55 before `Last error:`)."""
    text = COLLAPSED.read_text()
    assert "NCCL version 2.20.5  ncclRemoteError: A call failed" in text
    [error] = parse_torch_log(text).backend_errors
    assert (error.kind, error.nccl_version, error.nccl_error) == ("nccl", "2.20.5", "ncclRemoteError")
    assert error.reason == "remote process exited or there was a network error"
    assert error.detail.startswith("A call failed possibly due to a network error")
    assert error.last_error.startswith("NET/IB : Got completion from peer 172.21.17.89<38536> with error 5")
    assert error.last_error.endswith("vendor err 249")
    assert (error.peer, error.port) == ("172.21.17.89", 38536)


def test_the_peer_nccls_last_error_names_is_the_errors_peer():
    """NCCL's last error names the far end (`Connection closed by remote peer user<50260>`,
    a real DistBackendError; the IB completion error above): its address and port."""
    [error] = parse_torch_log(NET_CLOSED.read_text()).backend_errors
    assert (error.last_error, error.peer, error.port) == (
        "Net : Connection closed by remote peer user<50260>", "user", 50260)
    [cuda] = parse_torch_log(CUDA_999.read_text()).backend_errors
    assert cuda.last_error and (cuda.peer, cuda.port) == ("", None)  # no peer named: none


@pytest.mark.parametrize("path", [NET_CLOSED, CUDA_999])
def test_a_real_nccl_error_collapsed_by_a_terminal_reads_as_its_lines(path):
    """A real multi-line NCCL error, each line padded with blanks to a terminal's 160
    columns and the line breaks taken out (the transformation), reads as the lines did."""
    text = path.read_text()
    collapsed = "".join(line.ljust(160) if len(line) < 158 else line + "  " for line in text.splitlines()) + "\n"
    assert "\n" not in collapsed.rstrip("\n")
    expected = _errors(text)
    assert expected and any(e.get("nccl_error") and e.get("last_error") for e in expected)
    assert _errors(collapsed) == expected


def test_blanks_before_anything_else_or_at_the_start_split_nothing():
    """Only a run of blanks before one of the parser's lines, after words, splits: an
    indented frame, blanks before other words, a single blank, stay one line."""
    line = COLLAPSED.read_text().split("\n")[0]
    assert collapsed_pieces(line, COLLAPSED_LINES) == [
        line[:line.index("  ncclRemoteError")], line[line.index("ncclRemoteError"):line.index(" " * 55 + "Last")],
        line[line.index("Last error:"):line.index(" " * 30 + "Exception")].rstrip(),
        line[line.index("Exception raised"):line.index("      frame #0")], line[line.index("frame #0"):]]
    assert collapsed_pieces("    frame #0: c10::Error::Error", COLLAPSED_LINES) == ["    frame #0: c10::Error::Error"]
    assert collapsed_pieces("NCCL version 2.20.5  A call failed", COLLAPSED_LINES) == [
        "NCCL version 2.20.5  A call failed"]
    assert collapsed_pieces("version 2.20.5 ncclRemoteError: x", COLLAPSED_LINES) == [
        "version 2.20.5 ncclRemoteError: x"]


@pytest.mark.parametrize("filler", ["x  Last error:", "  ", "a  frame #1", "w  nccl", " Last error:  "])
def test_splitting_collapsed_lines_is_linear(filler):
    def split(text: str) -> int:
        return len(collapsed_pieces(text, COLLAPSED_LINES))
    assert_linear(split, filler * (100_000 // len(filler)), filler * (1_000_000 // len(filler)), what=filler)
    assert_linear(parse_torch_log, "NCCL error: x, NCCL version 2.20.5" + filler * (100_000 // len(filler)),
                  "NCCL error: x, NCCL version 2.20.5" + filler * (1_000_000 // len(filler)), what=filler)


# ---------------------------------------------------------------- --format=csv,noheader with its command


def test_noheader_output_reads_with_the_field_list_of_its_pasted_command():
    """The real paste (akash-network/provider-configs PR 91): the command in inline code,
    then its one row in a fence; its fields name no bus id, so the row is an `unnamed` GPU's
    readings for `hc parse` (the probe asks for pci.bus_id and still refuses without it)."""
    text = NOHEADER.read_text()
    assert text.startswith("`nvidia-smi --query-gpu=name,pci.device_id --format=csv,noheader`")
    facts = parser_for("nvidia-smi-query-gpu")(text)
    assert facts.gpus == [] and [(g.name, g.query_fields) for g in facts.unnamed] == [
        ("NVIDIA H100 NVL", {"name": "NVIDIA H100 NVL", "pci.device_id": "0x232110DE"})]
    assert command_fields(text.split("\n")[0]) == ["name", "pci.device_id"]
    with pytest.raises(ParseError, match="no pci.bus_id column"):
        parse_nvidia_smi_query(text)


def test_a_real_query_with_its_header_replaced_by_the_command_line_reads_the_same():
    """A real --query-gpu capture, its header line replaced by the prompt and command that
    asks for those fields with `noheader` (the transformation): the same GPUs."""
    text = ALL_FIELDS.read_text()
    header, rest = text.split("\n", 1)
    fields = ",".join(cell.split(" [")[0] for cell in header.split(", "))
    pasted = f"$ nvidia-smi --query-gpu={fields} --format=csv,noheader\n{rest}"
    assert parser_for("nvidia-smi-query-gpu")(pasted).gpus == parse_nvidia_smi_query(text).gpus
    assert parse_nvidia_smi_query(pasted).gpus == parse_nvidia_smi_query(text).gpus  # the probe's parse too


def test_noheader_output_without_its_command_is_refused_as_before():
    """The real row with the command line taken out: no header and no field list, the same
    one-line reason."""
    rows = "\n".join(NOHEADER.read_text().split("\n")[1:])
    with pytest.raises(ParseError, match=r"^nvidia-smi --query-gpu: no CSV header line .*needs the field list$"):
        parser_for("nvidia-smi-query-gpu")(rows)


@pytest.mark.parametrize("filler", ["--query-gpu=a,", "--query-gpu ", "x--query-gpu=name,pci.device_id "])
def test_looking_for_the_command_line_is_linear(filler):
    def fields(text: str) -> object:
        return command_fields(text)
    assert_linear(fields, filler * (100_000 // len(filler)), filler * (1_000_000 // len(filler)), what=filler)
