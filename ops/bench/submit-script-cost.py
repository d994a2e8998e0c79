#!/usr/bin/env python3
"""Redis CPU a queued job costs: one run of queue/lua/submit.lua carrying B jobs, against B plain
pipelined XADDs (issue 35; docs/bench/host-path.md, "A submit tick"). The script is read as it
was at 8c9c62c, its last commit: since 2026-11-29 the gateway submits without it
(ops/bench/query-contract-cost.py measures the submit as it is).

Starts its own redis-server on PORT (loopback), sends ROUNDS batches of each kind over one raw
RESP connection and reads the server's utime + stime from /proc between them, so the figure is
Redis's own CPU a job, the socket I/O of the batches included. No client library needed.

    ops/bench/submit-script-cost.py [--port 7391] [--job-bytes 600] [--batches 1,8,32,128]
"""
import argparse
import os
import socket
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += [b"$%d\r\n" % len(a), a, b"\r\n"]
    return b"".join(out)


class Resp:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:].strip()
        if kind == b"*":
            return [self.read() for _ in range(int(rest))]
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        return rest

    def send(self, payload, replies):
        self.sock.sendall(payload)
        return [self.read() for _ in range(replies)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=7391)
    ap.add_argument("--job-bytes", type=int, default=600)
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--jobs", type=int, default=20000, help="jobs a measurement")
    args = ap.parse_args()
    server = subprocess.Popen(
        ["redis-server", "--port", str(args.port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                conn = Resp(args.port)
                break
            except OSError:
                time.sleep(0.05)
        ticks = os.sysconf("SC_CLK_TCK")

        def cpu():
            stat = open(f"/proc/{server.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(stat[11]) + int(stat[12])) / ticks

        lua = subprocess.run(["git", "-C", ROOT, "show", "8c9c62c:queue/lua/submit.lua"],
                             check=True, capture_output=True).stdout
        sha = conn.send(encode("SCRIPT", "LOAD", lua), 1)[0]
        job = os.urandom(args.job_bytes)
        jobs = "{P0}:jobs"

        def script(b):
            keys, argv = [jobs], [0, 60, 60]
            for _ in range(b):
                # No record, no Idempotency-Key: the script takes no key of the query's.
                argv += [os.urandom(16).hex(), job, "", ""]
            return encode("EVALSHA", sha, len(keys), *keys, *argv), 1

        def plain(b):
            cmds = [encode("XADD", jobs, "*", "id", os.urandom(16).hex(), "job", job)
                    for _ in range(b)]
            return b"".join(cmds), b

        for b in (int(x) for x in args.batches.split(",")):
            for name, make in (("script", script), ("plain XADD", plain)):
                conn.send(encode("DEL", jobs), 1)
                rounds = max(1, args.jobs // b)
                start = cpu()
                for r in range(rounds):
                    conn.send(*make(b))
                    if r % 50 == 49:
                        conn.send(encode("DEL", jobs), 1)
                used = cpu() - start
                print(f"B={b:<4} {name:<11} Redis CPU {1e6 * used / (rounds * b):6.2f} us a job")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
