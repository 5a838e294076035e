#!/bin/bash
# The five node checks of bin/bench's "hc vs NHC-style bash" rows, done the way LBNL NHC
# (github.com/mej/nhc, scripts/lbnl_{hw,fs,ps}.nhc) does them: its gather functions read
# /proc/meminfo, /proc/net/dev and /proc/mounts with `while read -a`, run `df -Tka` and
# `ps axo ...` once, load /etc/passwd for the ps check's user names, and each check then
# walks the gathered arrays. NHC's framework (config parsing, its many other gatherers,
# logging to a file) is left out: this is a floor for NHC, not NHC.
#
# usage: nhc_floor.sh MEM_MIN_KB IFACE MOUNTPOINT FREE_PATH FREE_MIN_KB PROCESS
# exit 0 when all five pass, 1 (with NHC's message on stderr) at the first that fails.
set -f
MEM_MIN_KB=$1 IFACE=$2 MOUNTPOINT=$3 FREE_PATH=$4 FREE_MIN_KB=$5 PROCESS=$6

die() { echo "ERROR:  nhc:  Health check failed:  $*" >&2; exit 1; }

# --- nhc_hw_gather_data (memory and Ethernet parts) ---
HW_RAM_TOTAL=0 HW_RAM_FREE=0
while read -a FIELD; do
    case ${FIELD[0]} in
        MemTotal:) HW_RAM_TOTAL=${FIELD[1]} ;;
        MemFree:|Buffers:|Cached:) : $((HW_RAM_FREE += FIELD[1])) ;;
        SwapTotal:) HW_SWAP_TOTAL=${FIELD[1]} ;;
        SwapFree:) HW_SWAP_FREE=${FIELD[1]} ;;
    esac
done < /proc/meminfo
HW_ETH_DEV=()
while read -a FIELD; do
    [[ ${FIELD[0]} == *:* ]] && HW_ETH_DEV[${#HW_ETH_DEV[*]}]=${FIELD[0]%%:*}
done < /proc/net/dev

# --- nhc_fs_mounts_gather_data ---
FS_MNTPT=()
while read -a FIELD; do
    FS_MNTPT[${#FS_MNTPT[*]}]=${FIELD[1]}
done < /proc/mounts

# --- nhc_fs_df_gather_data: df -Tka, one array per column ---
IFS=$'\n'; LINES=( $(df -Tka 2>/dev/null) ); IFS=$' \t\n'
DF_MNTPT=() DF_FREE=() DF_SIZE=()
for ((i = 1; i < ${#LINES[*]}; i++)); do
    FIELD=( ${LINES[$i]} )
    DF_SIZE[$i]=${FIELD[2]} DF_FREE[$i]=${FIELD[4]} DF_MNTPT[$i]=${FIELD[6]}
done

# --- nhc_ps_gather_data: passwd, then ps axo ... ---
declare -A PWDATA
while IFS=: read -r PW_USER _ PW_UID _; do PWDATA[$PW_UID]=$PW_USER; done < /etc/passwd
IFS=$'\n'; LINES=( $(COLUMNS=1024 ps axo 'user:32,uid,pid,ppid,pcpu,pmem,rss,vsz,bsdtime,args') ); IFS=$' \t\n'
PS_ARGS=()
for ((i = 1; i < ${#LINES[*]}; i++)); do
    LINE=( ${LINES[$i]} )
    PS_ARGS[${LINE[2]}]="${LINE[*]:9}"
done

# --- check_hw_physmem MEM_MIN_KB ---
(( HW_RAM_TOTAL >= MEM_MIN_KB )) ||
    die "check_hw_physmem:  Actual RAM size ($HW_RAM_TOTAL kB) less than minimum allowed ($MEM_MIN_KB kB)."

# --- check_hw_eth IFACE (NHC checks presence; up as hc's net.mtu does) ---
found=
for DEV in "${HW_ETH_DEV[@]}"; do [[ $DEV == "$IFACE" ]] && found=1 && break; done
[[ -n $found ]] || die "check_hw_eth:  Ethernet device $IFACE not detected."
read -r OPER < "/sys/class/net/$IFACE/operstate"
[[ $OPER == up ]] || die "check_hw_eth:  Ethernet device $IFACE is $OPER."

# --- check_fs_mount MOUNTPOINT ---
found=
for MNT in "${FS_MNTPT[@]}"; do [[ $MNT == "$MOUNTPOINT" ]] && found=1 && break; done
[[ -n $found ]] || die "check_fs_mount:  $MOUNTPOINT not mounted"

# --- check_fs_free FREE_PATH FREE_MIN_KB (the longest mount point holding the path) ---
best=-1
for i in "${!DF_MNTPT[@]}"; do
    MNT=${DF_MNTPT[$i]}
    if [[ $FREE_PATH == "$MNT" || $FREE_PATH == "${MNT%/}"/* ]] && (( ${#MNT} > best )) && [[ ${DF_SIZE[$i]} != 0 ]]; then
        best=${#MNT} FS_FREE=${DF_FREE[$i]}
    fi
done
(( best >= 0 )) || die "check_fs_free:  $FREE_PATH not found"
(( FS_FREE >= FREE_MIN_KB )) || die "check_fs_free:  $FREE_PATH has only $FS_FREE kB free, minimum is $FREE_MIN_KB kB"

# --- check_ps_service PROCESS (NHC matches the command's basename) ---
found=
for ARGS in "${PS_ARGS[@]}"; do
    CMD=${ARGS%% *}; CMD=${CMD##*/}
    [[ $CMD == "$PROCESS" || $CMD == "$PROCESS:" ]] && found=1 && break
done
[[ -n $found ]] || die "check_ps_service:  Service $PROCESS (process $PROCESS) not running"
exit 0
