"""Every `Limit` key names a real config key.

A finding's `limit.key` is how the engine finds the `file:line` that set the threshold
(`NodeConfig.source`) and how an operator finds it with `hc config show`: a key that
names no config key leaves the finding without a source. Keys are dotted paths into
the fabric schema (`core/config/schema.py`, `Fabric`), dict keys rendered by `key_str`
(`net.interfaces.ib*.mtu`, `sys.disk_free_min_gib['/scratch.1']`,
`gpu.xid.severity[48]`); the fleet analyses' keys are paths into the main config's
settings (`fleet.outlier_z`).

Two passes: every check runs over the fixtures (corpus captures, NVML recordings,
kernel logs) and synthetic facts under every shipped fabric and some that set every
limit, and each key a finding carries must resolve; and every `Limit(...)` in the
package is read statically, its key as a template (an f-string's or `key_str`'s run-time
parts are wildcards), which must resolve too (a key handed in whole from elsewhere is
left to the run), and each of the checks' templates must be one the run produced.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any, Union

import msgspec
import pytest
from support import CORPUS, FIXTURES

from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.config.schema import Fabric, IbCounterLimits, MainConfig, NvLinkCounterLimits
from healthcheck.core.model import Finding
from healthcheck.core.registry import DEFAULT, NotApplicable

PACKAGE = Path(__file__).resolve().parents[3] / "healthcheck"
CHECKS = PACKAGE / "checks"
ANY = "\x00"  # a part of a key only known at run time (an f-string's or key_str's variable)


# ------------------------------------------------------------------ keys -> schema


def parse_key(key: str) -> list[str | int]:
    """'net.interfaces.ib*.mtu' / "sys.disk_free_min_gib['/a.b']" / 'gpu.xid.severity[48]' -> its parts."""
    parts: list[str | int] = []
    i, n = 0, len(key)
    if not key:
        raise ValueError("empty key")
    while i < n:
        if key[i] == "[":
            if key[i + 1 : i + 2] in ("'", '"'):
                quote, j = key[i + 1], i + 2
                while j < n and key[j] != quote:
                    j += 2 if key[j] == "\\" else 1
                if key[j + 1 : j + 2] != "]":
                    raise ValueError(f"unclosed [ at {i}")
                parts.append(ast.literal_eval(key[i + 1 : j + 1]))
                i = j + 2
            else:
                j = key.find("]", i)
                if j < 0 or j == i + 1:
                    raise ValueError(f"bad [ ] at {i}")
                inner = key[i + 1 : j]
                parts.append(int(inner) if inner.isdigit() else inner)
                i = j + 1
        else:
            if key[i] == ".":
                if not parts:
                    raise ValueError("starts with '.'")
                i += 1
            elif parts:
                raise ValueError(f"no '.' before {key[i:]!r}")
            j = i
            while j < n and key[j] not in ".[":
                j += 1
            if j == i:
                raise ValueError(f"empty part at {i}")
            parts.append(key[i:j])
            i = j
    return parts


def _unwrap(tp: Any) -> list[Any]:
    """The types a field may hold: Annotated and Optional/Union taken apart, None left out."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin is Union or origin is types.UnionType:
        return [t for arg in typing.get_args(tp) if arg is not type(None) for t in _unwrap(arg)]
    return [tp]


@cache
def _fields(struct: type) -> dict[str, Any]:
    return typing.get_type_hints(struct, include_extras=True)


def _matches(part: str | int, name: str) -> bool:
    if not isinstance(part, str) or ANY not in part:
        return part == name
    return re.fullmatch(".+".join(map(re.escape, part.split(ANY))), name) is not None


def why_not(parts: list[str | int], tp: Any, at: str = "") -> str | None:
    """None when `parts` names a config key under type `tp`, else why not."""
    if not parts:
        return None
    part, rest = parts[0], parts[1:]
    reasons = []
    for t in _unwrap(tp):
        origin = typing.get_origin(t)
        if isinstance(t, type) and issubclass(t, msgspec.Struct):
            fields = _fields(t)
            names = [name for name in t.__struct_fields__ if _matches(part, name)]
            if not names:
                reasons.append(f"{at or '(top)'} has no key {part!r} (keys: {', '.join(t.__struct_fields__)})")
            for name in names:
                why = why_not(rest, fields[name], f"{at}.{name}" if at else name)
                if why is None:
                    return None
                reasons.append(why)
        elif origin is dict:  # any key: an interface pattern, a path, an Xid code
            why = why_not(rest, typing.get_args(t)[1], f"{at}[{part!r}]")
            if why is None:
                return None
            reasons.append(why)
        elif origin is list and (isinstance(part, int) or part == ANY):
            why = why_not(rest, typing.get_args(t)[0], f"{at}[{part!r}]")
            if why is None:
                return None
            reasons.append(why)
        else:
            reasons.append(f"{at} is a value ({t}): nothing below it, yet the key goes on with {part!r}")
    return "; ".join(reasons)


