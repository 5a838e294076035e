"""GPU facts: what NVML, a replayed NVML recording, `nvidia-smi -q` and
`nvidia-smi --query-gpu` all reduce to, so the GPU checks have one input type.

A value the source could not give (N/A, [Not Supported], ERR!, an NVML call that is
not supported) is None, never 0: a check must not mistake "unknown" for "healthy".
"""

from __future__ import annotations

import msgspec

# Clock event ("throttle") reasons: bit -> canonical name; the kernel holds the list,
# since the config schema validates names against it.
from healthcheck.core.gpu_vocabulary import THROTTLE_REASONS
from healthcheck.core.lazyre import lazy_compile
from healthcheck.parsers.lines import NOTHING_UNREAD, Unrecognized


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


class NvLink(msgspec.Struct, frozen=True, omit_defaults=True):
    link: int
    active: bool
    speed_gbps: float | None = None  # per-link GB/s as nvidia-smi nvlink -s prints it
    crc_flit_errors: int | None = None
    crc_data_errors: int | None = None
    replay_errors: int | None = None
    recovery_errors: int | None = None


class GpuProcess(msgspec.Struct, frozen=True, omit_defaults=True):
    pid: int
    name: str | None = None
    used_memory_mib: int | None = None
    type: str | None = None  # C (compute), G (graphics), C+G


class RemapHistogram(msgspec.Struct, frozen=True, omit_defaults=True):
    """How many of a GPU's memory banks have each level of row-remap availability (NVML's
    nvmlRowRemapperHistogramValues_t, `nvidia-smi -q`'s "Bank Remap Availability Histogram"):
    `max`, every reserved row still free; `none`, no reserved row left."""

    max: int
    high: int
    partial: int
    low: int
    none: int

    @property
    def low_or_none(self) -> int:
        """Banks with few or no reserved rows left: where the next remap may fail."""
        return self.low + self.none


