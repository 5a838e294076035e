"""The typed shape of the main config and of fabric files.

Units live in key names: `mtu` (bytes), `rate_gbps` (gigabits/s, as ibstat prints),
`*_gbytes_per_s` (gigabytes/s, as nccl-tests prints busbw), `*_gib` (GiB), `*_c` (Celsius).
A key left out (None) means "no expectation": the check then only looks at what is there.

Every value has a range, not only a type: a number that validates but cannot be meant
(an infinite or NaN threshold, a negative limit, a fraction of 7, a port of 0) would
otherwise fail every node, or silently turn a check or a guard off. Ranges live on the
types (msgspec `Meta`, checked by msgspec.convert with the key's path); rules across
fields (mtu_min <= mtu_max) and on the shape of strings msgspec cannot express (globs)
are each section's `problems()`, which `value_problems` collects with their key paths.
Every float has both bounds, so none can be infinite or NaN.
"""

# No `from __future__ import annotations`: the fields' types are objects once the classes
# are made, so msgspec's conversion of each config need not compile and evaluate every
# one from its text (typing.ForwardRef: ~230 per prologue).
from collections.abc import Iterable, Iterator
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from healthcheck.core.gpu_vocabulary import THROTTLE_REASONS
from healthcheck.core.tiers import TierOrContext
from healthcheck.core.units import parse_size

# (key path inside the section, message, related key paths the message names)
Problem = tuple[tuple[Any, ...], str, tuple[tuple[Any, ...], ...]]

# --------------------------------------------------------------- value ranges

NO_CONTROL_RE = r"^[^\x00-\x1f\x7f]+$"
ABSOLUTE_PATH_RE = r"^/[^\x00-\x1f\x7f]*$"
PROCESS_NAME_RE = r"^[^/\s\x00-\x1f\x7f]+$"
SIZE_RE = r"^\s*\d+(\.\d+)?\s*[KMGTkmgt]?i?B?\s*$"
# msgspec names a pattern by its regex; errors say what it means instead
PATTERN_WORDS = {
    NO_CONTROL_RE: "non-empty text without control characters",
    ABSOLUTE_PATH_RE: "an absolute path (starting with /, no control characters)",
    PROCESS_NAME_RE: "a process name (no /, spaces or control characters)",
    SIZE_RE: "a size in bytes, or with K, M, G or T (binary: 16G is 16 GiB)",
}

Text = Annotated[str, Meta(min_length=1, max_length=1024, pattern=NO_CONTROL_RE)]  # names, versions, commands
PathText = Annotated[str, Meta(min_length=1, max_length=4096, pattern=NO_CONTROL_RE)]  # may be relative, or ~/...
AbsPath = Annotated[str, Meta(max_length=4096, pattern=ABSOLUTE_PATH_RE)]  # read on the node, whatever its cwd
Glob = Annotated[str, Meta(min_length=1, max_length=256, pattern=NO_CONTROL_RE)]  # fnmatch; see glob_problem
ProcessName = Annotated[str, Meta(max_length=256, pattern=PROCESS_NAME_RE)]

Mtu = Annotated[int, Meta(ge=68, le=65536)]  # IPv4's minimum .. the loopback's 64 KiB
Count = Annotated[int, Meta(ge=0, le=4096)]  # things on one node: interfaces, HCAs, GPUs, links
CounterLimit = Annotated[int, Meta(ge=0, le=10**12)]  # error counters since the last reset
Gbps = Annotated[float, Meta(gt=0, le=10_000.0)]  # a port's or HCA's rate, Gb/s
GBps = Annotated[float, Meta(gt=0, le=100_000.0)]  # NCCL busbw, GB/s
Gib = Annotated[float, Meta(ge=0, le=float(2**30))]  # up to an exbibyte
Celsius = Annotated[float, Meta(gt=0, le=150.0)]
Mib = Annotated[int, Meta(ge=0, le=2**24)]  # up to 16 TiB
Bytes = Annotated[int, Meta(ge=1, le=2**40)]
PcieGen = Annotated[int, Meta(ge=1, le=8)]
PcieWidth = Annotated[int, Meta(ge=1, le=32)]
XidCode = Annotated[int, Meta(ge=0, le=65535)]

Seconds = Annotated[float, Meta(gt=0, le=86_400.0)]  # a timeout or deadline: positive, at most a day
LongSeconds = Annotated[float, Meta(gt=0, le=7 * 86_400.0)]  # a whole sweep, everything on one node
Delay = Annotated[float, Meta(ge=0, le=3_600.0)]  # a wait that may be zero
Fraction = Annotated[float, Meta(ge=0, le=1.0)]
Port = Annotated[int, Meta(ge=1, le=65535)]
NodeCount = Annotated[int, Meta(ge=0, le=1_000_000)]


def glob_problem(pattern: str) -> str | None:
    """Why fnmatch would never match `pattern` as meant, if it would not: an unclosed "["
    is taken literally ("ib[0-7" matches only itself) and a reversed range ("[7-0]")
    matches nothing, so a required interface or HCA would be missing on every node."""
    i, n = 0, len(pattern)
    while i < n:
        if pattern[i] != "[":
            i += 1
            continue
        j = i + 1
        if j < n and pattern[j] == "!":
            j += 1
        if j < n and pattern[j] == "]":
            j += 1  # a "]" first in the class is a literal
        while j < n and pattern[j] != "]":
            j += 1
        if j >= n:
            return f"{pattern!r}: '[' at {i} is never closed (fnmatch would take it literally)"
        body = pattern[i + 1 : j]
        body = body.removeprefix("!")
        for k in range(1, len(body) - 1):
            if body[k] == "-" and body[k - 1] > body[k + 1]:
                return f"{pattern!r}: range {body[k - 1]}-{body[k + 1]} is reversed and matches nothing"
        i = j + 1
    return None


