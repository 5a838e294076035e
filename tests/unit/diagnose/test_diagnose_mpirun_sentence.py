"""Open MPI's `... exited on signal N` sentence read whatever stands where the node's name
goes: a name, a redacted one, or nothing at all (issue 19). The nameless form is Horovod's
issue 926 as field-9 pasted it (tests/fixtures/diagnose-field/issues-9, sources in
truths.yaml): `mpirun noticed that process rank 0 with PID 0 on node exited on signal 4
(Illegal instruction).`"""

from __future__ import annotations

from pathlib import Path

import pytest

from healthcheck.core.errors import ParseError
from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import build
from healthcheck.parsers.torch_log.reader import parse_torch_log

FIELD9 = Path(__file__).resolve().parents[2] / "fixtures" / "diagnose-field" / "issues-9" / "saved"
NAMELESS = FIELD9 / "mpirun-rank-0-signal-4-illegal-instruction-no-host" / "paste.log"


@pytest.mark.parametrize("node, host", [("gn05", "gn05"), ("xxxxxxxx", ""), ("", "")],
                         ids=["named", "redacted", "no-name"])
def test_the_sentence_is_the_ranks_exit_whatever_names_the_node(node, host):
    where = f"on node {node} " if node else "on node "
    text = f"mpirun noticed that process rank 5 with PID 812 {where}exited on signal 9 (Killed).\n"
    exits = parse_torch_log(text).task_exits
    assert [(e.tasks, e.signal, e.host) for e in exits] == [((5,), "SIGKILL", host)]


def test_the_field_paste_without_a_node_names_rank_0_dead(tmp_path):
    folder = tmp_path / "case"
    folder.mkdir()
    (folder / "paste.log").write_text(NAMELESS.read_text())
    verdict = build(collect([str(folder)]))
    assert verdict.cls == "dead-rank", verdict.summary
    assert sorted(o.rank for o in verdict.odd_ranks if o.rank is not None) == [0]


def test_a_word_after_node_is_not_read_as_a_missing_name():
    """`exited` right after `on node` is the nameless form only where the sentence goes on
    `exited on signal N`; a line that merely starts the same names nothing."""
    text = "mpirun noticed that process rank 5 with PID 812 on node exited normally\n"
    with pytest.raises(ParseError):  # nothing in it is read: no fact, so no torch log
        parse_torch_log(text)
