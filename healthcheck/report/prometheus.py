"""Reports as node_exporter textfile-collector files: what a run found, for Prometheus.

`export(report, directory)` writes `<directory>/hc-<command>.prom` (command: node,
prologue, epilogue, health or sweep), so each kind of run keeps its own file; every
series carries `command` and `tier` (a tier, or the epilogue context), so two files
never hold the same series (node_exporter fails the scrape of a series it collects
twice). The file is replaced through core.atomic: a temporary `.hc-<command>.prom.*.tmp`
in the same directory (node_exporter reads only `*.prom`, so never half a file), fsync,
rename; a link, directory, device or FIFO at the path is refused, never renamed over or
written through.

The text is written here (`to_text`), byte for byte what `prometheus_client`'s
`generate_latest` writes for the same families (tests/unit/report/test_prometheus.py compares
the two, hostile label values and Inf/NaN included, and reads the file back with the
library's parser and a real node_exporter). The library itself is not imported: its
package imports http.server, urllib.request, ssl and wsgiref, 20-40 ms on a 2-core node,
twice the whole export's budget in the prologue (the export costs ~4 ms without it).

Series (gauges unless named `_total`; base units: seconds, bytes, bytes per second):

    hc_last_run_timestamp_seconds                 when the run finished: alert when it gets old
    hc_run_duration_seconds                       how long the run took
    hc_run_status{status}                         the run's worst status (one-hot, below)
    hc_run_info{hc_version, config_digest}        1
    hc_export_dropped_series                      series left out by the bounds below (0 normally)
    hc_nodes{status}                              nodes per status (a sweep's fleet view)
    hc_analysis_status{analysis, status}          fleet and pair analyses of a sweep (one-hot)
    hc_node_status{node, fabric, status}          one-hot
    hc_findings{node, severity}                   FAIL, ERROR and WARN findings per node, 0 included
    hc_check_status{node, check, status}          one-hot
    hc_finding{node, check, id, subject, severity}  1 per finding (no message: free text is no label;
                                                  a job's diagnosis: node is the culprits' hosts)
    hc_check_duration_seconds{node, check}
    ... every measurement a check recorded (METRICS), then the pair/group tests of a deep
    sweep: hc_group_status{group, kind, status}, hc_group_busbw_bytes_per_second{group,
    kind, metric, size}, hc_group_ib_write_bw_bytes_per_second{group, kind, port}.

Statuses are one-hot (a StateSet): one series per status, 1 for the current one and 0
for the others. `hc_check_status{status="FAIL"} == 1` is a whole alert rule, `sum by
(status)` counts, and because the zeros keep every series present, a check that
recovers resolves its alert when the file is rewritten instead of when a series goes
stale; a numeric code would make "FAIL or ERROR" arithmetic on codes that change
meaning when a status is added.

Bounds: a label value longer than `label_max_chars` keeps its head and a hash of the
whole (so two long values never merge into one series), control and other unprintable
characters are written as `\\xNN`/`\\uNNNN` text (bytes that are not UTF-8 would make
node_exporter reject the whole file), at most `max_findings_per_node` findings per node
and `max_series` series per file, taken in order of importance (run, node status, finding
counts, check status, findings, measurements, groups); what is left out is counted in
`hc_export_dropped_series`. Free text (messages, evidence, reasons) is never a label.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import re
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from healthcheck.core.atomic import WriteError, classify, write_atomic
from healthcheck.core.config.schema import PrometheusSettings
from healthcheck.core.model import Metric, Report
from healthcheck.core.status import Status

STATUSES = tuple(s.value for s in Status)
SEVERITIES = ("FAIL", "ERROR", "WARN")  # the finding statuses counted per node
SUFFIX = ".prom"
# a temporary file older than this was left by a run killed mid-write (its hard deadline)
STALE_TEMP_S = 600.0
_COMMAND_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")

GB = 1e9  # nccl-tests' GB/s are 10^9 bytes per second
GBIT = 1e9 / 8  # Gb/s in bytes per second
GIB = float(2**30)


class MetricMap:
    """How one of hc's metrics becomes a Prometheus series: family, type, unit scale and
    the labels its component (and name) give. (A plain class: a dataclass would cost the
    prologue a millisecond to define.)"""

    __slots__ = ("family", "fixed", "help", "kind", "labels", "scale", "split")

    def __init__(self, family: str, help: str, labels: tuple[str, ...] = (), scale: float = 1.0, *,
                 kind: str = "gauge", split: str | None = None, fixed: tuple[tuple[str, str], ...] = ()) -> None:
        self.family = family
        self.help = help
        self.labels = labels  # labels the component gives, besides node
        self.scale = scale
        self.kind = kind  # gauge | counter (the family's name then ends in _total)
        self.split = split  # the component splits at the last of these into the labels
        self.fixed = fixed  # constant labels (from the metric's own name, e.g. counter=...)


def _ib_counter(name: str) -> MetricMap:
    return MetricMap("hc_ib_port_errors_total", "InfiniBand port error counters as sysfs reads them, per counter.",
                     ("port",), kind="counter", fixed=(("counter", name),))


def _ecc(kind: str) -> MetricMap:
    return MetricMap("hc_gpu_ecc_volatile_errors_total", "ECC errors a GPU counted since the driver loaded.",
                     ("gpu",), kind="counter", fixed=(("type", kind),))


# hc's metric name -> its series; a name not here is exported as hc_metric when numeric
METRICS: dict[str, MetricMap] = {
    "temperature_c": MetricMap("hc_gpu_temperature_celsius", "GPU temperature.", ("gpu",)),
    "ecc_volatile_corrected": _ecc("corrected"),
    "ecc_volatile_uncorrected": _ecc("uncorrected"),
    "remapped_rows_correctable": MetricMap("hc_gpu_remapped_rows", "GPU memory rows remapped, by cause.", ("gpu",),
                                           fixed=(("type", "correctable"),)),
    "remapped_rows_uncorrectable": MetricMap("hc_gpu_remapped_rows", "GPU memory rows remapped, by cause.", ("gpu",),
                                             fixed=(("type", "uncorrectable"),)),
    "retired_pages_dbe": MetricMap("hc_gpu_retired_pages", "GPU memory pages retired for double-bit ECC errors.",
                                   ("gpu",)),
    "pcie_width": MetricMap("hc_gpu_pcie_link_width", "GPU PCIe link width (lanes) now.", ("gpu",)),
    "pcie_gen": MetricMap("hc_gpu_pcie_link_generation", "GPU PCIe link generation now.", ("gpu",)),
    "nvlink_active": MetricMap("hc_gpu_nvlinks_active", "NVLinks of a GPU that are active.", ("gpu",)),
    "gpu_count": MetricMap("hc_gpus", "GPUs NVML sees on the node."),
    "xid_events": MetricMap("hc_gpu_xid_events", "NVIDIA Xid events in the kernel-log window the run read."),
    "kernel_log_lines": MetricMap("hc_kernel_log_lines_read", "Kernel-log lines the Xid check read."),
    "rate_gbps": MetricMap("hc_ib_port_rate_bytes_per_second", "InfiniBand port rate.", ("port",), GBIT),
    "mtu": MetricMap("hc_network_mtu_bytes", "Network interface MTU.", ("interface",)),
    "mem_total_gib": MetricMap("hc_memory_total_bytes", "Memory the node has.", (), GIB),
    "free_gib": MetricMap("hc_filesystem_free_bytes", "Free space of a path the fabric names.", ("path",), GIB),
    "busbw_gbytes_per_s": MetricMap("hc_busbw_bytes_per_second",
                                    "Bus bandwidth of a collective on the node (best attempt), per message size.",
                                    ("collective", "scope", "size"), GB, split="/"),
    "bw_gbps": MetricMap("hc_ib_write_bw_bytes_per_second", "ib_write_bw loopback bandwidth of an HCA port.",
                         ("port",), GBIT),
    "counter_rise": MetricMap("hc_ib_write_bw_counter_rise",
                              "Rise of an HCA port's error counter during its ib_write_bw test.",
                              ("port", "counter"), split=":"),
}
for _name in ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
              "port_rcv_remote_physical_errors", "port_xmit_discards", "local_link_integrity_errors",
              "excessive_buffer_overrun_errors"):
    METRICS[_name] = _ib_counter(_name)

# text metrics worth a series: versions and models as info labels (bounded: one value each)
INFO: dict[str, tuple[str, str, str, str]] = {  # name -> family, help, component label, value label
    "fw_ver": ("hc_ib_firmware_info", "HCA firmware version, per port.", "port", "version"),
    "model": ("hc_gpu_model_info", "GPU model.", "gpu", "model"),
    "vbios_version": ("hc_gpu_vbios_info", "GPU VBIOS version.", "gpu", "version"),
    "driver_version": ("hc_software_info", "Versions of the GPU software stack hc saw.", "", "version"),
    "cuda_version": ("hc_software_info", "Versions of the GPU software stack hc saw.", "", "version"),
    "nccl_version": ("hc_software_info", "Versions of the GPU software stack hc saw.", "", "version"),
}

FALLBACK = MetricMap("hc_metric", "A numeric measurement hc has no series of its own for (metric and unit as hc "
                     "names them).", ("component",))


class _Family:
    __slots__ = ("help", "kind", "labels", "samples")

    def __init__(self, kind: str, help: str, labels: tuple[str, ...]) -> None:
        self.kind = kind
        self.help = help
        self.labels = labels
        self.samples: dict[tuple[str, ...], float] = {}


class Series:
    """The series of one file, deduplicated (first wins) and bounded."""

    def __init__(self, base: dict[str, str], max_series: int, label_max_chars: int) -> None:
        self.base = base
        self.room = max_series
        self.cap = label_max_chars
        self.dropped = 0
        self.families: dict[str, _Family] = {}

    def label(self, value: object) -> str:
        return label_value(value, self.cap)

    def _family(self, name: str, kind: str, help: str, labels: tuple[str, ...]) -> _Family:
        fam = self.families.get(name)
        if fam is None:
            fam = self.families[name] = _Family(kind, help, tuple(self.base) + labels)
        return fam

    def take(self, n: int) -> bool:
        """Room for n more series; counts them dropped when there is none."""
        if n > self.room:
            self.dropped += n
            return False
        self.room -= n
        return True

    def add(self, name: str, help: str, labels: dict[str, object], value: float, kind: str = "gauge",
            *, counted: bool = True) -> None:
        if counted and not self.take(1):
            return
        fam = self._family(name, kind, help, tuple(labels))
        key = tuple(self.base.values()) + tuple(self.label(labels.get(k, "")) for k in fam.labels[len(self.base):])
        fam.samples.setdefault(key, float(value))

    def one_hot(self, name: str, help: str, labels: dict[str, object], status: Status) -> None:
        if not self.take(len(STATUSES)):
            return
        for s in STATUSES:
            self.add(name, help, {**labels, "status": s}, 1.0 if s == status.value else 0.0, counted=False)


def label_value(value: object, cap: int = 128) -> str:
    """A label value node_exporter accepts and a reader can trust: unprintable characters
    (controls, lone surrogates from a non-UTF-8 name, bidi overrides) written as escapes,
    the newline left to the format's own escaping, at most `cap` characters (a longer
    value keeps its head and a hash of the whole, so distinct values stay distinct)."""
    text = str(value)
    if not text.isprintable():
        text = "".join(c if c.isprintable() or c == "\n" else c.encode("unicode_escape").decode("ascii")
                       for c in text)
    if len(text) > cap:
        digest = hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:8]
        text = f"{text[:cap - 9]}~{digest}"
    return text


def command_of(report: Report) -> str:
    """The run's kind, as the file name and the `command` label say it: "node", "sweep", "prologue"..."""
    word = (report.command.split() or ["node"])[0]
    return word if _COMMAND_RE.match(word) else "run"


