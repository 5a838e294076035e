"""The paste shapes tests/field/mutate.py finds the parsers do not survive, each fixed at its
mechanism and tested on real outputs put through the transformation (mutate.TRANSFORMS: the
text is the real file's, the shape the transformation's; each test says which).
"""

from __future__ import annotations

import msgspec
from field import mutate
from support import FIXTURES

from healthcheck.parsers.ibstat import parse_ibstat
from healthcheck.parsers.ibstatus import parse_ibstatus
from healthcheck.parsers.lines import flat_field

FIELD = FIXTURES / "field"
# real ibstat outputs: two RoCE ports down/disabled (space-indented), four CAs tab-indented
IBSTAT_ROCE = FIELD / "repos" / "ibstat" / "h100-roce-2-ports-down-disabled.txt"
IBSTAT_TABS = FIELD / "issues" / "ibstat" / "gb10-spark-ibstat-tabs-roce-four-cas-cut.txt"
IBSTATUS = FIXTURES / "corpus" / "ibstatus" / "a100-hdr200-all-active.txt"


def _ports(parsed) -> list[dict]:
    return msgspec.to_builtins(parsed.ports)


# ---------------------------------------------------------------- flatten: indentation lost


def test_ibstat_with_its_indentation_flattened_reads_the_same_ports():
    # mutate.flatten: a web page put every line of the real outputs at column 0
    for path in (IBSTAT_ROCE, IBSTAT_TABS):
        text = path.read_text()
        flat = parse_ibstat(mutate.flatten(text))
        assert flat.ports and _ports(flat) == _ports(parse_ibstat(text)), path.name
        assert not flat.unrecognized.count, path.name


def test_ibstatus_with_its_indentation_flattened_reads_the_same_ports():
    text = IBSTATUS.read_text()
    flat = parse_ibstatus(mutate.flatten(text))
    assert flat.ports and _ports(flat) == _ports(parse_ibstatus(text))


def test_prose_at_the_left_margin_is_no_field_of_a_flattened_tree():
    # the writer's `Note: ...` after a flattened port is left unread, never a field of the port
    text = mutate.flatten(IBSTAT_ROCE.read_text()) + "\nNote: the second port is cabled later\n"
    parsed = parse_ibstat(text)
    assert _ports(parsed) == _ports(parse_ibstat(IBSTAT_ROCE.read_text()))
    assert parsed.unrecognized.count == 1
    assert flat_field("State: Active", frozenset({"State"})) == ("State", "Active")
    assert flat_field("Note: State: Active", frozenset({"State"})) is None
    assert flat_field("x" * 1_000_000 + ": y", frozenset({"State"})) is None  # bounded key: no match, linear
