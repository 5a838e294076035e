"""A TAB builds only the node names that start with what is typed (issue 22): the same
names as expanding the whole hostlist and filtering, without the expansion."""

from __future__ import annotations

from pathlib import Path

import pytest

from healthcheck.cli.completion import node_candidates
from healthcheck.core.nodes import Hostlist, is_valid_node_name, parse_hostlist

PATTERNS = ["gpu[00001-10000]", "gpu[001-128]", "login[1-2]", "gpu[5,1-3,007]x", "a[1-3]b[01-12]",
            "n[1-20/3]-ib[0-1]", "gpu[50-150],gpu[1-100]", "zz[1-3],aa[1-2],gpu[3,1]", "rack[1-4]-node[01-16]",
            "x[0-9]y", "gpu[001-128],cpu[1-9]", "solo", "g[08-12]", "node[01-04]", "node[0001-0040]", "n[1-1000/7]", "q[0-0]", "q[0-99]",
            "w[000-999]z", "gpu-a,gpu-b"]
TYPED = ["", "g", "gpu", "gpu0", "gpu001", "gpu1", "gpu00100", "gpu-", "a", "a2b", "a2b1", "n4", "n4-", "n4-ib1",
         "rack3-node1", "x5", "x5y", "cpu", "so", "solo", "g1", "g09", "node0", "node00", "node003", "gpu5", "gpu7", "z", "n1", "n10", "n99",
         "n0", "q0", "q", "q9", "w0", "w00", "w99", "w9999", "w099z", "w099zz"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_names_starting_are_the_expanded_names_that_match(pattern: str) -> None:
    for typed in TYPED:
        every = [n for n in parse_hostlist(pattern).names() if n.startswith(typed) and is_valid_node_name(n)]
        assert parse_hostlist(pattern).names_starting(typed) == every, typed


def test_a_tab_on_a_large_pattern_does_not_expand_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "hc.yaml"
    cfg.write_text('default_fabric: generic\nnodes:\n  "gpu[00001-10000]": generic\nslurm: {sinfo: /nonexistent}\n')

    def expanded(self: Hostlist) -> list[str]:
        raise AssertionError(f"{self.text} expanded whole")

    monkeypatch.setattr(Hostlist, "names", expanded)
    monkeypatch.setattr(Hostlist, "nodeset", expanded)
    names = node_candidates("gpu001", cfg)
    assert names == [f"gpu{i:05d}" for i in range(100, 200)]
    assert node_candidates("gpu0017", cfg) == [f"gpu{i:05d}" for i in range(170, 180)]
    assert node_candidates("gpu00017", cfg) == ["gpu00017"]