def file_name(command: str) -> str:
    return f"hc-{command}{SUFFIX}"


def _epoch(text: str) -> float | None:
    try:
        return _dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an int past a float: not a measurement anyone made
            return None
    return None


def _split(component: str, sep: str, parts: int) -> list[str]:
    """The component cut at its last separators into `parts` labels (padded when it has fewer)."""
    pieces = component.rsplit(sep, parts - 1)
    return [""] * (parts - len(pieces)) + pieces


def build(report: Report, settings: PrometheusSettings | None = None, command: str | None = None) -> Series:
    """Every series the report gives, bounded by `settings` (the schema's defaults when None)."""
    if settings is None:
        settings = PrometheusSettings()
    series = Series({"command": command or command_of(report), "tier": label_value(report.tier)},
                    settings.max_series, settings.label_max_chars)
    _run_series(series, report)
    nodes = report.nodes
    for n in nodes:
        series.one_hot("hc_node_status", "The node's worst status in the run.", {"node": n.node, "fabric": n.fabric},
                       n.status)
    for n in nodes:
        counts = {s: 0 for s in SEVERITIES}
        for f in n.findings:
            if f.status.value in counts:
                counts[f.status.value] += 1
        for severity, count in counts.items():
            series.add("hc_findings", "Findings per node and severity in the run.",
                       {"node": n.node, "severity": severity}, count)
    for n in nodes:
        for c in n.checks:
            series.one_hot("hc_check_status", "A check's status on the node.", {"node": n.node, "check": c.name},
                           c.status)
    for n in nodes:
        _findings(series, n.findings, settings.max_findings_per_node)
    _findings(series, report.run_findings, settings.max_findings_per_node)
    for g in report.groups:
        _findings(series, g.findings, settings.max_findings_per_node, culprits=g.kind == "job")
    for n in nodes:
        for c in n.checks:
            series.add("hc_check_duration_seconds", "How long a check took on the node.",
                       {"node": n.node, "check": c.name}, c.duration_s)
    for n in nodes:
        for m in n.metrics:
            _metric(series, n.node, m)
    _group_series(series, report)
    series.add("hc_export_dropped_series", "Series left out of this file by hc's bounds (prometheus.max_series, "
               "prometheus.max_findings_per_node).", {}, series.dropped, counted=False)
    return series


