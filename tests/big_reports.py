"""Fleet-size reports for bin/bench and the report tests (issue 22): each node the real
`bw.torch` check's result over stand-in facts (tests/sweep_reports.py) on top of a synthetic
standard-tier node (~180 metrics, ~23 KB a node as hc writes it), written as hc writes a
report (make_report, encode with indent 2).

The nodes' metrics, most of the bytes, are held encoded (msgspec.Raw) while the report is
built, so a 50,000-node report (~1.2 GB) is written in about 2.5 GB of memory, not the
~5 GB of 50,000 decoded nodes.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import msgspec
import sweep_reports as sr
from synthetic import synthetic_node

from healthcheck.core.config import load_config
from healthcheck.report.build import make_report

CHUNK = 1000


def write_fleet_report(path: Path, n: int, *, run: int = 0, slow: dict[str, float] | None = None,
                       seed: int = 0) -> Path:
    """Write an n-node deep-sweep report to `path` (its config and fabric beside it) and return it.
    `run` and `seed` vary the busbw and the synthetic quirks, so two runs differ as nights do."""
    base = path.parent
    names = [f"gpu{i:05d}" for i in range(n)]
    cfg = sr.write_config(base / f"{path.stem}-config", f"gpu[00000-{n - 1:05d}]", history=False)
    config = load_config(cfg)
    light, metrics = [], []
    encoder = msgspec.json.Encoder()
    for start in range(0, n, CHUNK):
        chunk = names[start : start + CHUNK]
        for node in sr.node_results(config, chunk, slow or {}, run=run,
                                    base=lambda _name, i, start=start: synthetic_node(start + i, seed=seed)):
            metrics.append(msgspec.Raw(encoder.encode(node.metrics)))
            light.append(msgspec.structs.replace(node, metrics=[]))
    began = dt.datetime(2026, 11, 1, 2, tzinfo=dt.timezone.utc) + dt.timedelta(days=run)
    report = make_report(command="sweep", tier="deep", config_digest="sha256:" + "0" * 64, config_path=str(cfg),
                         started=began, finished=began + dt.timedelta(minutes=20), nodes=light)
    doc = msgspec.to_builtins(report)
    del light, report
    order = {name: k for k, name in enumerate(names)}
    for node in doc["nodes"]:  # make_report sorted them; the metrics follow their node
        node["metrics"] = metrics[order[node["node"]]]
    path.write_bytes(msgspec.json.format(encoder.encode(doc), indent=2) + b"\n")
    return path
