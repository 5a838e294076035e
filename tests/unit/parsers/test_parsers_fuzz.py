"""Every parser `hc parse` offers returns facts or raises ParseError, whatever it is fed."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healthcheck.core.errors import ParseError
from healthcheck.parsers import TOOLS, parser_for

# Inputs that look a little like tool output, so the fuzzer gets past the first line.
_FRAGMENTS = st.sampled_from(
    ["CA 'mlx5_0'\n", "\tPort 1:\n", "\t\tState: Active\n", "\t\tRate: 400\n", "Infiniband device 'x' port 1 status:\n",
     "\tstate: 4: ACTIVE\n", "# Port counters: Lid 1 port 1\n", "SymbolErrorCounter:....1\n", "1: lo: <UP> mtu 1\n",
     "    link/ether x\n", '[{"ifname": "a"}]', "\x00", "\n", "GPU 00000000:1B:00.0\n", "NVRM: Xid (PCI:0000:1b:00): 79\n"]
)
_TEXT = st.one_of(st.text(max_size=400), st.lists(_FRAGMENTS | st.text(max_size=20), max_size=30).map("".join))


@pytest.mark.parametrize("tool", sorted(TOOLS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TEXT)
def test_parser_never_crashes(tool, text):
    try:
        parser_for(tool)(text)
    except ParseError:
        pass