def _globs(key: str, patterns: Any) -> Iterator[Problem]:
    # a mapping's globs are its keys, a list's its items; `at` is where the problem is
    pairs = ((at, at) for at in patterns) if isinstance(patterns, dict) else enumerate(patterns)
    for at, pattern in pairs:
        why = glob_problem(pattern)
        if why:
            yield (key, at), why, ()


def _not_above(low_key: str, low: float | None, high_key: str, high: float | None) -> Iterator[Problem]:
    if low is not None and high is not None and low > high:
        yield (low_key,), f"{low_key} {low:g} is above {high_key} {high:g}", ((high_key,),)


class Strict(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Base for config sections: unknown keys and wrong types are errors."""

    def problems(self) -> Iterator[Problem]:
        """Rules across this section's fields (ranges of single fields are on their types)."""
        return iter(())


def value_problems(value: Any, at: tuple[Any, ...] = ()) -> Iterator[Problem]:
    """Every rule a converted config breaks, with key paths from `value`'s root."""
    if isinstance(value, Strict):
        for path, message, related in value.problems():
            yield at + path, message, tuple(at + r for r in related)
        for name in value.__struct_fields__:
            yield from value_problems(getattr(value, name), at + (name,))
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (Strict, dict, list)):
                yield from value_problems(item, at + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, (Strict, dict, list)):
                yield from value_problems(item, at + (index,))


# ---------------------------------------------------------------------------- fabric


class InterfaceSpec(Strict, frozen=True):
    mtu: Mtu | None = None  # expected MTU of every interface matching the pattern
    count: Count | None = None  # exact number of interfaces that must match
    required: bool = True  # at least one interface must match

    def problems(self) -> Iterator[Problem]:
        if self.count == 0 and self.required:
            yield ("count",), "count 0 with required: true fails every node (add required: false to forbid them)", ()


class NetLimits(Strict, frozen=True):
    # glob pattern of interface names -> expectations, e.g. {"ib*": {mtu: 4092, count: 8}}
    interfaces: dict[Glob, InterfaceSpec] = {}
    # sanity bounds for every other interface that is up (WARN outside them)
    mtu_min: Mtu | None = None
    mtu_max: Mtu | None = None
    # glob patterns of interfaces the sanity bounds skip
    ignore: list[Glob] = msgspec.field(default_factory=lambda: ["lo"])

    def problems(self) -> Iterator[Problem]:
        if self.mtu_min is not None and self.mtu_max is not None and self.mtu_min > self.mtu_max:
            yield ("mtu_min",), f"mtu_min {self.mtu_min} is above mtu_max {self.mtu_max}", (("mtu_max",),)
        yield from _globs("interfaces", self.interfaces)
        yield from _globs("ignore", self.ignore)


class IbCounterLimits(Strict, frozen=True):
    """Upper limits per port error counter (names as in sysfs `ports/N/counters/`)."""

    symbol_error: CounterLimit | None = None
    link_error_recovery: CounterLimit | None = None
    link_downed: CounterLimit | None = None
    port_rcv_errors: CounterLimit | None = None
    port_rcv_remote_physical_errors: CounterLimit | None = None
    port_xmit_discards: CounterLimit | None = None
    local_link_integrity_errors: CounterLimit | None = None
    excessive_buffer_overrun_errors: CounterLimit | None = None
    # not an HCA counter: the port's netdev's /sys/class/net/<netdev>/carrier_changes (its
    # IPoIB or RoCE interface), read beside them; its rate is between runs (ib.rates)
    carrier_changes: CounterLimit | None = None


Per = Literal["second", "minute", "hour"]
PER_SECONDS = {"second": 1.0, "minute": 60.0, "hour": 3600.0}
RateCount = Annotated[float, Meta(ge=0, le=1e12)]


class Rate(Strict, frozen=True):
    """A count per unit of time: `{count: 120, per: hour}`."""

    count: RateCount
    per: Per = "second"

    @property
    def per_second(self) -> float:
        return self.count / PER_SECONDS[self.per]


class Delta(Strict, frozen=True):
    """A rise between two recorded runs, whatever the time between them: `{above: 2, status: WARN}`."""

    above: RateCount
    status: Literal["FAIL", "WARN"] = "WARN"


class CounterRate(Strict, frozen=True):
    """How fast one error counter may rise between a node's recorded runs (analyses/over_time.py):
    any rise at all is `any_increase` (FAIL or WARN), a rise of more than `delta.above` between
    two runs is `delta.status` (NVSentinel's "delta" thresholds), or a rise faster than `fail`
    FAILs and one faster than `warn` WARNs (each with its own unit: they are judged apart, FAIL
    first)."""

    any_increase: Literal["FAIL", "WARN"] | None = None
    delta: Delta | None = None
    warn: Rate | None = None
    fail: Rate | None = None


