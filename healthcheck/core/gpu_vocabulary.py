"""GPU words the kernel needs without any parser: the config schema validates
`gpu.throttle_fail`/`throttle_warn` against them, and parsers/gpu_common.py maps the
sources' bits and lines onto the same names. Imports nothing."""

from __future__ import annotations

# Clock event ("throttle") reasons, canonical names (NVML's nvmlClocksEventReason*
# bits; nvidia-smi -q's "Clocks Event Reasons"/"Clocks Throttle Reasons" lines).
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
