"""hc's per-node threads convert config and decode reports at once: that must not crash.

msgspec builds a type's plan on first use and two threads doing it at once for one type
segfaulted agentless sweeps (2 in ~8 clean-clone CI runs). Before core/typed.py, the
script below crashed in about 13 of 30 runs; eight clean runs in a row on that code
happen about 1 time in 100.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import sys, threading
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race needs it
    from pathlib import Path
    from healthcheck.core.config.loader import load_config

    cfg = load_config(Path(sys.argv[1]))
    start = threading.Barrier(8)

    def node(i):
        start.wait()
        cfg.for_node(f"node{i + 1}")

    threads = [threading.Thread(target=node, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
""")


def test_nodes_configs_converted_in_eight_threads_at_once_do_not_crash(tmp_path: Path) -> None:
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "kern.log").write_text("[    0.000000] Linux version 6.1.0\n")
    (tmp_path / "fabrics" / "rig.yaml").write_text(
        "extends: generic\nnet:\n  interfaces:\n    eth0: {mtu: 9000, count: 1}\n"
        f"gpu:\n  xid: {{source: file, file: {tmp_path}/kern.log}}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"nodes:\n  'node[1-8]': rig\nfabric_dirs: [{tmp_path}/fabrics]\n")
    script = tmp_path / "race.py"
    script.write_text(SCRIPT)
    for attempt in range(8):  # a fresh interpreter each time: the plan is built once per process
        r = subprocess.run([sys.executable, "-X", "faulthandler", str(script), str(cfg)],
                           capture_output=True, timeout=60)
        assert r.returncode == 0, f"attempt {attempt}: exit {r.returncode}\n{r.stderr.decode()[-3000:]}"


def test_every_typed_msgspec_decode_goes_through_core_typed() -> None:
    """No module decodes or converts into a type but through core/typed.py (whose lock builds
    each type's plan once): `hc diagnose job --via ssh` died with SIGSEGV in CI decoding each
    node's NodeCollection in its own thread with msgspec.json.decode(type=...) directly."""
    import ast

    root = Path(__file__).resolve().parents[3] / "healthcheck"
    raw = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).as_posix() == "core/typed.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            typed_decode = name in ("msgspec.json.decode", "msgspec.msgpack.decode", "msgspec.yaml.decode") and any(
                k.arg == "type" for k in node.keywords)
            if typed_decode or name in ("msgspec.convert", "msgspec.json.Decoder", "msgspec.msgpack.Decoder"):
                raw.append(f"{path.relative_to(root)}:{node.lineno}: {name}")
    assert raw == [], "use healthcheck.core.typed (decode_json, convert, decoder) instead:\n" + "\n".join(raw)