# IbLimits.rates' defaults (its comment names their source)
def _default_ib_rates() -> dict[str, CounterRate]:
    return {
        "link_downed": CounterRate(any_increase="FAIL"),
        "excessive_buffer_overrun_errors": CounterRate(any_increase="FAIL"),
        "local_link_integrity_errors": CounterRate(any_increase="FAIL"),
        "symbol_error": CounterRate(warn=Rate(count=10.0, per="second"), fail=Rate(count=120.0, per="hour")),
        "link_error_recovery": CounterRate(warn=Rate(count=5.0, per="minute")),
        "port_rcv_errors": CounterRate(warn=Rate(count=10.0, per="second")),
        "port_xmit_discards": CounterRate(warn=Rate(count=100.0, per="second")),
        "carrier_changes": CounterRate(delta=Delta(above=2.0, status="WARN")),
    }


IB_COUNTER_NAMES = frozenset(IbCounterLimits.__struct_fields__)
# the GPU counters a rate may be set for (the metrics gpu.ecc records)
GPU_COUNTER_NAMES = frozenset({"ecc_volatile_corrected", "ecc_volatile_uncorrected", "remapped_rows_correctable",
                               "remapped_rows_uncorrectable", "retired_pages_dbe"})


def unknown_counters(names: Iterable[str], known: frozenset[str]) -> Iterator[Problem]:
    """A problem for each of `names` (a `rates` map's keys) that is no counter of `known`."""
    for name in names:
        if name not in known:
            yield ("rates", name), f"unknown counter {name!r} (known: {', '.join(sorted(known))})", ()


class TrendSettings(Strict, frozen=True):
    """Trends over a node's recorded runs (analyses/over_time.py): a least-squares slope over the
    newest `window_runs` readings (at least `min_runs`, spanning `min_span_h` hours) that would
    reach the fabric's limit within `warn_within_days` WARNs, never FAILs. `min_fit` is the share
    of the readings' variance the line must explain (R²): a flat, noisy counter never warns."""

    enabled: bool = True
    window_runs: Annotated[int, Meta(ge=3, le=1000)] = 48  # the newest readings a slope is fitted over
    min_runs: Annotated[int, Meta(ge=3, le=1000)] = 4  # fewer readings since the last reset: no trend
    min_span_h: Annotated[float, Meta(ge=0, le=8760.0)] = 6.0  # readings closer together: no trend
    warn_within_days: Annotated[float, Meta(gt=0, le=365.0)] = 7.0  # WARN when the limit is this close
    min_fit: Annotated[float, Meta(ge=0, le=1.0)] = 0.8  # R² below this: noise, no trend

    def problems(self) -> Iterator[Problem]:
        if self.min_runs > self.window_runs:
            yield ("min_runs",), f"min_runs {self.min_runs} is above window_runs {self.window_runs}", (
                ("window_runs",),)


class IbLimits(Strict, frozen=True):
    hcas: list[Glob] = msgspec.field(default_factory=lambda: ["*"])  # glob patterns of the compute HCAs' names
    hca_types: list[Text] = []  # and/or their CA types (e.g. MT4129 for ConnectX-7)
    hca_count: Count | None = None  # compute HCAs that must be present
    rate_gbps: Gbps | None = None  # expected port rate
    # The link layer of the compute ports. Ports of another link layer (a frontend
    # Ethernet port on an InfiniBand node) are not compute ports: a compute HCA that came
    # up in the wrong mode shows as a missing HCA (ib.E001), with the odd port named.
    link_layer: Literal["InfiniBand", "Ethernet"] | None = None
    # Ports whose physical state is Disabled were switched off on purpose (an unused
    # frontend port): ignore them instead of failing the node.
    allow_disabled: bool = False
    counters_fail: IbCounterLimits = IbCounterLimits()  # FAIL above these
    counters_warn: IbCounterLimits = IbCounterLimits()  # WARN above these
    # How fast each counter may rise between the node's recorded runs (names as in
    # counters_fail); a fabric's map replaces this one whole ({} judges no rate). The defaults
    # are NVIDIA NVSentinel's NIC health monitor's counter profile
    # (https://docs.nvidia.com/nvsentinel/v1.30.0/configuration/nic-health-monitor.md): its
    # fatal counters FAIL on any increase, symbol_error_fatal (> 120/hour) FAILs, its other
    # velocity thresholds WARN, and its interface-level carrier_changes (a "delta" above 2
    # between polls, non-fatal) WARNs on a rise above 2 between runs.
    rates: dict[Text, CounterRate] = msgspec.field(default_factory=_default_ib_rates)

    def problems(self) -> Iterator[Problem]:
        yield from _globs("hcas", self.hcas)
        yield from unknown_counters(self.rates, IB_COUNTER_NAMES)


class SysLimits(Strict, frozen=True):
    mem_total_min_gib: Gib | None = None
    disk_free_min_gib: dict[AbsPath, Gib] = {}  # path -> free GiB it must have
    mounts: list[AbsPath] = []  # mount points that must be mounted
    services: dict[Text, ProcessName] = {}  # service name -> process (executable) name that must run


Severity = Literal["FAIL", "WARN", "ignore"]


class XidPolicy(Strict, frozen=True):
    """Where Xid events are read and what each code means for the node."""

    # auto: /dev/kmsg if readable, else `dmesg`, else `journalctl -k`; file: `file`
    source: Literal["auto", "kmsg", "dmesg", "journal", "file"] = "auto"
    file: AbsPath | None = None
    severity: dict[XidCode, Severity] = {}  # Xid code -> what it means for the node
    unknown: Severity = "WARN"  # codes not in the table
    sxid_fatal: Severity = "FAIL"  # NVSwitch SXid lines marked Fatal
    sxid_other: Severity = "WARN"

    def problems(self) -> Iterator[Problem]:
        if self.source == "file" and self.file is None:
            yield ("source",), "is 'file' but xid.file names no file", ()