# the main config's settings an analysis may compare with (not its node map)
SETTINGS = tuple(name for name in MainConfig.__struct_fields__ if name not in ("nodes", "overrides"))


def problem(key: str, roots: tuple[Any, ...]) -> str | None:
    """None when `key` names a config key under one of `roots`, else why not."""
    try:
        parts = parse_key(key)
    except (ValueError, SyntaxError) as exc:
        return f"{key!r} is not a config key path ({exc})"
    reasons = []
    for root in roots:
        if root is MainConfig:  # nodes and overrides are the node map, not settings
            why = why_not(parts, MainConfig) if parts[0] in SETTINGS else f"{parts[0]!r} is no main-config setting"
        else:
            why = why_not(parts, root)
        if why is None:
            return None
        reasons.append(why)
    return f"{key!r} names no config key: " + " | ".join(reasons)


def test_the_resolver_itself():
    ok = ["ib.rate_gbps", "net.interfaces.ib*.mtu", "net.interfaces['eth0.100'].mtu", "net.interfaces.ib*",
          "sys.disk_free_min_gib['/scratch.1']", "sys.disk_free_min_gib./tmp", "gpu.xid.severity[48]",
          "gpu.xid.unknown", "ib.counters_fail.symbol_error", "sys.mounts", "sys.services.nvidia-fabricmanager",
          f"ib.counters_{ANY}.{ANY}", f"net.interfaces.{ANY}.count"]
    for key in ok:
        assert problem(key, (Fabric,)) is None, problem(key, (Fabric,))
    bad = ["net.mtuu", "net.mtu", "ib.rate_gbps.x", "SLURM_JOB_GPUS", "sys.services.slurmd.service", "",
           "gpu..count", ".gpu.count", "gpu.count[", "net.interfaces.ib*.mtu.x", f"ib.counter_{ANY}.{ANY}",
           "fleet.outlier_z"]
    for key in bad:
        assert problem(key, (Fabric,)) is not None, key
    assert problem("fleet.outlier_z", (Fabric, MainConfig)) is None
    assert problem("overrides.gpu017.ib", (Fabric, MainConfig)) is not None


# ------------------------------------------------------------- the static pass


def _key_arg(call: ast.Call) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == "key":
            return kw.value
    return call.args[2] if len(call.args) > 2 else None


def _is_limit(call: ast.Call) -> bool:
    f = call.func
    return (isinstance(f, ast.Name) and f.id == "Limit") or (isinstance(f, ast.Attribute) and f.attr == "Limit")


def _render(parts: list[str | None]) -> str:
    """key_str's rendering, with ANY for a part known only at run time."""
    out = ""
    for part in parts:
        if part is None:
            out += "." + ANY if out else ANY
        elif part.isdigit():
            out += f"[{part}]"
        elif part and "." not in part and " " not in part and "[" not in part:
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