def _run_series(series: Series, report: Report) -> None:
    finished = _epoch(report.finished_at)
    series.add("hc_last_run_timestamp_seconds", "When the run finished (Unix time).", {},
               finished if finished is not None else time.time(), counted=False)
    series.add("hc_run_duration_seconds", "How long the run took.", {}, report.duration_s, counted=False)
    for s in STATUSES:  # run-level series are never dropped: an alert on staleness needs them
        series.add("hc_run_status", "The run's worst status.", {"status": s}, 1.0 if s == report.status.value else 0.0,
                   counted=False)
    series.add("hc_run_info", "The hc version and config digest of the run.",
               {"hc_version": report.hc_version, "config_digest": report.config_digest}, 1, counted=False)
    if len(report.nodes) > 1 or report.analyses:  # a sweep's fleet view
        by_status = {s: 0 for s in STATUSES}
        for n in report.nodes:
            by_status[n.status.value] += 1
        for s, count in by_status.items():
            series.add("hc_nodes", "Nodes per status in the run.", {"status": s}, count)
        for a in report.analyses:
            series.one_hot("hc_analysis_status", "A fleet or pair analysis's status in the run.",
                           {"analysis": a.name}, a.status)


def _findings(series: Series, findings: Iterable[Any], most: int, *, culprits: bool = False) -> None:
    """One hc_finding per finding. `culprits` (a job's diagnosis, diag.E0xx): its node label is
    the culprit ranks' hosts (the finding's members), so a diagnosis is found by node as a node's
    finding is; a pair's or group's findings name no node."""
    for i, f in enumerate(findings):
        if i >= most:
            series.dropped += 1
            continue
        node = f.node or (",".join(f.members) if culprits else "")
        series.add("hc_finding", "A finding of the run (1); the message is in hc's JSON report.",
                   {"node": node, "check": f.check, "id": f.id, "subject": f.subject or f.component,
                    "severity": f.status.value}, 1)