class NvLinkCounterLimits(Strict, frozen=True):
    """Upper limits per NVLink error counter (NVML's DL counters)."""

    crc_flit_errors: CounterLimit | None = None
    crc_data_errors: CounterLimit | None = None
    replay_errors: CounterLimit | None = None
    recovery_errors: CounterLimit | None = None


class DcgmSettings(Strict, frozen=True):
    """NVIDIA DCGM's diagnostic, `dcgmi diag -r LEVEL -j`: gpu.dcgm runs level_standard in
    the standard tier (every node, busy or not; level 1 takes seconds, level 2 about two
    minutes and runs only where no compute process is on the GPUs it tests: its memory and
    PCIe tests fail beside a job's work), and
    gpu.dcgm_deep runs level_deep in the deep tier, only on a node with no job (levels 3-4
    stress every GPU for half an hour or more). Off unless a fabric turns it on: a site
    without DCGM would otherwise see every standard run ERROR; turned on, a node where
    dcgmi or nv-hostengine is missing is ERROR (never FAIL)."""

    enabled: bool = False
    dcgmi: PathText = "dcgmi"  # the command, or its path
    host: Text | None = None  # dcgmi --host: the nv-hostengine to use (default: localhost, else dcgmi's embedded one)
    level_standard: Annotated[int, Meta(ge=1, le=2)] = 1  # -r: 1 Deployment, 2 + PCIe and memory (idle GPUs only)
    level_deep: Annotated[int, Meta(ge=1, le=4)] = 3  # -r: 3 + stress (long), 4 + more stress (extended)
    # hc's own time limits around one dcgmi run (each within its check's budget: 10 min, 4 h)
    timeout_standard_s: Annotated[float, Meta(gt=0, le=600.0)] = 300.0
    timeout_deep_s: Annotated[float, Meta(gt=0, le=14_400.0)] = 3600.0


class GpuLimits(Strict, frozen=True):
    count: Count | None = None
    model: Text | None = None  # NVML/nvidia-smi product name, e.g. "NVIDIA H100 80GB HBM3"
    # memory errors
    ecc_volatile_corrected_max: CounterLimit | None = None  # WARN above (uncorrected > 0 always FAILs)
    retired_pages_pending: Severity = "FAIL"
    remapped_rows_pending: Severity = "FAIL"  # the GPU needs a reset before the remap takes effect
    # Retired pages (single- and double-bit ECC together, pre-Ampere page retirement: NVIDIA's
    # Dynamic Page Retirement, https://docs.nvidia.com/deploy/dynamic-page-retirement/index.html):
    # FAIL above this many; trends project when the count reaches it. 63 is NVIDIA DCGM's
    # DCGM_LIMIT_MAX_RETIRED_PAGES, "updated to match the field diag"
    # (https://github.com/NVIDIA/DCGM/blob/master/common/DcgmGPUHardwareLimits.h).
    retired_pages_max: CounterLimit | None = 63
    # Memory banks with low or no row-remap availability (NVML's row-remapper histogram, its
    # "low" and "none" levels; Ampere and later): WARN above this many, and trends project when
    # the count reaches it. None: NVIDIA documents no such count to act on (a failed remap,
    # gpu.E014, FAILs at once), so a fabric sets it.
    remap_banks_low_max: CounterLimit | None = None
    # thermals and clocks
    temp_max_c: Celsius | None = None
    throttle_fail: list[Text] = msgspec.field(
        default_factory=lambda: ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"]
    )
    throttle_warn: list[Text] = msgspec.field(default_factory=lambda: ["sw_thermal_slowdown"])
    # PCIe: expected link; without them, current is compared with the GPU's maximum
    pcie_gen: PcieGen | None = None
    pcie_width: PcieWidth | None = None
    # NVLink
    nvlink_count: Count | None = None  # active links per GPU (18 on H100 SXM, 12 on A100 SXM)
    nvlink_errors_warn: NvLinkCounterLimits = NvLinkCounterLimits()
    nvlink_errors_fail: NvLinkCounterLimits = NvLinkCounterLimits()
    # versions that must match where set (and must agree across the node's GPUs)
    driver_version: Text | None = None
    cuda_version: Text | None = None
    vbios_version: Text | None = None
    nccl_version: Text | None = None  # the system NCCL the loader finds (libnccl.so.2)
    # epilogue: memory a GPU may still show in use with no process on it
    leftover_memory_max_mib: Mib = 1024
    xid: XidPolicy = XidPolicy()
    dcgm: DcgmSettings = DcgmSettings()
    # How fast each GPU counter (ecc_volatile_corrected, ecc_volatile_uncorrected,
    # remapped_rows_correctable, remapped_rows_uncorrectable, retired_pages_dbe) may rise
    # between the node's recorded runs, as ib.rates. None by default: NVIDIA documents no
    # rate for them that hc could start from (uncorrected errors and pending remaps FAIL at
    # once; corrected ECC has a trend towards ecc_volatile_corrected_max).
    rates: dict[Text, CounterRate] = {}

    def problems(self) -> Iterator[Problem]:
        # a misspelt reason never matches: the throttling it meant would go unreported

        yield from unknown_counters(self.rates, GPU_COUNTER_NAMES)
        known = THROTTLE_REASONS.values()
        for key in ("throttle_fail", "throttle_warn"):
            for i, reason in enumerate(getattr(self, key)):
                if reason not in known:
                    yield (key, i), f"unknown throttle reason {reason!r} (known: {', '.join(known)})", ()


