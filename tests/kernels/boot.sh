#!/usr/bin/env bash
# Boot one of Debian's kernels in a virtual machine (virtme-ng, QEMU software emulation) and run a
# command in it as root, in the caller's working directory; or run it here, on this machine ("host").
#
#   tests/kernels/boot.sh [--rwdir DIR]... [--timeout SECONDS] SERIES|host CMD...
#
#   SERIES       5.10, 6.1 or 6.12 (fetched by fetch.sh beside this script on first use), or host
#   CMD...       one argument: a bash script ("make unit; pytest -x tests"); several: a command and its
#                arguments, run as given (boot.sh 6.1 pytest -k "verifier and not slow")
#   --rwdir DIR  a host directory the guest may write to (the rest of the host's filesystem is seen
#                read-only, or through a throw-away overlay); repeatable. Default: $WAITMETER_VM_RWDIR,
#                else the repository's tests/.build. The first one also holds the run's status files.
#   --timeout S  kill the VM (only the QEMU this script started) after S seconds; default
#                $WAITMETER_VM_TIMEOUT, else 600. The exit status is then 124.
#
# Environment: WAITMETER_VM_CPUS (2), WAITMETER_VM_MEMORY (4G), WAITMETER_VM_ENV (names of variables
# passed into the guest; default "PATH"), WAITMETER_VM_VERBOSE=1 (show the guest's console: boot
# problems), WAITMETER_VM_KVM=1 (use KVM: only where it works, not on this project's machines),
# WAITMETER_CACHE (see fetch.sh). Inside the guest WAITMETER_VM is set to the series (or "host").
#
# debugfs, tracefs, bpffs (/sys/fs/bpf) and cgroup v2 (/sys/fs/cgroup) are mounted before CMD runs
# (each only where nothing is mounted yet), RLIMIT_MEMLOCK is lifted, and in a VM the guest kernel's
# /boot (config-*, System.map-*) is bound on /boot.
# CMD's output streams to stdout/stderr; its exit status is boot.sh's (124: timeout; 125: the guest
# reported no status, e.g. it did not boot). At the end a line on stderr gives the kernel release
# (uname -r) the command ran on and the wall time of boot and run.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${WAITMETER_CACHE:-$HOME/.cache/waitmeter}/kernels

log() { printf 'boot.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 2; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }

rwdirs=()
timeout_s=${WAITMETER_VM_TIMEOUT:-600}
while [ $# -gt 0 ]; do
    case "$1" in
        --rwdir) [ $# -ge 2 ] || usage; rwdirs+=("$2"); shift 2 ;;
        --rwdir=*) rwdirs+=("${1#--rwdir=}"); shift ;;
        --timeout) [ $# -ge 2 ] || usage; timeout_s=$2; shift 2 ;;
        --timeout=*) timeout_s=${1#--timeout=}; shift ;;
        -h | --help) usage ;;
        --) shift; break ;;
        -*) die "unknown option $1" ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || usage