def _metric(series: Series, node: str, m: Metric) -> None:
    info = INFO.get(m.name)
    if info is not None:
        if isinstance(m.value, str) and m.value:
            family, help, where, what = info
            labels: dict[str, object] = {"node": node}
            if where:
                labels[where] = m.component
            else:
                labels["software"] = m.name.removesuffix("_version")
            labels[what] = m.value
            series.add(family, help, labels, 1)
        return
    value = _number(m.value)
    if value is None:  # text (a kernel-log window, a version hc has no series for): never a label
        return
    spec = METRICS.get(m.name)
    if spec is None:
        series.add(FALLBACK.family, FALLBACK.help,
                   {"node": node, "metric": m.name, "component": m.component, "unit": m.unit or ""}, value)
        return
    labels = {"node": node}
    if spec.split is not None:
        labels.update(zip(spec.labels, _split(m.component, spec.split, len(spec.labels)), strict=True))
    elif spec.labels:
        labels[spec.labels[0]] = m.component
    labels.update(spec.fixed)
    series.add(spec.family, spec.help, labels, value * spec.scale, spec.kind)


def _group_series(series: Series, report: Report) -> None:
    for g in report.groups:
        series.one_hot("hc_group_status", "A test of several nodes together (a pair, a group): its status.",
                       {"group": g.name, "kind": g.kind}, g.status)
    for g in report.groups:
        for m in g.metrics:
            value = _number(m.value)
            if value is None:
                continue
            if m.name == "busbw" or m.name.endswith("_busbw"):
                series.add("hc_group_busbw_bytes_per_second",
                           "Bus bandwidth of a test between nodes, per message size (metric: the tool's figure).",
                           {"group": g.name, "kind": g.kind, "metric": m.name, "size": m.component}, value * GB)
            elif m.name == "ib_write_bw_gbits":
                series.add("hc_group_ib_write_bw_bytes_per_second",
                           "ib_write_bw bandwidth between two nodes, per HCA port.",
                           {"group": g.name, "kind": g.kind, "port": m.component}, value * GBIT)


