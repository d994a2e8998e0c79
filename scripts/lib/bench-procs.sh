# shellcheck shell=bash
# What the GPU bench scripts (ops/bench/gpu-scale.sh, gpu-e2e-load.sh, sustained.sh,
# load-bench.sh) share to run a party's processes and read them: sourced from the repository
# root on the machine that runs the bench, never run. The caller sets LOGS (the folder each process logs into) and
# PIDS=() (the processes it stops at the end) before it calls `start`.

# start CPUS NAME CMD...: CMD in the background pinned to CPUS, logging to $LOGS/NAME.log; its
# pid joins PIDS.
start() {
    local cpus=$1 name=$2
    shift 2
    taskset -c "$cpus" "$@" >"${LOGS:?}/$name.log" 2>&1 &
    PIDS+=($!)
}

# get URL FILE: GET http://HOST:PORT/PATH into FILE (bash /dev/tcp; the GPU machines have no
# curl for sure).
get() {
    local hostport=${1#http://} path=/${1#http://*/}
    hostport=${hostport%%/*}
    exec 3<>"/dev/tcp/${hostport%:*}/${hostport#*:}" || return 1
    printf 'GET %s HTTP/1.0\r\n\r\n' "$path" >&3
    sed '1,/^\r$/d' <&3 >"$2"
    exec 3>&-
}

# cpu_ticks PID: user + system CPU of a process so far, in clock ticks (1/100 s); 0 when it is
# gone.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

# main_cpu_ticks PID: the same for the process's main thread alone (its tid is its pid; Redis
# runs every command there); 0 when it is gone.
main_cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/task/$1/stat" 2>/dev/null || echo 0; }

# thread_cpu_ticks PID: a line per thread of the process, "tid name ticks" (name: /proc's comm,
# spaces removed)
thread_cpu_ticks() {
    local t
    for t in /proc/"$1"/task/*; do
        echo "${t##*/} $(tr -d ' ' <"$t/comm" 2>/dev/null) $(awk '{print $14 + $15}' "$t/stat" 2>/dev/null || echo 0)"
    done
}