SizeText = Annotated[str, Meta(min_length=1, max_length=32, pattern=SIZE_RE)]  # "16G", "8M", "1048576"
Repeats = Annotated[int, Meta(ge=1, le=20)]
Iterations = Annotated[int, Meta(ge=1, le=100_000)]
EnvName = Annotated[str, Meta(min_length=1, max_length=256, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
EnvValue = Annotated[str, Meta(max_length=4096, pattern=r"^[^\x00]*$")]


def _sizes(key: str, sizes: Any) -> Iterator[Problem]:
    pairs = ((at, at) for at in sizes) if isinstance(sizes, dict) else enumerate(sizes)
    for at, text in pairs:
        try:
            parse_size(text)
        except ValueError as exc:
            yield (key, at), str(exc), ()


class BusBwFloor(Strict, frozen=True):
    """Per message size (binary units: "16G" is 16 GiB, as nccl-tests' -b/-e read them),
    the lowest busbw (GB/s, nccl-tests' definition) a healthy node or pair reaches."""

    busbw_min_gbytes_per_s: dict[SizeText, GBps] = {}

    def problems(self) -> Iterator[Problem]:
        yield from _sizes("busbw_min_gbytes_per_s", self.busbw_min_gbytes_per_s)


class CollectiveFloors(Strict, frozen=True):
    """Floors of one collective in each scope it runs in."""

    single_node: BusBwFloor = BusBwFloor()  # every GPU of the node, NVLink/NVLS
    ib_loopback: BusBwFloor = BusBwFloor()  # the same with P2P and SHM off: out through the HCAs and back
    pair: BusBwFloor = BusBwFloor()  # two nodes (NCCL_ALGO=RING for nccl-tests)


class NcclTestsSettings(Strict, frozen=True):
    """How the nccl-tests binaries run (all_reduce_perf and the others the fabric lists)."""

    enabled: bool = True
    bin_dir: PathText | None = None  # where <collective>_perf live; None: $PATH
    iters: Iterations = 20  # -n
    warmup: Iterations = 5  # -w
    ib_loopback: bool = True  # also run with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
    timeout_s: Seconds = 300.0  # hc's own, around the whole run (nccl-tests' -T skips init)
    env: dict[EnvName, EnvValue] = {}  # NCCL_IB_HCA, NCCL_ALGO, ... for every run; echoed in the report


class TorchSweepSettings(Strict, frozen=True):
    """hc's own pure-PyTorch sweep (`hc bw allreduce`), on one node and between pairs."""

    enabled: bool = True
    iters: Iterations = 20
    warmup: Iterations = 5
    timeout_s: Seconds = 300.0
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    env: dict[EnvName, EnvValue] = {}


class IbWriteBwSettings(Strict, frozen=True):
    """ib_write_bw per compute HCA: loopback on one node, HCA i <-> HCA i between a pair."""

    enabled: bool = True
    size: SizeText = "8M"  # -s
    iters: Iterations = 5000  # -n
    qps: Annotated[int, Meta(ge=1, le=1024)] = 1  # -q
    bidirectional: bool = False  # -b (then the floor from rate_fraction doubles; per_hca_min_gbps is taken as set)
    use_cuda: bool = False  # --use_cuda=<GPU of the HCA's NUMA node>: the GPU-direct path
    gid_index: Annotated[int, Meta(ge=0, le=255)] | None = None  # -x, RoCE
    port_base: Port = 18515  # HCA i listens on port_base + i
    timeout_s: Seconds = 60.0
    # Gb/s a healthy HCA reaches; None: rate_fraction x the port's sysfs rate (NVIDIA's rule)
    per_hca_min_gbps: Gbps | None = None
    per_hca_typical_gbps: Gbps | None = None  # what a healthy HCA reaches (for the record)
    rate_fraction: Annotated[float, Meta(gt=0, le=1.0)] = 0.9
    env: dict[EnvName, EnvValue] = {}  # set for both sides of every run (MLX5_*, CUDA_*); echoed in the report

    def problems(self) -> Iterator[Problem]:
        yield from _not_above("per_hca_min_gbps", self.per_hca_min_gbps,
                              "per_hca_typical_gbps", self.per_hca_typical_gbps)
        yield from _sizes("size", [self.size])


OpenFraction = Annotated[float, Meta(gt=0, lt=1.0)]


class LocalizeLimits(Strict, frozen=True):
    """How a deep sweep attributes slow tests between nodes (bandwidth.localize.LocalizeSettings;
    the blast-radius guard comes from slurm.drain, the outlier fraction from peer_fraction)."""

    confirm_tests: Annotated[int, Meta(ge=1, le=64)] = 1  # short tests with known-good partners that name a culprit
    fabric_fraction: OpenFraction = 0.5  # more than this never passing / short: a fabric-wide problem, no node named
    fabric_min_nodes: Annotated[int, Meta(ge=1, le=100_000)] = 4  # fewer nodes: never fabric-wide
    outlier_min_peers: Annotated[int, Meta(ge=1, le=100_000)] = 8  # fewer peers: no outlier findings
    outlier_min_tests: Annotated[int, Meta(ge=1, le=1024)] = 2  # a node judged on fewer tests is no outlier


PairTest = Literal["torch", "nccl_tests", "ib_write_bw"]


class PairSettings(Strict, frozen=True):
    """Tests between nodes in a deep sweep (`hc sweep --tier deep`): each pair (circle method
    up to circle_max nodes, then groups, regrouping and bisection) runs the listed tests."""

    enabled: bool = True
    # torch: hc's sweep across the members; nccl_tests: <collective>_perf across them under mpirun
    # (one rank per GPU, nccl_env added); ib_write_bw: HCA i of one node to HCA i of the other
    tests: list[PairTest] = msgspec.field(default_factory=lambda: ["torch"])
    # how a test starts on its members: ssh (hc's own fan-out), mpirun (a host list), srun (in an
    # allocation hc holds: --via slurm, or run inside salloc/sbatch)
    launcher: Literal["ssh", "mpirun", "srun"] = "ssh"
    # one `hc bw serve` per node for the whole sweep, started by the launcher (torch imported
    # and the device set up once per node, not once per test; srun holds each node, whole,
    # while its worker lives: the sweep, or until it idles out without a test); false:
    # `hc bw allreduce` started per test
    persistent_workers: bool = True
    nccl_env: dict[EnvName, EnvValue] = msgspec.field(default_factory=lambda: {"NCCL_ALGO": "RING"})
    circle_max: Annotated[int, Meta(ge=2, le=4096)] = 16  # up to this many nodes: every pair (n-1 rounds)
    group_size: Annotated[int, Meta(ge=2, le=1024)] = 8  # above it: groups of this many, then bisection
    port: Port = 29517  # the rendezvous port on each test's first node
    timeout_s: Seconds = 300.0  # one test between nodes, start-up included
    # a persistent worker's reply may come this long past timeout_s (a rank that gave up at its
    # own, shorter timeout still says why, late on a loaded node); one silent past it is hung:
    # its test is ERROR naming it, and it is killed with its process group before its node's
    # next test (nothing it held, the pair port, is left taken). Paid only by a test that hangs
    reply_grace_s: Annotated[float, Meta(ge=1.0, le=600.0)] = 10.0
    localize: LocalizeLimits = LocalizeLimits()

    def problems(self) -> Iterator[Problem]:
        if len(set(self.tests)) != len(self.tests):
            yield ("tests",), "a test is listed twice", ()


class BandwidthLimits(Strict, frozen=True):
    """The deep tier's bandwidth tests and the floors they are judged against.

    Floors apply only at the sizes they name: small sizes are measured and reported, not
    judged, unless the fabric sets a floor for them.
    """

    sizes: list[SizeText] = msgspec.field(default_factory=lambda: ["64M", "1G"])  # sizes every sweep measures
    repeats: Repeats = 2  # a test below a floor runs again, up to this many times in all; FAIL only if all fall short
    # this far below its peers' median: WARN; and a pair test with no pair floor this far below its
    # peers' reference is short (bandwidth/peers.py); a node short with every partner is the culprit
    # only where also beyond the sweep's own measured spread (else bw.E109, not drained)
    peer_fraction: Annotated[float, Meta(gt=0, lt=1.0)] = 0.1
    collectives: list[Literal["all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall"]] = \
        msgspec.field(default_factory=lambda: ["all_reduce"])
    all_reduce: CollectiveFloors = CollectiveFloors()
    all_gather: CollectiveFloors = CollectiveFloors()
    reduce_scatter: CollectiveFloors = CollectiveFloors()
    broadcast: CollectiveFloors = CollectiveFloors()
    alltoall: CollectiveFloors = CollectiveFloors()
    nccl_tests: NcclTestsSettings = NcclTestsSettings()
    torch: TorchSweepSettings = TorchSweepSettings()
    ib_write_bw: IbWriteBwSettings = IbWriteBwSettings()
    pairs: PairSettings = PairSettings()
    # an HCA error counter rising more than this during a test FAILs the port
    counters_max_rise: IbCounterLimits = IbCounterLimits()

    def problems(self) -> Iterator[Problem]:
        yield from _sizes("sizes", self.sizes)


class Fabric(Strict, frozen=True):
    description: Annotated[str, Meta(max_length=4096)] = ""
    extends: Text | None = None  # name of a fabric this one refines
    gpu: GpuLimits = GpuLimits()
    ib: IbLimits = IbLimits()
    net: NetLimits = NetLimits()
    sys: SysLimits = SysLimits()
    bandwidth: BandwidthLimits = BandwidthLimits()
    trends: TrendSettings = TrendSettings()


# ------------------------------------------------------------------------------ main


class DrainPolicy(Strict, frozen=True):
    """When hc may take nodes out of the scheduler, and how many at most."""

    enabled: bool = True
    # Blast-radius guard: a run drains nothing when its new drains would exceed either
    # limit. The fraction applies to the nodes a run checked (when it checked at least
    # `guard_min_nodes`) and, always, to the whole cluster counting nodes hc already
    # drained: per-node runs (prologue, health) cannot empty a partition one by one.
    # The cluster-wide limit is floor(fraction x nodes): with the default 0.1, a cluster
    # of fewer than 10 nodes can never have a node drained by hc (raise the fraction,
    # e.g. 0.25 lets a 4-node cluster drain one).
    max_drain_fraction: Fraction = 0.1
    max_drain_nodes: NodeCount = 50
    guard_min_nodes: NodeCount = 10
    # sinfo -R shows reasons whole only when short; room for "hc: ERROR x3 " and one ID
    reason_max_len: Annotated[int, Meta(ge=24, le=1024)] = 64
    # Drains for these IDs are resumed automatically only after the node rebooted: a
    # quiet kernel log since the drain does not show that the GPU was repaired.
    resume_after_reboot_only: list[Text] = msgspec.field(default_factory=lambda: ["gpu.E020", "gpu.E021"])
    # Drains for these IDs are resumed automatically only after a repair of the node was put
    # on record since the drain (`hc node NODE --repaired TEXT`): a port counter that stopped
    # rising between two runs does not show that the cable or transceiver was fixed, and a
    # reboot does not reseat one.
    resume_after_repair_only: list[Text] = msgspec.field(default_factory=lambda: ["ib.E006"])


class CommandPolicy(Strict, frozen=True):
    tier: TierOrContext = "quick"  # a tier, or the epilogue context
    deadline_s: Seconds = 5.0


class SlurmSettings(Strict, frozen=True):
    """How hc acts in Slurm: commands, deadlines, drain policy, where it keeps state."""

    scontrol: Text = "scontrol"
    sinfo: Text = "sinfo"
    srun: Text = "srun"
    remote_hc: Text = "hc"  # how a sweep's srun tasks run hc on the nodes
    sweep_timeout_s: LongSeconds = 1800.0  # a whole `hc sweep --via slurm`
    # how long a sweep's own allocation may wait for its nodes (srun --immediate): busy
    # or reserved nodes are reported, not waited for
    sweep_wait_s: Annotated[int, Meta(ge=1, le=86_400)] = 60
    # sinfo/scontrol retry internally for MessageTimeout (10 s by default) before they
    # report a dead controller; give them longer so Slurm's own message is kept
    command_timeout_s: Seconds = 15.0
    retries: Annotated[int, Meta(ge=0, le=100)] = 3  # attempts for a transient scontrol failure (0 acts as 1)
    retry_backoff_s: Delay = 0.5  # doubled after each attempt
    lock_timeout_s: Delay = 2.0  # how long a run waits for another hc run on the node to act
    state_dir: PathText = "/var/lib/hc"  # per-node lock, ERROR counters, job start marks
    audit_log: PathText = "/var/log/hc/audit.jsonl"
    report_dir: PathText | None = "/var/log/hc/reports"
    drain: DrainPolicy = DrainPolicy()
    prologue: CommandPolicy = CommandPolicy(tier="quick", deadline_s=5.0)
    epilogue: CommandPolicy = CommandPolicy(tier="epilogue", deadline_s=30.0)
    # slurmd kills HealthCheckProgram after 60 s; the hook's whole run is deadline_s + 3 s
    health: CommandPolicy = CommandPolicy(tier="quick", deadline_s=45.0)
    # Consecutive prologue/health runs that could not check the node (ERROR) before hc
    # escalates: "report" adds a finding to the report and log; "drain" drains the
    # node with reason "hc: ERROR x<N> <ids>" (never on a single ERROR).
    error_escalation_runs: Annotated[int, Meta(ge=2, le=10_000)] = 3
    error_escalation: Literal["report", "drain"] = "report"


class SshSettings(Strict, frozen=True):
    """How hc reaches nodes over SSH (paramiko). ~/.ssh/config is honoured for HostName,
    User, Port, IdentityFile, UserKnownHostsFile, HostKeyAlias, ProxyJump (one hop) and
    ProxyCommand; known_hosts for plain and hashed keys, @revoked and @cert-authority
    (host certificates)."""

    config_file: PathText | None = "~/.ssh/config"
    known_hosts: list[PathText] = msgspec.field(default_factory=lambda: ["~/.ssh/known_hosts"])
    identity_files: list[PathText] = []
    user: Text | None = None
    port: Port = 22
    use_agent: bool = True
    # An unknown host key is an ERROR for that node unless this is set; a changed key
    # is always an ERROR.
    accept_new_host_keys: bool = False
    connect_timeout_s: Seconds = 10.0
    command_timeout_s: Seconds = 60.0
    node_timeout_s: LongSeconds = 180.0  # everything hc does on one node
    max_parallel: Annotated[int, Meta(ge=1, le=4096)] = 64  # SSH connections at once
    remote_hc: Text = "hc"  # how agent mode runs hc on a node


class FleetSettings(Strict, frozen=True):
    """Findings no single node can give: drift within a fabric, peer-relative outliers, flaps."""

    # categorical metrics that must agree across a fabric's nodes (per component)
    drift_metrics: list[Text] = msgspec.field(
        default_factory=lambda: ["mtu", "fw_ver", "driver_version", "cuda_version", "vbios_version", "nccl_version"]
    )
    # numeric metrics judged against the fabric's median (robust z from the MAD)
    outlier_metrics: list[Text] = msgspec.field(
        default_factory=lambda: [
            "temperature_c", "ecc_volatile_corrected", "symbol_error", "link_error_recovery",
            "link_downed", "port_rcv_errors", "mem_total_gib", "rate_gbps", "nvlink_active",
            "busbw_gbytes_per_s", "bw_gbps",
        ]
    )
    outlier_z: Annotated[float, Meta(gt=0, le=1000.0)] = 3.5  # Iglewicz and Hoaglin's cut-off for the modified z-score
    outlier_min_nodes: Annotated[int, Meta(ge=2, le=1_000_000)] = 8  # fewer peers than this: no outlier findings
    flap_runs: Annotated[int, Meta(ge=2, le=1000)] = 5  # recent runs of a node looked at for flapping
    # FAIL <-> not-FAIL changes in those runs that make a flap (0: no flap findings)
    flap_transitions: Annotated[int, Meta(ge=0, le=999)] = 2

    def problems(self) -> Iterator[Problem]:
        if self.flap_transitions >= self.flap_runs:
            message = (f"flap_transitions {self.flap_transitions} can never be reached in flap_runs "
                       f"{self.flap_runs} runs (at most {self.flap_runs - 1} changes): no flap would be found")
            yield ("flap_transitions",), message, (("flap_runs",),)


class HistorySettings(Strict, frozen=True):
    path: PathText | None = "~/.local/state/hc/history.sqlite"  # None: keep no history
    keep_runs: Annotated[int, Meta(ge=1, le=10_000_000)] = 500


class PrometheusSettings(Strict, frozen=True):
    """node_exporter textfile-collector export (report/prometheus.py): each run named in
    `commands` writes `<textfile_dir>/hc-<command>.prom` atomically."""

    # the directory node_exporter reads (--collector.textfile.directory; Debian's default
    # is /var/lib/prometheus/node-exporter); None: no export. It must exist.
    textfile_dir: AbsPath | None = None
    # the runs that export; `hc node` exports with --prometheus DIR whatever this says;
    # "diagnose": every `hc diagnose` verdict (hc-diagnose.prom: the last job diagnosed)
    commands: list[Literal["prologue", "epilogue", "health", "sweep", "node", "diagnose"]] = msgspec.field(
        default_factory=lambda: ["prologue", "epilogue", "health", "sweep"])
    # bounds on what one file may hold, so a sweep of many nodes or a node with many
    # findings cannot flood Prometheus: series past max_series are dropped (counted in
    # hc_export_dropped_series), a longer label value is cut and keeps a hash of the rest
    max_series: Annotated[int, Meta(ge=100, le=10_000_000)] = 100_000
    max_findings_per_node: Annotated[int, Meta(ge=1, le=100_000)] = 100
    label_max_chars: Annotated[int, Meta(ge=32, le=1024)] = 128


HEADER_NAME_RE = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
WEBHOOK_URL_RE = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s\x00-\x1f\x7f]+$"
PATTERN_WORDS[HEADER_NAME_RE] = "an HTTP header name (letters, digits, hyphens)"
PATTERN_WORDS[WEBHOOK_URL_RE] = "an http:// or https:// URL without spaces or control characters"
HeaderName = Annotated[str, Meta(min_length=1, max_length=256, pattern=HEADER_NAME_RE)]
WebhookUrl = Annotated[str, Meta(min_length=8, max_length=2048, pattern=WEBHOOK_URL_RE)]


class TicketSettings(Strict, frozen=True):
    """`hc report tickets`: which findings are tickets, and how the webhook gets them
    (actions/webhook.py: retries with backoff, a spool for what was not delivered)."""

    min_status: Literal["FAIL", "ERROR", "WARN"] = "WARN"  # findings at or above it (FAIL > ERROR > WARN)
    lookback_runs: Annotated[int, Meta(ge=1, le=100_000)] = 100  # earlier runs of the same nodes read
    webhook_url: WebhookUrl | None = None  # POST every record here (--webhook overrides, --no-webhook skips)
    token_file: PathText | None = None  # its one line is the token header's value, e.g. "Bearer abc..."
    token_header: HeaderName = "Authorization"
    timeout_s: Seconds = 10.0  # one POST, answer included
    attempts: Annotated[int, Meta(ge=1, le=100)] = 5  # per record, for transient failures
    backoff_s: Delay = 1.0  # the first wait between attempts, doubled after each (with jitter)
    max_total_s: Seconds = 300.0  # the whole delivery: past it, what is left waits in the spool
    spool_dir: PathText | None = None  # records not delivered yet; None: <slurm.state_dir>/tickets


class BaselineSettings(Strict, frozen=True):
    """`hc baseline`: how thresholds are learned from sweep reports of healthy-looking nodes
    (report/baseline.py); each is also a command-line option."""

    min_nodes: Annotated[int, Meta(ge=2, le=1_000_000)] = 8  # fewer nodes (pairs) left for a metric: refused
    percentile: Annotated[float, Meta(ge=0, le=50.0)] = 5.0  # floors from this low percentile (ceilings: 100 - it)
    margin: Annotated[float, Meta(ge=0, lt=1.0)] = 0.05  # floor = the percentile x (1 - margin)
    temp_margin_c: Annotated[float, Meta(ge=0, le=50.0)] = 10.0  # temperature ceiling = the percentile + this
    max_spread: Annotated[float, Meta(gt=0, le=1.0)] = 0.1  # MAD / median above this: too noisy, refused
    outlier_z: Annotated[float, Meta(gt=0, le=1000.0)] = 3.5  # |modified z| above this: dropped before learning


class MainConfig(Strict, frozen=True):
    # where fabric files are looked up, relative to the main file; the fabrics shipped
    # with hc are searched last, so a site can refine or replace them
    fabric_dirs: list[PathText] = msgspec.field(default_factory=lambda: ["fabrics"])  # each must exist when set
    default_fabric: Text | None = None  # for nodes no pattern matches
    nodes: dict[str, str] = {}  # hostlist pattern -> fabric name
    # hostlist pattern -> the leaf switch or rail group its nodes hang off: a deep sweep's
    # groups of nodes then span leaves, so a slow uplink is not mistaken for slow nodes
    rails: dict[str, Text] = {}
    overrides: dict[str, dict] = {}  # hostlist pattern -> partial fabric (deep-merged)
    slurm: SlurmSettings = SlurmSettings()
    ssh: SshSettings = SshSettings()
    fleet: FleetSettings = FleetSettings()
    history: HistorySettings = HistorySettings()
    baseline: BaselineSettings = BaselineSettings()
    prometheus: PrometheusSettings = PrometheusSettings()
    tickets: TicketSettings = TicketSettings()