def render(report: Report, settings: PrometheusSettings | None = None, command: str | None = None) -> bytes:
    """The textfile's content (Prometheus text format 0.0.4, UTF-8)."""
    return to_text(build(report, settings, command))


def to_text(series: Series) -> bytes:
    """The Prometheus text format 0.0.4 (UTF-8) as prometheus_client writes it: HELP and
    TYPE per family, labels sorted by name, label values with backslash, double quote and
    newline escaped, HELP with backslash and newline escaped, values as Go prints them."""
    out: list[str] = []
    for name, fam in series.families.items():
        out.append(f"# HELP {name} {_escape_help(fam.help)}\n# TYPE {name} {fam.kind}\n")
        for key, value in fam.samples.items():
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(zip(fam.labels, key, strict=True)))
            out.append(f"{name}{{{labels}}} {_float(value)}\n" if labels else f"{name} {_float(value)}\n")
    return "".join(out).encode("utf-8")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _float(value: float) -> str:
    """A sample value as prometheus_client's floatToGoString writes it (Go's forms: +Inf,
    -Inf, NaN, and an exponent from 1e+07 on)."""
    if value != value:
        return "NaN"
    if value in (_INF, -_INF):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:  # Go switches to an exponent sooner than Python
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


_INF = float("inf")


def export(report: Report, directory: str | os.PathLike[str], settings: PrometheusSettings | None = None,
           command: str | None = None) -> Path:
    """Write the report's series to `<directory>/hc-<command>.prom`, atomically; returns the path.

    The directory must exist (a typo in the config must not create a directory nobody
    scrapes). Raises HcError (exit 4) with one line when the file cannot be written.
    """
    command = command or command_of(report)
    if not _COMMAND_RE.match(command):  # it names the file: never a path
        raise ValueError(f"not a command name for a textfile: {command!r}")
    directory = check_directory(directory)
    path = directory / file_name(command)
    kind = classify(path)  # a link, directory, block device or socket: WriteError
    if kind not in ("new", "regular"):
        # write_atomic would write a device or FIFO in place: a textfile is replaced, or nothing
        raise WriteError(f"{path}: cannot write: it is a {'FIFO' if kind == 'fifo' else 'device'}, not a regular file")
    data = render(report, settings, command)
    _remove_stale_temps(directory, path.name)
    write_atomic(path, data, 0o644)  # node_exporter runs as its own user: it must be able to read it
    return path


def check_directory(directory: str | os.PathLike[str]) -> Path:
    """The textfile directory, if it is one (WriteError otherwise): checked before a long
    run as well as at its end."""
    directory = Path(directory)
    try:
        st = os.stat(directory)  # a textfile directory may be a link to one
    except FileNotFoundError:
        raise WriteError(f"{_show(directory)}: the Prometheus textfile directory does not exist") from None
    except (OSError, ValueError) as exc:
        raise WriteError(f"{_show(directory)}: cannot use as the Prometheus textfile directory: "
                         f"{getattr(exc, 'strerror', None) or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise WriteError(f"{_show(directory)}: the Prometheus textfile directory is not a directory")
    return directory


def _show(path: Path) -> str:
    text = str(path)
    return text if text.isprintable() else repr(text)


def _remove_stale_temps(directory: Path, name: str) -> None:
    """Remove temporary files of ours that a run killed mid-write (at its hard deadline) left."""
    prefix, now = f".{name}.", time.time()
    try:
        with os.scandir(directory) as entries:
            for e in entries:
                if e.name.startswith(prefix) and e.name.endswith(".tmp") and e.is_file(follow_symlinks=False):
                    if now - e.stat(follow_symlinks=False).st_mtime > STALE_TEMP_S:
                        os.unlink(e.path)
    except OSError:
        pass  # housekeeping: the export itself says what is wrong with the directory