class Templates:
    """The keys an expression can be, as templates: ANY where a run-time value goes."""

    def __init__(self, scope: ast.AST) -> None:
        self.scope = scope

    def of(self, expr: ast.expr, depth: int = 0) -> list[str | None]:
        """None in the list: the expression can be None (no key, so no Limit)."""
        if depth > 8:
            return [ANY]
        if isinstance(expr, ast.Constant):
            return [expr.value] if isinstance(expr.value, str) or expr.value is None else [str(expr.value)]
        if isinstance(expr, ast.JoinedStr):
            pieces: list[list[str]] = []
            for value in expr.values:
                if isinstance(value, ast.Constant):
                    pieces.append([str(value.value)])
                else:
                    known = self.of(value.value, depth + 1) if isinstance(value, ast.FormattedValue) else [ANY]
                    pieces.append([k for k in known if k is not None] or [ANY])
            return ["".join(p) for p in itertools.product(*pieces)]
        if isinstance(expr, ast.IfExp):
            return self.of(expr.body, depth + 1) + self.of(expr.orelse, depth + 1)
        if isinstance(expr, ast.BoolOp):  # `key or "default.key"`: either
            return [t for value in expr.values for t in self.of(value, depth + 1)]
        if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "key_str"
                and expr.args and isinstance(expr.args[0], ast.Tuple)):
            parts = [str(e.value) if isinstance(e, ast.Constant) else None for e in expr.args[0].elts]
            return [_render(parts)]
        if isinstance(expr, ast.Name):
            return self._assigned(expr.id, expr.lineno, depth) or [ANY]
        return [ANY]

    def _assigned(self, name: str, line: int, depth: int) -> list[str | None]:
        """What `name` is bound to where line `line` uses it: the last binding above it in the
        scope (a plain or unpacking assignment, a for-loop over literal rows)."""
        bindings: dict[int, list[str | None]] = {}
        for node in ast.walk(self.scope):
            if not isinstance(node, (ast.Assign, ast.For)) or node.lineno > line:
                continue
            found: list[str | None] = []
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    found += self._bound(target, node.value, name, depth)
            elif isinstance(node.iter, (ast.Tuple, ast.List)):
                for row in node.iter.elts:
                    found += self._bound(node.target, row, name, depth)
            if found:
                bindings.setdefault(node.lineno, []).extend(found)
        return bindings[max(bindings)] if bindings else []

    def _bound(self, target: ast.expr, value: ast.expr, name: str, depth: int) -> list[str | None]:
        if isinstance(target, ast.Name):
            return self.of(value, depth + 1) if target.id == name else []
        if isinstance(target, ast.Tuple):
            values = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
            out: list[str | None] = []
            for v in values:
                if isinstance(v, ast.Tuple) and len(v.elts) == len(target.elts):
                    for t, e in zip(target.elts, v.elts, strict=True):
                        out += self._bound(t, e, name, depth)
            return out
        return []


def static_limit_keys() -> list[tuple[str, int, str]]:
    """(file, line, template) of every Limit(...) built in the package."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        owner: dict[ast.AST, ast.AST] = {}  # node -> the innermost function holding it (its names' scope)
        for fn in ast.walk(tree):  # breadth first: an outer function before the ones inside it
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                owner.update((node, fn) for node in ast.walk(fn))
        where = str(path.relative_to(PACKAGE.parent))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and _is_limit(node)):
                continue
            arg = _key_arg(node)
            templates = Templates(owner.get(node, tree)).of(arg) if arg is not None else [ANY]
            out.extend((where, node.lineno, t) for t in templates if t is not None)
    return out


def _roots(where: str) -> tuple[Any, ...]:
    # a check's limits are its node's fabric; the analyses compare with the main config
    return (Fabric,) if where.startswith("healthcheck/checks/") else (Fabric, MainConfig)


def test_every_limit_key_in_the_source_names_a_config_key():
    found = static_limit_keys()
    assert len({(w, line) for w, line, _ in found}) >= 30, "the static pass found too few Limit(...) calls"
    bad = []
    for where, line, template in found:
        if ANY in template.split(".")[0].split("[")[0]:
            # a key handed in from elsewhere (a parameter, a field): its section is not
            # in the source here; the run below judges the checks' keys whatever they are
            continue
        why = problem(template, _roots(where))
        if why is not None:
            bad.append(f"{where}:{line}: {why.replace(ANY, '{…}')}")
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------- the dynamic pass


def _hint(check: str, fact: str) -> type:
    """A fact's type, from the check that takes it (wherever the type lives)."""
    fn = DEFAULT.all_checks()[check].fn
    return typing.get_type_hints(fn)[fact]


