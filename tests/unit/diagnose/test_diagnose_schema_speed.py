"""The hc.diagnosis/2 document against its shipped JSON Schema, and `hc diagnose logs`
in time linear in its input (512 ranks built by replicating the real stuck capture)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import jsonschema
from support import FIXTURES

from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import SCHEMA_PATH, build, encode, schema_text

SCEN = FIXTURES / "diagnose"


def test_shipped_schema_is_current():
    assert SCHEMA_PATH.read_text() == schema_text(), "run python -m healthcheck.diagnose.verdict --write-schema"


def test_every_verdict_validates(tmp_path):
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    (tmp_path / "x.txt").write_text("nothing\n")
    for path in [*sorted(SCEN.iterdir()), tmp_path]:
        if path.is_dir():
            doc = json.loads(encode(build(collect([path]))))
            validator.validate(doc)
            assert doc["schema"] == "hc.diagnosis/2"


def _replicate(root: Path, ranks: int) -> Path:
    src = SCEN / "stuck"
    waiting_log = (src / "rank0.log").read_text()
    stuck_log = (src / "rank2.log").read_text()
    waiting_spy = (src / "py-spy-rank0.txt").read_text()
    stuck_spy = (src / "py-spy-rank2.txt").read_text()
    out = root / f"x{ranks}"
    out.mkdir()
    for r in range(ranks):
        odd = r == 5
        (out / f"rank{r}.log").write_text(stuck_log if odd else waiting_log)
        (out / f"py-spy-rank{r}.txt").write_text((stuck_spy if odd else waiting_spy).replace("4429", str(10000 + r)))
    return out


def _timed(path: Path) -> tuple[float, object]:
    best = float("inf")
    verdict = None
    for _ in range(2):
        t = time.process_time()
        verdict = build(collect([path]))
        best = min(best, time.process_time() - t)
    return best, verdict


def test_512_ranks_linear(tmp_path):
    small, big = _replicate(tmp_path, 64), _replicate(tmp_path, 512)
    t_small, v_small = _timed(small)
    t_big, v_big = _timed(big)
    assert v_big.cls == "stuck-rank" and [o.rank for o in v_big.odd_ranks] == [5]
    assert v_small.cls == "stuck-rank"
    # 8x the input: at most ~2.5x of linear (timer noise, caches), far from quadratic (64x)
    assert t_big <= 8 * 2.5 * t_small + 0.5, (t_small, t_big)
