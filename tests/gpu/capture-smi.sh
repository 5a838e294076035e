#!/usr/bin/env bash
# Captures real nvidia-smi outputs on a GPU machine into $OUT (one file per command, with
# the command and exit code in a sidecar), for the field fixtures of issue 20. Read-only
# queries only; every command is bounded by timeout.
set -u
out=${OUT:-/tmp/smi-capture}
mkdir -p "$out"
run() {  # run NAME CMD...: stdout+stderr to NAME.txt, the command and its exit to NAME.cmd
    local name=$1; shift
    timeout 20 "$@" > "$out/$name.txt" 2>&1
    printf '%s\nexit=%s\n' "$*" "$?" > "$out/$name.cmd"
}
run smi nvidia-smi
run smi-q nvidia-smi -q
run smi-q-d-memory-performance nvidia-smi -q -d MEMORY,PERFORMANCE
run smi-q-d-ecc-row-remapper nvidia-smi -q -d ECC,ROW_REMAPPER
run smi-q-d-pcie-temperature nvidia-smi -q -d PCIE,TEMPERATURE,POWER,CLOCK
run smi-topo-m nvidia-smi topo -m
run smi-nvlink-s nvidia-smi nvlink -s
run smi-nvlink-e nvidia-smi nvlink -e
run smi-nvlink-gt-d nvidia-smi nvlink -gt d
run smi-nvlink-gt-r nvidia-smi nvlink -gt r
run smi-nvlink-c nvidia-smi nvlink -c
run smi-nvlink-info nvidia-smi nvlink -info
run smi-query-gpu nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,memory.used,ecc.errors.uncorrected.volatile.total,remapped_rows.pending,remapped_rows.failure,clocks_event_reasons.active,pcie.link.gen.current,pcie.link.width.current,temperature.gpu,power.draw,fabric.state --format=csv
run smi-query-compute-apps nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
run smi-L nvidia-smi -L
run dmesg-nvrm sh -c 'dmesg 2>&1 | grep -E "NVRM|nvidia|Xid" | tail -200'
run ibstat ibstat
run ibv-devinfo ibv_devinfo -v
run ip-d-link ip -d link
run lspci-nvidia sh -c 'lspci -nn 2>&1 | grep -i nvidia'
ls -la "$out"
