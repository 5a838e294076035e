"""The typed shape of the main config and of fabric files.

Units live in key names: `mtu` (bytes), `rate_gbps` (gigabits/s, as ibstat prints),
`*_gbytes_per_s` (gigabytes/s, as nccl-tests prints busbw), `*_gib` (GiB), `*_c` (Celsius).
A key left out (None) means "no expectation": the check then only looks at what is there.
"""

from __future__ import annotations

from typing import Literal, Optional

import msgspec


class Strict(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Base for config sections: unknown keys and wrong types are errors."""


# ---------------------------------------------------------------------------- fabric


class InterfaceSpec(Strict):
    mtu: Optional[int] = None  # expected MTU of every interface matching the pattern
    count: Optional[int] = None  # exact number of interfaces that must match
    required: bool = True  # at least one interface must match


class NetLimits(Strict):
    # glob pattern of interface names -> expectations, e.g. {"ib*": {mtu: 4092, count: 8}}
    interfaces: dict[str, InterfaceSpec] = {}
    # sanity bounds for every other interface that is up (WARN outside them)
    mtu_min: Optional[int] = None
    mtu_max: Optional[int] = None
    ignore: list[str] = msgspec.field(default_factory=lambda: ["lo"])  # glob patterns of interfaces the sanity bounds skip


class IbCounterLimits(Strict):
    """Upper limits per port error counter (names as in sysfs `ports/N/counters/`)."""

    symbol_error: Optional[int] = None
    link_error_recovery: Optional[int] = None
    link_downed: Optional[int] = None
    port_rcv_errors: Optional[int] = None
    port_rcv_remote_physical_errors: Optional[int] = None
    port_xmit_discards: Optional[int] = None
    local_link_integrity_errors: Optional[int] = None
    excessive_buffer_overrun_errors: Optional[int] = None


class IbLimits(Strict):
    hcas: list[str] = msgspec.field(default_factory=lambda: ["*"])  # glob patterns of the compute HCAs' names
    hca_types: list[str] = []  # and/or their CA types (e.g. MT4129 for ConnectX-7)
    hca_count: Optional[int] = None  # compute HCAs that must be present
    rate_gbps: Optional[float] = None  # expected port rate
    # The link layer of the compute ports. Ports of another link layer (a frontend
    # Ethernet port on an InfiniBand node) are not compute ports: a compute HCA that came
    # up in the wrong mode shows as a missing HCA (ib.E001), with the odd port named.
    link_layer: Optional[Literal["InfiniBand", "Ethernet"]] = None
    # Ports whose physical state is Disabled were switched off on purpose (an unused
    # frontend port): ignore them instead of failing the node.
    allow_disabled: bool = False
    counters_fail: IbCounterLimits = IbCounterLimits()  # FAIL above these
    counters_warn: IbCounterLimits = IbCounterLimits()  # WARN above these


class SysLimits(Strict):
    mem_total_min_gib: Optional[float] = None
    disk_free_min_gib: dict[str, float] = {}  # path -> free GiB it must have
    mounts: list[str] = []  # mount points that must be mounted
    services: dict[str, str] = {}  # service name -> process (executable) name that must run


Severity = Literal["FAIL", "WARN", "ignore"]


class XidPolicy(Strict):
    """Where Xid events are read and what each code means for the node."""

    # auto: /dev/kmsg if readable, else `dmesg`, else `journalctl -k`; file: `file`
    source: Literal["auto", "kmsg", "dmesg", "journal", "file"] = "auto"
    file: Optional[str] = None
    severity: dict[int, Severity] = {}  # Xid code -> what it means for the node
    unknown: Severity = "WARN"  # codes not in the table
    sxid_fatal: Severity = "FAIL"  # NVSwitch SXid lines marked Fatal
    sxid_other: Severity = "WARN"


class NvLinkCounterLimits(Strict):
    """Upper limits per NVLink error counter (NVML's DL counters)."""

    crc_flit_errors: Optional[int] = None
    crc_data_errors: Optional[int] = None
    replay_errors: Optional[int] = None
    recovery_errors: Optional[int] = None


class GpuLimits(Strict):
    count: Optional[int] = None
    model: Optional[str] = None  # NVML/nvidia-smi product name, e.g. "NVIDIA H100 80GB HBM3"
    # memory errors
    ecc_volatile_corrected_max: Optional[int] = None  # WARN above (uncorrected > 0 always FAILs)
    retired_pages_pending: Severity = "FAIL"
    remapped_rows_pending: Severity = "FAIL"  # the GPU needs a reset before the remap takes effect
    # thermals and clocks
    temp_max_c: Optional[float] = None
    throttle_fail: list[str] = msgspec.field(
        default_factory=lambda: ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"]
    )
    throttle_warn: list[str] = msgspec.field(default_factory=lambda: ["sw_thermal_slowdown"])
    # PCIe: expected link; without them, current is compared with the GPU's maximum
    pcie_gen: Optional[int] = None
    pcie_width: Optional[int] = None
    # NVLink
    nvlink_count: Optional[int] = None  # active links per GPU (18 on H100 SXM, 12 on A100 SXM)
    nvlink_errors_warn: NvLinkCounterLimits = NvLinkCounterLimits()
    nvlink_errors_fail: NvLinkCounterLimits = NvLinkCounterLimits()
    # versions that must match where set (and must agree across the node's GPUs)
    driver_version: Optional[str] = None
    cuda_version: Optional[str] = None
    vbios_version: Optional[str] = None
    nccl_version: Optional[str] = None  # the system NCCL the loader finds (libnccl.so.2)
    # epilogue: memory a GPU may still show in use with no process on it
    leftover_memory_max_mib: int = 1024
    xid: XidPolicy = XidPolicy()


class AllReduceReference(Strict):
    """Single-node AllReduce busbw (nccl-tests definition) for a healthy node of the fabric."""

    busbw_peak_gbytes_per_s: Optional[float] = None  # what a healthy node reaches at large sizes
    busbw_min_gbytes_per_s: Optional[float] = None  # production floor at message_bytes
    busbw_ring_gbytes_per_s: Optional[float] = None  # with NVLS/CollNet off (ring only)
    message_bytes: int = 16 * 1024**3


class IbWriteBwReference(Strict):
    """ib_write_bw per HCA (perftest --report_gbits), large messages."""

    per_hca_typical_gbps: Optional[float] = None
    per_hca_min_gbps: Optional[float] = None


class BandwidthLimits(Strict):
    allreduce_single_node: AllReduceReference = AllReduceReference()
    ib_write_bw: IbWriteBwReference = IbWriteBwReference()


class Fabric(Strict):
    description: str = ""
    extends: Optional[str] = None  # name of a fabric this one refines
    gpu: GpuLimits = GpuLimits()
    ib: IbLimits = IbLimits()
    net: NetLimits = NetLimits()
    sys: SysLimits = SysLimits()
    bandwidth: BandwidthLimits = BandwidthLimits()


# ------------------------------------------------------------------------------ main


class DrainPolicy(Strict):
    """When hc may take nodes out of the scheduler, and how many at most."""

    enabled: bool = True
    # Blast-radius guard: a run drains nothing when its new drains would exceed either
    # limit. The fraction applies to the nodes a run checked (when it checked at least
    # `guard_min_nodes`) and, always, to the whole cluster counting nodes hc already
    # drained: per-node runs (prologue, health) cannot empty a partition one by one.
    max_drain_fraction: float = 0.1
    max_drain_nodes: int = 50
    guard_min_nodes: int = 10
    reason_max_len: int = 64  # sinfo -R shows reasons whole only when short
    # Drains for these IDs are resumed automatically only after the node rebooted: a
    # quiet kernel log since the drain does not show that the GPU was repaired.
    resume_after_reboot_only: list[str] = msgspec.field(default_factory=lambda: ["gpu.E020", "gpu.E021"])


class CommandPolicy(Strict):
    tier: Literal["quick", "standard", "deep", "epilogue"] = "quick"
    deadline_s: float = 5.0


class SlurmSettings(Strict):
    """How hc acts in Slurm: commands, deadlines, drain policy, where it keeps state."""

    scontrol: str = "scontrol"
    sinfo: str = "sinfo"
    srun: str = "srun"
    remote_hc: str = "hc"  # how a sweep's srun tasks run hc on the nodes
    sweep_timeout_s: float = 1800.0  # a whole `hc sweep --via slurm`
    # sinfo/scontrol retry internally for MessageTimeout (10 s by default) before they
    # report a dead controller; give them longer so Slurm's own message is kept
    command_timeout_s: float = 15.0
    retries: int = 3  # attempts for a transient scontrol failure (controller down, timeout)
    retry_backoff_s: float = 0.5  # doubled after each attempt
    lock_timeout_s: float = 2.0  # how long a run waits for another hc run on the node to act
    state_dir: str = "/var/lib/hc"  # per-node lock, ERROR counters, job start marks
    audit_log: str = "/var/log/hc/audit.jsonl"
    report_dir: Optional[str] = "/var/log/hc/reports"
    drain: DrainPolicy = DrainPolicy()
    prologue: CommandPolicy = CommandPolicy(tier="quick", deadline_s=5.0)
    epilogue: CommandPolicy = CommandPolicy(tier="epilogue", deadline_s=30.0)
    health: CommandPolicy = CommandPolicy(tier="quick", deadline_s=60.0)
    # Consecutive prologue/health runs that could not check the node (ERROR) before hc
    # escalates: "report" adds a finding to the report and log; "drain" drains the
    # node with reason "hc: ERROR x<N> <ids>" (never on a single ERROR).
    error_escalation_runs: int = 3
    error_escalation: Literal["report", "drain"] = "report"


class SshSettings(Strict):
    """How hc reaches nodes over SSH (paramiko). ~/.ssh/config is honoured for HostName,
    User, Port, IdentityFile, UserKnownHostsFile and ProxyJump."""

    config_file: Optional[str] = "~/.ssh/config"
    known_hosts: list[str] = msgspec.field(default_factory=lambda: ["~/.ssh/known_hosts"])
    identity_files: list[str] = []
    user: Optional[str] = None
    port: int = 22
    use_agent: bool = True
    # An unknown host key is an ERROR for that node unless this is set; a changed key
    # is always an ERROR.
    accept_new_host_keys: bool = False
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 60.0
    node_timeout_s: float = 180.0  # everything hc does on one node
    max_parallel: int = 64
    remote_hc: str = "hc"  # how agent mode runs hc on a node


class FleetSettings(Strict):
    """Findings no single node can give: drift within a fabric, peer-relative outliers, flaps."""

    # categorical metrics that must agree across a fabric's nodes (per component)
    drift_metrics: list[str] = msgspec.field(
        default_factory=lambda: ["mtu", "fw_ver", "driver_version", "cuda_version", "vbios_version", "nccl_version"]
    )
    # numeric metrics judged against the fabric's median (robust z from the MAD)
    outlier_metrics: list[str] = msgspec.field(
        default_factory=lambda: [
            "temperature_c", "ecc_volatile_corrected", "symbol_error", "link_error_recovery",
            "link_downed", "port_rcv_errors", "mem_total_gib", "rate_gbps", "nvlink_active",
            "busbw_gbytes_per_s", "bw_gbps",
        ]
    )
    outlier_z: float = 3.5  # Iglewicz and Hoaglin's cut-off for the modified z-score
    outlier_min_nodes: int = 8  # fewer peers than this: no outlier findings
    flap_runs: int = 5  # recent runs of a node looked at for flapping
    flap_transitions: int = 2  # FAIL <-> not-FAIL changes in those runs that make a flap


class HistorySettings(Strict):
    path: Optional[str] = "~/.local/state/hc/history.sqlite"  # None: keep no history
    keep_runs: int = 500


class MainConfig(Strict):
    # where fabric files are looked up, relative to the main file; the fabrics shipped
    # with hc are searched last, so a site can refine or replace them
    fabric_dirs: list[str] = msgspec.field(default_factory=lambda: ["fabrics"])
    default_fabric: Optional[str] = None  # for nodes no pattern matches
    nodes: dict[str, str] = {}  # hostlist pattern -> fabric name
    overrides: dict[str, dict] = {}  # hostlist pattern -> partial fabric (deep-merged)
    slurm: SlurmSettings = SlurmSettings()
    ssh: SshSettings = SshSettings()
    fleet: FleetSettings = FleetSettings()
    history: HistorySettings = HistorySettings()
