# shellcheck shell=bash
# The process plumbing the CPU bench scripts (ops/bench/host-path.sh, lone.sh,
# gateway-instructions.sh, gateway-cpu.sh, worker-cpu.sh, queue-scale.sh) share, in one copy
# so that a fix to how a bench starts, reads or stops its processes reaches all of them.
# Sourced, never run: `source "$(dirname "${BASH_SOURCE[0]}")/lib/procs.sh"` before the script
# changes directory (the path is the script's own). The GPU scripts have their own
# scripts/lib/bench-procs.sh (a `start` logging to $LOGS/NAME.log, a `get` of a URL).
#
# Sourcing it makes W (a scratch folder) and PIDS (the processes to stop, empty) and sets the
# EXIT trap `stop_all; rm -rf "$W"`: whatever way the script ends, every process it started is
# stopped and the scratch folder removed. A script that must stop more (e.g. a Redis after the
# processes that write to it) redefines stop_all and calls stop_pids in it. Ctrl-C (or a
# TERM) ends the script through the EXIT trap as soon as its foreground command returns
# (`exit 130`): without that trap bash goes on with the script whenever the foreground command
# survives the signal or is not its target (a background process is started with SIGINT
# ignored, a server's own handler ends it, and the script then waited out its load).

W=$(mktemp -d)
PIDS=()

# stop_pids: kills every process in PIDS, then waits for each (so that none outlives the
# script), and empties PIDS
stop_pids() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}

# stop_all: what the EXIT trap stops (by default PIDS; a script may redefine it)
stop_all() { stop_pids; }

trap 'stop_all; rm -rf "$W"' EXIT
trap 'exit 130' INT TERM

# spawn LOG CMD...: CMD in the background, its output (stdout and stderr) to LOG; its pid joins
# PIDS (and is $!)
spawn() {
    local log=$1
    shift
    "$@" >"$log" 2>&1 &
    PIDS+=("$!")
}

# start CPUS LOG CMD...: the same, pinned to CPUS (a taskset list)
start() {
    local cpus=$1 log=$2
    shift 2
    spawn "$log" taskset -c "$cpus" "$@"
}

# get PORT PATH FILE: GET http://127.0.0.1:PORT/PATH into FILE, the body only (bash /dev/tcp;
# no curl needed); fails when nothing listens there
get() {
    exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
    printf 'GET %s HTTP/1.0\r\n\r\n' "$2" >&3
    sed '1,/^\r$/d' <&3 >"$3"
    exec 3>&-
}