def _fabrics() -> list[Fabric]:
    cfg = Config(EMBEDDED_DEFAULT)
    shipped = [cfg.fabric(p.stem) for p in sorted((EMBEDDED_DEFAULT.parent / "fabrics").glob("*.yaml"))]
    zero_nvlink = {name: 0 for name in NvLinkCounterLimits.__struct_fields__}
    zero_ib = {name: 0 for name in IbCounterLimits.__struct_fields__}
    tight = {
        "gpu": {"count": 9, "model": "NVIDIA Z100", "ecc_volatile_corrected_max": 0, "retired_pages_pending": "WARN",
                "retired_pages_max": 0, "remap_banks_low_max": 0, "temp_max_c": 1, "pcie_gen": 8, "pcie_width": 32, "nvlink_count": 64,
                "nvlink_errors_fail": zero_nvlink, "driver_version": "0.0", "cuda_version": "0.0",
                "vbios_version": "0.0", "nccl_version": "0.0", "leftover_memory_max_mib": 0,
                "xid": {"severity": {13: "FAIL", 31: "WARN", 43: "FAIL", 48: "FAIL", 63: "WARN", 79: "FAIL",
                                     94: "WARN", 119: "FAIL"}, "unknown": "FAIL"}},
        "ib": {"hca_count": 99, "rate_gbps": 10_000, "counters_fail": zero_ib, "link_layer": "InfiniBand"},
        "net": {"interfaces": {"ib*": {"mtu": 9000, "count": 99}, "eth0.100": {"mtu": 1500},
                               "veth*": {"mtu": 68}, "nothing-matches*": {}},
                "mtu_min": 9000, "mtu_max": 9000, "ignore": []},
        "sys": {"mem_total_min_gib": 1e6, "disk_free_min_gib": {"/tmp": 1e9, "/scratch.1": 1e9, "/gone": 1},
                "mounts": ["/nothing/mounted/here"],
                "services": {"nvidia-fabricmanager": "nv-fabricmanager", "slurmd.service": "slurmd"}},
        "bandwidth": {"counters_max_rise": zero_ib},
    }
    warn = {"gpu": {"nvlink_errors_warn": zero_nvlink, "retired_pages_pending": "FAIL"},
            "ib": {"counters_warn": zero_ib},
            "net": {"mtu_min": 68, "mtu_max": 1280, "ignore": []}}
    return shipped + [msgspec.convert(tight, Fabric), msgspec.convert(warn, Fabric)]


def _gpu_facts() -> list[Any]:
    from healthcheck.parsers.gpu_common import Gpu, GpuFacts, GpuProcess, LostGpu, NvLink, RemapHistogram
    from healthcheck.probes.nvml import NvmlProbe, ReplayNvml

    out: list[Any] = []
    for path in sorted((FIXTURES / "nvml").glob("*.json")):
        if "hang" in path.stem:  # a recording that hangs NVML: the engine's business, not a key's
            continue
        recording = json.loads(path.read_text())
        out.append(NvmlProbe(ReplayNvml(recording)).facts())
        out.append(NvmlProbe(ReplayNvml(recording)).facts([0, 1, 9]))  # a job's GPU 9 the node lacks
    errors = {"crc_flit_errors": 5, "crc_data_errors": 5, "replay_errors": 5, "recovery_errors": 5}
    bad = [Gpu(index=i, pci_bus_id=f"0000:{0x19 + i:02x}:00.0", name="NVIDIA H100 80GB HBM3",
               vbios_version=f"96.00.{i}", ecc_enabled=True, ecc_volatile_corrected=7, ecc_volatile_uncorrected=1,
               retired_pages_pending=True, remapped_rows_pending=True, temperature_c=99.0,
               retired_pages_sbe=3, retired_pages_dbe=1,
               remap_histogram=RemapHistogram(max=10, high=0, partial=0, low=2, none=1),
               throttle_reasons=["hw_slowdown", "sw_thermal_slowdown", "gpu_idle"][i:], pcie_gen_current=3,
               pcie_gen_max=5, pcie_width_current=8, pcie_width_max=16,
               nvlinks=[NvLink(link=0, active=True, **errors), NvLink(link=1, active=False)],
               memory_used_mib=5000, processes=[] if i else [GpuProcess(pid=7, name="python")])
           for i in range(3)]
    out.append(GpuFacts(source="test", gpus=bad, driver_version="1.0", cuda_version="1.0"))
    out.append(GpuFacts(source="test", gpus=bad[:1], lost=[LostGpu(pci_bus_id="0000:99:00.0", index=5, error="gone")],
                        driver_version="1.0", cuda_version="1.0"))
    out.append(GpuFacts(source="test", init_error="NVMLError_DriverNotLoaded"))
    return out


def _kernel_logs() -> list[Any]:
    from healthcheck.parsers.xid import parse_kernel_log

    files = sorted((FIXTURES / "kernel-log").glob("*.txt")) + sorted((CORPUS / "xid-dmesg").glob("*.txt"))
    logs = [parse_kernel_log(path.read_text()) for path in files]
    return [msgspec.structs.replace(log, source="dmesg", source_lines=max(1, len(path.read_text().splitlines())))
            for log, path in zip(logs, files, strict=True)]