class GpuReadings(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """What a GPU's report says of it, without which GPU it is: a `Gpu` less its index and
    bus id. Alone, it is a GPU whose report was pasted without the line naming it
    (`GpuFacts.unnamed`)."""

    name: str | None = None  # "NVIDIA H100 80GB HBM3"
    uuid: str | None = None
    serial: str | None = None
    vbios_version: str | None = None
    persistence_mode: bool | None = None
    mig_mode: bool | None = None
    performance_state: str | None = None  # "P0"
    # memory errors
    ecc_enabled: bool | None = None
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    remap_histogram: RemapHistogram | None = None  # None: not read (pre-Ampere, MIG, an older tool)
    # thermals and clocks
    temperature_c: float | None = None
    throttle_reasons: list[str] | None = None  # active reasons; None = unknown
    # PCIe
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replays: int | None = None
    # NVLink (None: unknown or not queried; []: the GPU has none)
    nvlinks: list[NvLink] | None = None
    # what runs on it
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    processes: list[GpuProcess] | None = None
    fabric_state: str | None = None  # NVSwitch fabric registration ("Completed")
    # "Pass-Through" (a VM's GPU), "VGPU" (a vGPU guest), "Host VGPU", "None" (bare metal),
    # as nvidia-smi -q prints it; None where not given
    virtualization_mode: str | None = None
    # load, power and clocks (nvidia-smi --query-gpu; None where not asked for or N/A)
    fan_speed_pct: float | None = None
    utilization_gpu_pct: float | None = None
    utilization_memory_pct: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None  # the enforced limit
    clocks_graphics_mhz: float | None = None
    clocks_sm_mhz: float | None = None
    clocks_memory_mhz: float | None = None
    compute_mode: str | None = None  # "Default", "Exclusive_Process", "Prohibited"
    # every --query-gpu column as given, by field name (lower-case, no unit: "power.draw");
    # numbers as numbers, None where nvidia-smi had no value ([N/A], [Not Supported])
    query_fields: dict[str, int | float | str | None] | None = None


class Gpu(GpuReadings, frozen=True, omit_defaults=True):
    """One GPU's readings with the GPU they are of (index and bus id first, as encoded)."""

    index: int  # NVML index (PCI bus order), as Slurm's GPU indexes use
    pci_bus_id: str  # normalised "0000:19:00.0"


class LostGpu(msgspec.Struct, frozen=True, omit_defaults=True):
    """A GPU the driver knows of but cannot talk to (fell off the bus, GSP hung)."""

    pci_bus_id: str | None
    index: int | None = None
    error: str = ""


# LostGpu.error of a GPU seen only on the PCI bus, not through NVML
PCI_ONLY = "on the PCI bus but not driven"


def is_pci_only(lost: LostGpu) -> bool:
    """A LostGpu that only the PCI bus knows of (NVML could not start or lists no GPU)."""
    return lost.error.startswith(PCI_ONLY)


class DriverWarning(msgspec.Struct, frozen=True, omit_defaults=True):
    """A `WARNING: ...` line nvidia-smi printed beside its report (the driver's word on a
    GPU: "infoROM is corrupted at gpu 0008:00:00.0"), with the GPU it names."""

    message: str  # as printed, after "WARNING: "
    pci_bus_id: str | None = None  # normalised; None where it names no GPU


class GpuFacts(msgspec.Struct, frozen=True, omit_defaults=True):
    source: str  # "nvml", "nvidia-smi -q", "nvidia-smi --query-gpu", "nvml replay: <file>"
    gpus: list[Gpu] = []
    lost: list[LostGpu] = []
    driver_version: str | None = None
    cuda_version: str | None = None
    # NVML (or nvidia-smi) could not start at all: the error's name, e.g.
    # "NVMLError_DriverNotLoaded", "NVMLError_LibraryNotFound", "nvidia-smi not found"
    init_error: str | None = None
    # the NVML indexes of the job's GPUs when the facts were narrowed to them
    # (SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES); None = every GPU of the node
    scoped_to: list[int] | None = None
    # lines of `nvidia-smi -q` read without their GPU block (`nvidia-smi -q | grep GSP`):
    # key as a name -> its values as printed; which GPU each is of is not known
    fragment: dict[str, list[str]] = {}
    # `nvidia-smi -q` sections pasted without their "GPU 00000000:19:00.0" line (`-q -d
    # ROW_REMAPPER` cut to its section, a `grep -A4 "Remapped Rows"`): each GPU's readings,
    # in the order pasted; which GPU each is of is not known, so none is in `gpus`
    unnamed: list[GpuReadings] = []
    # `nvidia-smi -q` cut after its header (the versions, no GPU line): no GPU was read, which is
    # not "no GPU" (`hc parse` only; the probe's parse refuses such text)
    cut_before_gpus: bool = False
    warnings: list[DriverWarning] = []  # nvidia-smi -q's `WARNING: infoROM is corrupted at gpu ...` lines
    # why what was read is partial, where a text lacked what the parser names GPUs by (a
    # `--query-gpu` header with no pci.bus_id column, a row past the header's columns):
    # what was read is kept rather than the whole text refused; None when nothing was missing.
    # The same key as `procfs.Processes.incomplete` (`hc parse` only: the probe refuses such text)
    incomplete: str | None = None
    # lines of nvidia-smi's text no part of its parser read (omitted when none; never from NVML)
    unrecognized: Unrecognized = NOTHING_UNREAD


# A PCI bus id as the GPU tools print it, for a parser's own regex (no groups): the domain
# is optional, 4 digits (`0000:3B:00.0`, -q's table), 8 (`00000000:19:00.0`, -q's GPU line)
# or 3 where a person typed it from memory (field/issues-14's `GPU 000:BA:80.0`, a quoted
# nvidia-smi message); normalize_pci reads every such form to hc's `0000:ba:80.0`.
BUS_ID = r"(?:[0-9A-Fa-f]{3,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
_PCI = lazy_compile(r"^(?:(?P<domain>[0-9a-fA-F]{3,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})"
                  r"(?:\.(?P<fn>[0-9a-fA-F]))?$")


def normalize_pci(bus_id: str) -> str:
    """"00000000:19:00.0" / "0000:19:00" / "PCI:0000:19:00" / "000:19:00.0" -> "0000:19:00.0" (lower case)."""
    text = bus_id.strip()
    if text.upper().startswith("PCI:"):
        text = text[4:]
    m = _PCI.match(text)
    if not m:
        return text.lower()
    domain = int(m.group("domain") or "0", 16)
    return f"{domain:04x}:{m.group('bus').lower()}:{m.group('dev').lower()}.{(m.group('fn') or '0').lower()}"