series=$1
shift
if ! [[ $timeout_s =~ ^[1-9][0-9]*$ ]]; then die "bad timeout '$timeout_s'"; fi
[ ${#rwdirs[@]} -gt 0 ] || rwdirs=("${WAITMETER_VM_RWDIR:-$REPO/tests/.build}")
for i in "${!rwdirs[@]}"; do
    mkdir -p "${rwdirs[$i]}"
    rwdirs[i]=$(cd "${rwdirs[$i]}" && pwd -P)
done

# the command, as one bash script
if [ $# -eq 1 ]; then
    cmd=$1
else
    cmd=$(printf '%q ' "$@")
fi

# the kernel, fetched (or found in the cache) before anything else
if [ "$series" = host ]; then
    kernel=$(uname -r)
else
    line=$("$HERE/fetch.sh" "$series") || die "fetch.sh $series failed"
    read -r _ kernel root <<<"$line"
    export PATH="$CACHE/venv/bin:$PATH" # vng runs virtme-run from PATH
fi

# status files: in the first writable dir, so that the guest can write them and we can read them
state=$(mktemp -d "${rwdirs[0]}/.boot.XXXXXX")
priv=$(mktemp -d "${TMPDIR:-/tmp}/boot.XXXXXX") # host-only files
tpid=
# shellcheck disable=SC2317 # run by the traps
cleanup() {
    if [ -n "$tpid" ]; then # interrupted: stop the VM (timeout(1) passes the signal on), wait for it
        kill -TERM "$tpid" 2>/dev/null || true
        wait "$tpid" 2>/dev/null || true
    fi
    rm -rf "$state" "$priv"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# the script run in the guest (or here): mounts, environment, working directory, command, status
# shellcheck disable=SC2016 # its $variables are the guest's
{
    echo '#!/bin/bash'
    printf 'state=%q\n' "$state"
    echo 'uname -r >"$state/uname"'
    echo 'fs() { # fs TYPE DIR: mount a pseudo file system unless DIR already is a mount point'
    echo '    mountpoint -q "$2" && return 0'
    echo '    mkdir -p "$2" 2>/dev/null'
    echo '    mount -t "$1" "$1" "$2" || echo "boot.sh: cannot mount $1 on $2" >&2'
    echo '}'
    echo 'fs debugfs /sys/kernel/debug'
    echo 'fs tracefs /sys/kernel/tracing'
    echo 'fs bpf /sys/fs/bpf'
    echo 'fs cgroup2 /sys/fs/cgroup'
    echo '# BPF maps are charged to RLIMIT_MEMLOCK before 5.11'
    echo 'ulimit -l unlimited 2>/dev/null || true'
    if [ "$series" != host ]; then
        # the guest kernel's config-* and System.map-* on /boot, where libbpf (__kconfig externs) and
        # bpftool look for /boot/config-$(uname -r): Debian's kernels have no /proc/config.gz
        printf 'mount --bind %q /boot || echo "boot.sh: cannot bind the kernel'"'"'s /boot" >&2\n' "$root/boot"
    fi
    for v in ${WAITMETER_VM_ENV:-PATH}; do
        if [ -n "${!v+set}" ]; then printf 'export %s=%q\n' "$v" "${!v}"; fi
    done
    printf 'export WAITMETER_VM=%q\n' "$series"
    printf 'cd %q || { echo 126 >"$state/rc"; exit 126; }\n' "$PWD"
    printf 'bash -c %q\n' "$cmd"
    echo 'rc=$?'
    echo 'echo "$rc" >"$state/rc"'
    echo 'exit "$rc"'
} >"$state/run.sh"

# timeout(1) runs the runner in its own process group and signals that group (vng and the QEMU it
# started, nothing else) on expiry; -k: SIGKILL 20 s after SIGTERM if the guest still holds on
set +e
start=$(date +%s.%N)
if [ "$series" = host ]; then
    timeout -k 20 "$timeout_s" bash "$state/run.sh" </dev/null &
    tpid=$!
    wait "$tpid"
    vrc=$?
    tpid=
else
    runner=(vng --run "$root/boot/vmlinuz-$kernel"
        --cpus "${WAITMETER_VM_CPUS:-2}" --memory "${WAITMETER_VM_MEMORY:-4G}")
    # 9p at once: vng would first try QEMU's virtiofsd, which fails here (3 s lost per shared dir)
    runner+=(--force-9p)
    # software emulation unless told that this machine's KVM can run the guest (see README.md)
    if [ "${WAITMETER_VM_KVM:-0}" != 1 ]; then runner+=(--disable-kvm); fi
    for d in "${rwdirs[@]}"; do runner+=(--rwdir "$d"); done
    if [ "${WAITMETER_VM_VERBOSE:-0}" = 1 ]; then runner+=(--verbose); fi
    runner+=(--exec "bash $state/run.sh")
    # QEMU reopens /proc/self/fd/1 and /proc/self/fd/2 for the guest's output: a regular file
    # (boot.sh >>log) would be truncated and written from offset 0. Hand it FIFOs, copied by cat.
    mkfifo "$priv/stdout" "$priv/stderr"
    cat <"$priv/stdout" &
    opid=$!
    cat <"$priv/stderr" >&2 &
    epid=$!
    timeout -k 20 "$timeout_s" "${runner[@]}" </dev/null >"$priv/stdout" 2>"$priv/stderr" &
    tpid=$!
    wait "$tpid"
    vrc=$?
    tpid=
    wait "$opid" "$epid"
fi
end=$(date +%s.%N)
set -e

if [ -f "$state/rc" ]; then
    rc=$(cat "$state/rc")
elif [ "$vrc" = 124 ] || [ "$vrc" = 137 ]; then
    log "timeout: killed after ${timeout_s} s"
    rc=124
else
    log "the guest reported no exit status (vng exit $vrc); rerun with WAITMETER_VM_VERBOSE=1 to see its console"
    rc=125
fi
if [ -f "$state/uname" ]; then kernel=$(cat "$state/uname"); fi
log "$series: kernel $kernel, exit $rc, $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s wall (boot + run)"
exit "$rc"
