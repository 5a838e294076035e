"""The mechanisms behind held-out-7's two misses (issue 20's ninth round), each on the real
file and on a transformation of another real fixture (each says which): NCCL's result
name, detail and last error with torch's `NCCL error in:` head cut off; an nccl-tests
failure chain pasted with markdown links around each FILE:LINE (one link torn by a
newline inside it).
"""

from __future__ import annotations

import re

from support import CORPUS, FIXTURES

from healthcheck.parsers.nccl_tests import parse_nccl_tests
from healthcheck.parsers.torch_log import parse_torch_log

FIELD7 = FIXTURES / "field" / "issues-7"
HEADLESS = FIELD7 / "torch-log" / "nccl-unhandled-cuda-error-three-lines-then-hf-traceback.txt"
WHOLE = CORPUS / "torch-nccl-error" / "distbackenderror-nccl-2.26.2-unhandled-cuda-error-999-unknown.txt"
LINKED = FIELD7 / "nccl-tests" / "test-cuda-failure-with-markdown-links-illegal-memory-access.txt"
TWO_HOSTS = FIXTURES / "nccl-tests" / "all_reduce-2host-4rank-test-nccl-failure-internal-error-mpirun-abort.txt"


# ---------------------------------------------------------------- NCCL's detail without its head


def test_nccls_result_and_last_error_without_torchs_head_are_an_nccl_error():
    log = parse_torch_log(HEADLESS.read_text())
    (error,) = log.backend_errors
    assert (error.kind, error.line, error.nccl_error) == ("nccl", 1, "ncclUnhandledCudaError")
    assert error.detail == "Call to CUDA function failed."
    assert error.last_error == "Cuda failure 'invalid argument'"
    assert log.unrecognized.count == 0


def test_a_whole_distbackenderror_cut_to_its_last_three_lines_keeps_its_nccl_facts():
    # a transformation of a real DistBackendError: the traceback and `NCCL error in:` line cut
    whole = parse_torch_log(WHOLE.read_text())
    (full,) = whole.backend_errors
    lines = WHOLE.read_text().splitlines()
    head = next(i for i, x in enumerate(lines) if "NCCL error in:" in x)
    (cut,) = parse_torch_log("\n".join(lines[head + 1:]) + "\n").backend_errors
    assert (cut.nccl_error, cut.detail, cut.last_error) == (full.nccl_error, full.detail, full.last_error)
    assert cut.last_error == "Cuda failure 999 'unknown error'"
    # the whole error stays one error: its detail lines are read into it, not opened again
    assert full.where == "NCCLUtils.cpp:77" and full.nccl_error == "ncclUnhandledCudaError"


def test_a_line_that_only_starts_like_an_nccl_result_is_no_error():
    # the result names are NCCL's ncclResult_t: a log line naming an NCCL function is not one
    text = HEADLESS.read_text().replace("ncclUnhandledCudaError:", "ncclCommInitRank:", 1)
    assert parse_torch_log(text).backend_errors == ()


# ---------------------------------------------------------------- markdown links in a failure chain


def test_an_nccl_tests_failure_chain_with_markdown_links_reads_each_failure():
    run = parse_nccl_tests(LINKED.read_text())
    root, *frames = run.failures
    assert (root.kind, root.file, root.line) == ("cuda", "common.cu", 334)
    assert root.message == "an illegal memory access was encountered"
    # the stack frames, one of them a link a newline tore (`[common.cu:494` / `](https://...)`)
    assert [(f.kind, f.file, f.line) for f in frames] == [
        ("test", "common.cu", 395), ("test", "common.cu", 494), ("test", "all_reduce.cu", 103)]
    assert run.root_failures == (root,)
    assert run.unrecognized.count == 0


def _linked(text: str) -> str:
    """Each `FILE:LINE` of a failure as a markdown link to its source (a transformation of a
    real output, the way the real linked paste shows them)."""
    url = "https://github.com/NVIDIA/nccl-tests/blob/master/src/{0}#L{1}"
    return re.sub(r"(failure )(\w+\.cu):(\d+)", lambda m: f"{m[1]}[{m[2]}:{m[3]}]({url.format(m[2], m[3])})", text)


def test_markdown_links_around_a_real_failures_file_lines_change_no_fact():
    text = TWO_HOSTS.read_text()
    linked = _linked(text)
    assert "[common.cu:959](https://" in linked
    assert parse_nccl_tests(linked).failures == parse_nccl_tests(text).failures
    # and torn by a newline inside the link's text, as the real paste shows one
    torn = linked.replace("[common.cu:844", "[common.cu:844\n", 1)
    assert "common.cu:844\n](https://" in torn
    assert [(f.kind, f.file, f.line, f.message) for f in parse_nccl_tests(torn).failures] == [
        (f.kind, f.file, f.line, f.message) for f in parse_nccl_tests(text).failures]


def test_a_bracket_left_open_at_a_lines_end_is_kept_where_no_link_tail_follows():
    text = TWO_HOSTS.read_text()
    opened = text.replace("Test failure common.cu:844", "Test failure [common.cu:844", 1)
    # (a transformation of a real output): the line held back to look for a tail comes
    # back as it was, in its place
    ours = parse_nccl_tests(opened).failures
    assert [(f.kind, f.line) for f in ours] == [(f.kind, f.line) for f in parse_nccl_tests(text).failures]
    assert ours[1].file == "[common.cu"