def fact_samples() -> dict[str, list[Any]]:
    """Facts from the fixtures (and a few synthetic ones), by fact name."""
    from healthcheck.core.errors import ParseError
    from healthcheck.parsers.ib_common import IbCounters, IbPortCounters
    from healthcheck.parsers.ibstat import parse_ibstat
    from healthcheck.parsers.ip_link import parse_ip_link
    from healthcheck.parsers.ldconfig import parse_ldconfig
    from healthcheck.parsers.perfquery import parse_perfquery
    from healthcheck.parsers.procfs import parse_meminfo, parse_mounts

    def parsed(parse, paths):
        out = []
        for path in paths:
            try:
                out.append(parse(path.read_text()))
            except ParseError:
                pass
        return out

    links = parsed(parse_ip_link, sorted((CORPUS / "ip-json-link").glob("*.txt"))
                   + sorted((FIXTURES / "ip-link").glob("*.txt")))
    links.append(parse_ip_link(json.dumps(
        [{"ifname": name, "mtu": mtu, "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], "operstate": "UP"}
         for name, mtu in (("ib0", 2044), ("ib1", 4092), ("eth0.100", 9000), ("eth1", 1500), ("lo", 65536))])))
    counters = parsed(parse_perfquery, sorted((CORPUS / "perfquery").glob("*.txt")))
    every = {name: 3 for name in IbCounterLimits.__struct_fields__}
    counters.append(IbCounters(ports=[IbPortCounters(ca="mlx5_0", port=1, counters=every)]))
    disk_space, processes = _hint("sys.disk", "disk_space"), _hint("sys.services", "processes")
    path_space = typing.get_args(_fields(disk_space)["paths"])[0]
    return {
        "ip_links": links,
        "ib_ports": parsed(parse_ibstat, sorted((CORPUS / "ibstat").glob("*.txt"))),
        "ib_counters": counters,
        "meminfo": [parse_meminfo("MemTotal:       2113407228 kB\nMemFree:        2000000000 kB\n")],
        "disk_space": [disk_space(paths=[path_space(path="/tmp", exists=True, free_bytes=10 * 1024**3),
                                         path_space(path="/scratch.1", exists=True, free_bytes=1),
                                         path_space(path="/gone", exists=False)])],
        "mounts": [parse_mounts("/dev/vda / ext4 rw 0 0\nstorage:/home /home nfs4 rw 0 0\n")],
        "processes": [processes(names=frozenset({"systemd", "sshd"}))],
        "gpus": _gpu_facts(),
        "kernel_gpu_log": _kernel_logs(),
        "shared_libs": [parse_ldconfig("/usr/lib: (from /etc/ld.so.conf.d/x.conf:1)\n"
                                       "\tlibnccl.so.2 -> libnccl.so.2.18.3\n")],
        "nccl_tests": _bandwidth_runs("nccl-tests"),
        "torch_sweep": _bandwidth_runs("torch"),
        "ib_write_bw_loopback": _ib_write_bw_loopbacks(),
        "dcgm_diag": _dcgm_runs(1),
        "dcgm_diag_deep": _dcgm_runs(3),
    }


def _dcgm_runs(level: int) -> list[Any]:
    """Every dcgmi diag capture and derived output as one run (gpu.dcgm builds no Limit)."""
    from healthcheck.parsers.dcgmi_diag import DcgmRun, parse_dcgmi_diag

    paths = sorted((CORPUS / "dcgmi-diag").glob("*.txt")) + sorted((FIXTURES / "dcgmi-diag").glob("*.txt"))
    return [DcgmRun(level, diag=parse_dcgmi_diag(path.read_text())) for path in paths]


def _bandwidth_runs(tool: str) -> list[Any]:
    """Every all_reduce capture as one attempt in each node-local scope."""
    from healthcheck.core.errors import ParseError
    from healthcheck.parsers.bandwidth_common import BandwidthAttempt, BandwidthRun, BandwidthRuns
    from healthcheck.parsers.nccl_tests import parse_nccl_tests

    out = []
    for path in sorted((FIXTURES / "nccl-tests").glob("**/all_reduce-*.txt")):
        try:
            run = parse_nccl_tests(path.read_text(), collective="all_reduce")
        except ParseError:
            continue
        attempt = BandwidthAttempt(argv=("all_reduce_perf",), samples=run.samples, out_of_bounds=run.out_of_bounds)
        out.append(BandwidthRuns(tool, 8, tuple(BandwidthRun("all_reduce", scope, (attempt,))
                                                for scope in ("single_node", "ib_loopback"))))
    return out


def _ib_write_bw_loopbacks() -> list[Any]:
    """The real HDR loopback capture as each port's attempt, at 200 and 400 Gb/s (short of
    0.9 x 400), every error counter rising; and a port where the QP never reached RTR."""
    from healthcheck.parsers.perftest import IbWriteBwAttempt, IbWriteBwHca, IbWriteBwLoopback, parse_perftest

    run = parse_perftest((FIXTURES / "ib_write_bw" / "loopback-8M-server-client-interleaved.txt").read_text())
    measured = IbWriteBwAttempt(server_argv=("ib_write_bw",), client_argv=("ib_write_bw", "localhost"),
                                rows=run.rows, avg_gbits=run.avg_gbits())
    rises = {name: 3 for name in IbCounterLimits.__struct_fields__}
    hcas = tuple(IbWriteBwHca(device=f"mlx5_{i}", port=1, tcp_port=18515 + i, rate_gbps=rate, attempts=(measured,),
                              counter_rises=rises) for i, rate in enumerate((200.0, 400.0)))
    rtr = parse_perftest((FIXTURES / "ib_write_bw" / "failed-to-modify-qp-to-rtr-grh-required-two-qps.txt").read_text())
    failed = IbWriteBwAttempt(server_argv=("ib_write_bw",), client_argv=("ib_write_bw", "localhost"),
                              failures=rtr.failures, client_returncode=1)
    broken = IbWriteBwHca(device="mlx5_2", port=1, tcp_port=18517, rate_gbps=400.0, attempts=(failed,))
    return [IbWriteBwLoopback(size_bytes=8 << 20, hcas=hcas), IbWriteBwLoopback(size_bytes=8 << 20, hcas=(broken,))]


@cache
def produced_keys() -> dict[str, set[str]]:
    """check name -> every Limit key its findings carried over the samples and fabrics."""
    samples = fact_samples()
    fabrics = _fabrics()
    out: dict[str, set[str]] = {}
    for name, spec in sorted(DEFAULT.all_checks().items()):
        missing = [f for f in spec.needs if not samples.get(f)]
        assert not missing, f"{name} needs {missing}: add samples for them to fact_samples()"
        choices = [[(f, v) for v in samples[f]] for f in spec.needs]
        choices += [[(f, None)] + [(f, v) for v in samples.get(f, [])] for f in spec.optional]
        keys = out.setdefault(name, set())
        for combo in itertools.product(*choices):
            for limits in fabrics:
                try:
                    output = list(spec.fn(**dict(combo), limits=limits))
                except NotApplicable:
                    continue
                keys.update(o.limit.key for o in output if isinstance(o, Finding) and o.limit is not None)
    return out


def test_every_limit_key_the_checks_produce_names_a_fabric_key():
    produced = produced_keys()
    bad = sorted({f"{check}: {why}" for check, keys in produced.items() for key in keys
                  if (why := problem(key, (Fabric,))) is not None})
    assert not bad, "\n".join(bad)


def test_the_run_produced_every_limit_key_the_checks_build():
    """The dynamic pass reaches every Limit(...) of the checks (a new one needs a scenario here)."""
    produced = {key for keys in produced_keys().values() for key in keys}
    assert len(produced) >= 25, sorted(produced)
    parsed = [parse_key(key) for key in produced]
    unreached = []
    for where, line, template in static_limit_keys():
        if not where.startswith("healthcheck/checks/") or template == ANY:
            continue  # a key built elsewhere and passed in whole is judged by the produced keys alone
        want = parse_key(template)
        if not any(len(p) == len(want) and all(_matches(w, str(g)) if isinstance(w, str) else w == g
                                                for w, g in zip(want, p, strict=True)) for p in parsed):
            unreached.append(f"{where}:{line}: {template.replace(ANY, '{…}')}")
    assert not unreached, "no scenario produced these keys (extend _fabrics() or fact_samples()):\n" + "\n".join(
        unreached)


@pytest.mark.parametrize("key", ["net.mtuu", "net.interfaces.ib*.mtuu", "gpu.xid.severity.48.x"])
def test_a_misspelt_key_is_caught(key):
    assert problem(key, (Fabric,)) is not None
