"""The mechanisms behind held-out-12's misses (issue 20's fourteenth round), each on the real
file and on real lines of other fixtures (a transformation says so): torchrun's agent line
`failed (exitcode: N) local_rank: L (pid: P) of binary: B` cut anywhere after the pid;
NCCL 2.3-era debug lines with no `NCCL` word after the `host:pid:tid [dev]` prefix; a paste
inside markdown's indented code block (the line layer's shape, every parser).
"""

from __future__ import annotations

import pytest
from support import FIXTURES

from healthcheck.core.errors import ParseError
from healthcheck.parsers.torch_log import parse_torch_log

FIELD12 = FIXTURES / "field" / "issues-12"
TWO_FAILED = FIELD12 / "torch-log" / "prose-two-bracket-error-failed-lines-minus9-local-rank-1-then-0.txt"
# the agent's line under each logger's prefix, whole (the binary after `of binary:`)
GLOG_FAILED = FIXTURES / "corpus" / "torchrun" / "glog-format-failed-exitcode-9-local-rank-5-header-fragment.txt"
OLD_FAILED = FIXTURES / "corpus" / "torchrun" / "old-logger-format-sigterm-siblings-failed-exitcode-9-local-rank-3.txt"


def _real(path, words: str) -> str:
    return next(line for line in path.read_text().splitlines() if words in line)


# ---------------------------------------------------------------- torchrun's agent line, cut


def test_the_agent_line_with_nothing_after_binary_is_a_worker_failure():
    failures = parse_torch_log(TWO_FAILED.read_text()).worker_failures
    assert [(f.exitcode, f.local_rank, f.pid, f.signal, f.binary) for f in failures] == [
        (-9, 1, 14447, "SIGKILL", ""), (-9, 0, 14447, "SIGKILL", "")]


@pytest.mark.parametrize("path", [GLOG_FAILED, OLD_FAILED, TWO_FAILED], ids=lambda p: p.stem[:24])
def test_the_agent_line_cut_anywhere_after_the_pid_is_read_under_every_logger(path):
    # each real line (glog's, the old logger's `ERROR:...api:`, the `api: [ERROR]` form) cut at
    # every character from the pid's end on: the worker, its exit and pid read; the binary
    # only where the paste kept it whole
    line = _real(path, "failed (exitcode: ")
    whole = parse_torch_log(line).worker_failures[0]
    pid_end = line.index("(pid: ") + len("(pid: ") + len(str(whole.pid))
    for cut in range(pid_end, len(line) + 1):
        [failed] = parse_torch_log(line[:cut]).worker_failures
        assert (failed.exitcode, failed.local_rank, failed.pid) == (whole.exitcode, whole.local_rank, whole.pid)
        assert failed.binary in ("", whole.binary) or whole.binary.startswith(failed.binary)


def test_a_sentence_that_only_mentions_an_exitcode_is_no_worker_failure():
    # the real line cut before its local_rank (prose that quotes the exit alone), and cut
    # inside the pid's word: no worker, local rank or pid is made up
    line = _real(TWO_FAILED, "failed (exitcode: ")
    for cut in (line.index(" local_rank"), line.index("(pid:") + 3):
        sentence = f"the job {line[line.index('failed'):cut]} again\n"
        try:
            assert parse_torch_log(sentence).worker_failures == []
        except ParseError:
            pass  # nothing of torch's in it: refused, never read as a worker that failed
