#!/usr/bin/env python3
"""Redis CPU of the whole per-query contract, without the gateway and workers (issue 35;
docs/bench/host-path.md, "Redis CPU a party query, piece by piece").

Plays one gateway and one worker against its own redis-server on loopback, over raw RESP
connections (no client library), batch after batch, the way the real ones talk to Redis on the
`Prefer: wait` path with an Idempotency-Key (docs/redis.md, "Commands a query costs"):

  gateway   a batch of B submits as two pipelines on its own connection (since 2026-11-29, no
            script): the backlog's XLEN and each key's SET … NX GET EX, then the XADD of each
            job whose key was new (`lua-submit`: the script that did both before)
  worker    XREADGROUP COUNT B on its reader connection; then, on its writer connection, one
            pipeline of blocks of 16: per query SET … PX of the Idempotency-Key record with the
            record (4 KiB answer) after its claim (the held query's net); per block one SPUBLISH
            of the block's records, XACK and XDEL of its entries
  gateway   one RESP3 connection SSUBSCRIBEd to the channel, drained by a thread

and reads Redis's utime + stime from /proc around each measurement: the whole process and its
main thread (the one that runs every command), so that a variant's cost a query is Redis's own
CPU, socket I/O included. `INFO commandstats` gives the commands a query and their own µs.

Variants (--variants, default all): `contract` (as above: what main runs), and the candidates
measured against it, each a change to one piece (see VARIANTS below).

    ops/bench/query-contract-cost.py [--port 7392] [--batches 1,8,64] [--queries 20000]
        [--variants contract,...] [--redis-args "--io-threads 2 --io-threads-do-reads yes"]
"""
import argparse
import importlib.util
import os
import subprocess
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
_spec = importlib.util.spec_from_file_location("submit_cost", os.path.join(HERE, "submit-script-cost.py"))
_submit_cost = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_submit_cost)
encode, Resp = _submit_cost.encode, _submit_cost.Resp

BLOCK = 16  # queue/src/consumer/finish.rs FINISH_BLOCK
P = "{P0}"
JOBS, GROUP, CHANNEL = P + ":jobs", "workers", P + ":done"


def lua_at(commit, name):
    """A script as it was at `commit` (one the tree no longer has)."""
    return subprocess.run(["git", "-C", ROOT, "show", f"{commit}:queue/lua/{name}"],
                          check=True, capture_output=True).stdout


# The last commit with queue/lua/submit.lua, the submit script that two pipelines replaced.
LUA_SUBMIT_AT = "8c9c62c"


def publish_block(cmds, frames, block):
    """A block's completion: its frames in one SPUBLISH, its entries acknowledged and deleted
    (what the worker sends after a block's records); the commands it adds."""
    cmds.append(encode("SPUBLISH", CHANNEL, b"".join(frames)))
    ids = [e for e, _ in block]
    cmds.append(encode("XACK", JOBS, GROUP, *ids))
    cmds.append(encode("XDEL", JOBS, *ids))
    return 3


class Contract:
    """The contract as main runs it (since 2026-11-29 a held query's net in its Idempotency-Key
    record, and the submit in two pipelines without a script). Subclasses change one piece
    each."""

    net_in_idempotency = True
    pexpire = True

    def __init__(self, conns, job, record):
        self.gw, self.reader, self.writer = conns
        self.job, self.record = job, record
        lua = self.submit_lua()
        self.sha = self.gw.send(encode("SCRIPT", "LOAD", lua), 1)[0] if lua else None

    def submit_lua(self):
        return None

    def submit(self, ids):
        """The backlog's XLEN and each key's claim, then the XADDs of the new claims (every query
        here is held: no `queued` record)."""
        cmds = [encode("XLEN", JOBS)]
        for rid in ids:
            cmds.append(encode("SET", P + ":idem:k" + rid, "fp" + rid[:8] + " " + rid, "NX", "GET",
                               "EX", 600))
        replies = self.gw.send(b"".join(cmds), len(cmds))
        fresh = [rid for rid, known in zip(ids, replies[1:]) if known is None]
        cmds = [encode("XADD", JOBS, "*", "id", rid, "job", self.job) for rid in fresh]
        self.gw.send(b"".join(cmds), len(cmds))

    def read(self, b):
        reply = self.reader.send(encode("XREADGROUP", "GROUP", GROUP, "w0", "COUNT", b,
                                        "STREAMS", JOBS, ">"), 1)[0]
        entries = reply[0][1]
        return [(e[0], e[1][1].decode()) for e in entries]

    def finish(self, entries):
        cmds, n = [], 0
        for i in range(0, len(entries), BLOCK):
            block = entries[i:i + BLOCK]
            frames = []
            for entry_id, rid in block:
                if self.net_in_idempotency:
                    cmds.append(encode("SET", P + ":idem:k" + rid,
                                       b"fp%s %s\n%s" % (rid[:8].encode(), rid.encode(), self.record),
                                       "PX", 5000))
                    n += 1
                else:
                    cmds.append(encode("SET", P + ":q:" + rid, self.record, "PX", 5000))
                    n += 1
                if self.pexpire and not self.net_in_idempotency:
                    cmds.append(encode("PEXPIRE", P + ":idem:k" + rid, 5000, "LT"))
                    n += 1
                frames.append(b"%s %d\n%s" % (rid.encode(), len(self.record), self.record))
            n += publish_block(cmds, frames, block)
        self.writer.send(b"".join(cmds), n)

    def round(self, ids):
        self.submit(ids)
        entries = self.read(len(ids))
        assert len(entries) == len(ids), (len(entries), len(ids))
        self.finish(entries)


class LuaSubmit(Contract):
    """The submit as one run of queue/lua/submit.lua carrying the batch (until 2026-11-29)."""

    def submit_lua(self):
        return lua_at(LUA_SUBMIT_AT, "submit.lua")

    def submit(self, ids):
        keys, argv = [JOBS], [0, 60, 600]
        for rid in ids:
            keys.append(P + ":idem:k" + rid)
            argv += [rid, self.job, "", "fp" + rid[:8] + " " + rid]
        self.gw.send(encode("EVALSHA", self.sha, len(keys), *keys, *argv), 1)


class OwnRecord(LuaSubmit):
    """The contract before 2026-11-29: a held query's net in a record of its own (`SET q:<id>
    … PX`) and its Idempotency-Key record shortened beside it (`PEXPIRE … LT`)."""

    net_in_idempotency = False


class Submit3d08f69(OwnRecord):
    """submit.lua as it was at 3d08f69 (before issue 35's lean script): every query's record and
    Idempotency-Key keys declared, the key's value joined in Lua, a {'queued', id} table a
    query answered."""

    def submit_lua(self):
        return subprocess.run(["git", "-C", ROOT, "show", "3d08f69:queue/lua/submit.lua"],
                              check=True, capture_output=True).stdout

    def submit(self, ids):
        keys, argv = [JOBS], [0, 60, 600]
        for rid in ids:
            keys += [P + ":q:" + rid, P + ":idem:k" + rid]
            argv += [rid, self.job, "", "fp" + rid[:8]]
        self.gw.send(encode("EVALSHA", self.sha, len(keys), *keys, *argv), 1)


class NoPexpire(OwnRecord):
    """What the worker's PEXPIRE LT of a held query's Idempotency-Key record costs."""

    pexpire = False


class NoScript(OwnRecord):
    """The submit as a plain pipeline (XLEN, then per query SET … NX GET EX and XADD): what
    the script's own cost is, the bound of any cheaper script (not the contract: the XADD
    would not depend on the key)."""

    def submit(self, ids):
        cmds = [encode("XLEN", JOBS)]
        for rid in ids:
            cmds.append(encode("SET", P + ":idem:k" + rid, "fp" + rid[:8] + " " + rid, "NX", "GET",
                               "EX", 600))
            cmds.append(encode("XADD", JOBS, "*", "id", rid, "job", self.job))
        self.gw.send(b"".join(cmds), len(cmds))


class BatchEntry(Submit3d08f69):
    """One stream entry a submit batch (fields id1 job1 id2 job2 …): one XADD, one entry read,
    one XACK and XDEL a batch instead of a query."""

    def submit_lua(self):
        return b"""
local out = {}
local entry = {}
local n = (#ARGV - 3) / 4
for i = 1, n do
  local id, job, record, fp = ARGV[4 * i], ARGV[4 * i + 1], ARGV[4 * i + 2], ARGV[4 * i + 3]
  local known = false
  if fp ~= '' then
    known = redis.call('SET', KEYS[2 * i + 1], fp .. ' ' .. id, 'NX', 'GET', 'EX', ARGV[3])
  end
  if known then out[i] = {'known', known} else
    entry[#entry + 1] = id
    entry[#entry + 1] = job
    out[i] = {'queued', id}
  end
end
if #entry > 0 then redis.call('XADD', KEYS[1], '*', unpack(entry)) end
return out
"""

    def read(self, b):
        reply = self.reader.send(encode("XREADGROUP", "GROUP", GROUP, "w0", "COUNT", b,
                                        "STREAMS", JOBS, ">"), 1)[0]
        out = []
        for entry_id, fields in reply[0][1]:
            for i in range(0, len(fields), 2):
                out.append((entry_id, fields[i].decode()))
        return out

    def finish(self, entries):
        cmds, n = [], 0
        for i in range(0, len(entries), BLOCK):
            block = entries[i:i + BLOCK]
            frames = []
            for entry_id, rid in block:
                cmds.append(encode("SET", P + ":q:" + rid, self.record, "PX", 5000))
                cmds.append(encode("PEXPIRE", P + ":idem:k" + rid, 5000, "LT"))
                n += 2
                frames.append(b"%s %d\n%s" % (rid.encode(), len(self.record), self.record))
            cmds.append(encode("SPUBLISH", CHANNEL, b"".join(frames)))
            n += 1
        ids = list(dict.fromkeys(e for e, _ in entries))
        cmds.append(encode("XACK", JOBS, GROUP, *ids))
        cmds.append(encode("XDEL", JOBS, *ids))
        n += 2
        self.writer.send(b"".join(cmds), n)


FINISH_LUA = b"""
local n = tonumber(ARGV[1])
local frames = {}
for i = 1, n do
  local id, keep, record = ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1]
  redis.call('SET', KEYS[2 * i], record, 'PX', keep)
  redis.call('PEXPIRE', KEYS[2 * i + 1], keep, 'LT')
  frames[i] = id .. ' ' .. #record .. '\\n' .. record
end
redis.call('SPUBLISH', ARGV[3 * n + 2], table.concat(frames))
local ids = {}
for i = 3 * n + 3, #ARGV do ids[#ids + 1] = ARGV[i] end
redis.call('XACK', KEYS[1], 'workers', unpack(ids))
redis.call('XDEL', KEYS[1], unpack(ids))
return 0
"""


class FinishScript(OwnRecord):
    """The worker's block as one script run: each record crosses into Redis once (as an
    argument) and the script SETs it and joins it into the block's SPUBLISH, instead of the
    record's SET and the same bytes again inside SPUBLISH."""

    def __init__(self, conns, job, record):
        super().__init__(conns, job, record)
        self.finish_sha = self.writer.send(encode("SCRIPT", "LOAD", FINISH_LUA), 1)[0]

    def finish(self, entries):
        cmds = []
        for i in range(0, len(entries), BLOCK):
            block = entries[i:i + BLOCK]
            keys, argv = [JOBS], [len(block)]
            for entry_id, rid in block:
                keys += [P + ":q:" + rid, P + ":idem:k" + rid]
                argv += [rid, 5000, self.record]
            argv.append(CHANNEL)
            argv += [e for e, _ in block]
            cmds.append(encode("EVALSHA", self.finish_sha, len(keys), *keys, *argv))
        self.writer.send(b"".join(cmds), len(cmds))


class PublishOnly(Contract):
    """Lower bound of any design that stores nothing for a held query: no SET, no PEXPIRE
    (not a contract: no net for a missed event)."""

    def finish(self, entries):
        cmds, n = [], 0
        for i in range(0, len(entries), BLOCK):
            block = entries[i:i + BLOCK]
            frames = [b"%s %d\n%s" % (rid.encode(), len(self.record), self.record) for _, rid in block]
            n += publish_block(cmds, frames, block)
        self.writer.send(b"".join(cmds), n)


class NoScriptNet(Contract):
    """The submit as one plain pipeline (XLEN, then per query SET … NX GET EX and XADD) with the
    net in the Idempotency-Key record: `contract` in one round trip instead of two (not a
    contract by itself: the XADD would not depend on the key's claim)."""

    def submit(self, ids):
        cmds = [encode("XLEN", JOBS)]
        for rid in ids:
            cmds.append(encode("SET", P + ":idem:k" + rid, "fp" + rid[:8] + " " + rid, "NX", "GET",
                               "EX", 600))
            cmds.append(encode("XADD", JOBS, "*", "id", rid, "job", self.job))
        self.gw.send(b"".join(cmds), len(cmds))


CLAIM_LUA = b"""
local call = redis.call
local out = {}
for i = 1, #KEYS - 1 do
  out[i] = call('SET', KEYS[i + 1], ARGV[i + 2], 'NX', 'GET', 'EX', ARGV[2]) or 0
end
local len = tonumber(ARGV[1]) > 0 and call('XLEN', KEYS[1]) or 0
return out
"""


class ClaimScriptPlainXadd(Contract):
    """A script that only claims the keys (SET … NX GET EX each), then the XADDs as plain
    commands in the same pipeline: what passing each job's bytes through Lua costs (not a
    contract: the XADD would not depend on the claim)."""

    def submit_lua(self):
        return CLAIM_LUA

    def submit(self, ids):
        keys, argv = [JOBS], [0, 600]
        for rid in ids:
            keys.append(P + ":idem:k" + rid)
            argv.append("fp" + rid[:8] + " " + rid)
        cmds = [encode("EVALSHA", self.sha, len(keys), *keys, *argv)]
        for rid in ids:
            cmds.append(encode("XADD", JOBS, "*", "id", rid, "job", self.job))
        self.gw.send(b"".join(cmds), len(cmds))


BATCH_BLOB_LUA = b"""
local call = redis.call
local out = {}
local skip = {}
for i = 1, #KEYS - 1 do
  local known = call('SET', KEYS[i + 1], ARGV[i + 3], 'NX', 'GET', 'EX', ARGV[2])
  if known then out[i] = known; skip[#skip + 1] = i else out[i] = 0 end
end
if #skip == 0 then
  call('XADD', KEYS[1], '*', 'jobs', ARGV[3])
else
  call('XADD', KEYS[1], '*', 'jobs', ARGV[3], 'skip', table.concat(skip, ' '))
end
return out
"""


class BatchBlob(Contract):
    """One stream entry a submit batch, the batch's jobs one argument (the gateway joins them;
    ids inside): the script claims each key and appends one entry; the worker reads one entry
    a batch, writes each query's net as now, and acknowledges and deletes one entry a batch."""

    def submit_lua(self):
        return BATCH_BLOB_LUA

    def submit(self, ids):
        keys, argv = [JOBS], [0, 600]
        blob = b"".join(rid.encode() + self.job for rid in ids)
        argv.append(blob)
        for rid in ids:
            keys.append(P + ":idem:k" + rid)
            argv.append("fp" + rid[:8] + " " + rid)
        self.gw.send(encode("EVALSHA", self.sha, len(keys), *keys, *argv), 1)

    def read(self, b):
        reply = self.reader.send(encode("XREADGROUP", "GROUP", GROUP, "w0", "COUNT", b,
                                        "STREAMS", JOBS, ">"), 1)[0]
        out = []
        size = 32 + len(self.job)
        for entry_id, fields in reply[0][1]:
            blob = fields[1]
            for i in range(0, len(blob), size):
                out.append((entry_id, blob[i:i + 32].decode()))
        return out

    def finish(self, entries):
        cmds, n = [], 0
        for i in range(0, len(entries), BLOCK):
            block = entries[i:i + BLOCK]
            frames = []
            for entry_id, rid in block:
                cmds.append(encode("SET", P + ":idem:k" + rid,
                                   b"fp%s %s\n%s" % (rid[:8].encode(), rid.encode(), self.record),
                                   "PX", 5000))
                n += 1
                frames.append(b"%s %d\n%s" % (rid.encode(), len(self.record), self.record))
            cmds.append(encode("SPUBLISH", CHANNEL, b"".join(frames)))
            n += 1
        ids = list(dict.fromkeys(e for e, _ in entries))
        cmds.append(encode("XACK", JOBS, GROUP, *ids))
        cmds.append(encode("XDEL", JOBS, *ids))
        n += 2
        self.writer.send(b"".join(cmds), n)


class TwoStepBatchEntry(BatchBlob):
    """Both levers: the submit without Lua (the claims, then one XADD) and one stream entry a
    batch (the batch's jobs one field, ids inside): a model of the next step, not built."""

    def submit(self, ids):
        cmds = [encode("XLEN", JOBS)]
        for rid in ids:
            cmds.append(encode("SET", P + ":idem:k" + rid, "fp" + rid[:8] + " " + rid, "NX", "GET",
                               "EX", 600))
        replies = self.gw.send(b"".join(cmds), len(cmds))
        fresh = [rid for rid, known in zip(ids, replies[1:]) if known is None]
        blob = b"".join(rid.encode() + self.job for rid in fresh)
        self.gw.send(encode("XADD", JOBS, "*", "jobs", blob), 1)


VARIANTS = {"contract": Contract, "lua-submit": LuaSubmit, "own-record": OwnRecord, "submit-3d08f69": Submit3d08f69,
            "no-pexpire": NoPexpire, "no-script": NoScript, "batch-entry": BatchEntry,
            "finish-script": FinishScript, "publish-only": PublishOnly,
            "no-script-net": NoScriptNet, "claim-script": ClaimScriptPlainXadd,
            "batch-blob": BatchBlob, "two-step-batch-entry": TwoStepBatchEntry}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=7392)
    ap.add_argument("--job-bytes", type=int, default=600)
    ap.add_argument("--answer-bytes", type=int, default=4096)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--queries", type=int, default=20000, help="queries a measurement")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--redis-server", default="redis-server")
    ap.add_argument("--redis-args", default="", help="extra redis-server arguments")
    ap.add_argument("--detail", action="store_true", help="each command's calls and µs a query")
    args = ap.parse_args()
    server = subprocess.Popen(
        [args.redis_server, "--port", str(args.port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", *args.redis_args.split()], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                Resp(args.port).send(encode("PING"), 1)
                break
            except OSError:
                time.sleep(0.05)
        conns = [Resp(args.port) for _ in range(3)]
        admin = Resp(args.port)
        sub = Resp(args.port)
        sub.send(encode("HELLO", 3), 1)
        sub.send(encode("SSUBSCRIBE", CHANNEL), 1)
        received = [0]

        def drain():
            try:
                while True:
                    sub.read()
                    received[0] += 1
            except Exception:  # the server stopped
                pass

        threading.Thread(target=drain, daemon=True).start()
        ticks = os.sysconf("SC_CLK_TCK")

        def cpu(task):
            stat = open(f"/proc/{server.pid}/task/{task}/stat").read().rsplit(")", 1)[1].split()
            return (int(stat[11]) + int(stat[12])) / ticks

        def cpu_all():
            return sum(cpu(t) for t in os.listdir(f"/proc/{server.pid}/task"))

        def kernel_all():
            """The process's system time (its socket reads and writes, mostly)."""
            stat = open(f"/proc/{server.pid}/stat").read().rsplit(")", 1)[1].split()
            return int(stat[12]) / ticks

        job = os.urandom(args.job_bytes)
        record = b"done 1 4096 100 200 - k\n" + os.urandom(args.answer_bytes)
        print(f"redis: {subprocess.run([args.redis_server, '--version'], capture_output=True, text=True).stdout.strip()}")
        print(f"args: {args.redis_args or '-'}; job {args.job_bytes} B, answer {args.answer_bytes} B")
        print("| variant | B | Redis µs / query | main thread µs / query | of which kernel µs | "
              "commands / query | command µs / query (commandstats, script runs less their commands) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for b in (int(x) for x in args.batches.split(",")):
            for name in args.variants.split(","):
                admin.send(encode("DEL", JOBS, P + ":jobs2"), 1)
                admin.send(encode("XGROUP", "CREATE", JOBS, GROUP, "0", "MKSTREAM"), 1)
                variant = VARIANTS[name](conns, job, record)
                rounds = max(1, args.queries // b)
                for r in range(min(rounds, 20)):  # warm-up
                    variant.round([os.urandom(16).hex() for _ in range(b)])
                admin.send(encode("CONFIG", "RESETSTAT"), 1)
                all0, main0, sys0 = cpu_all(), cpu(server.pid), kernel_all()
                for r in range(rounds):
                    variant.round([os.urandom(16).hex() for _ in range(b)])
                all1, main1, sys1 = cpu_all(), cpu(server.pid), kernel_all()
                stats = admin.send(encode("INFO", "commandstats"), 1)[0].decode()
                calls = usec = 0
                q = rounds * b
                each = []
                for line in stats.splitlines():
                    if line.startswith("cmdstat_") and not line.startswith(("cmdstat_info", "cmdstat_config")):
                        cmd, fields = line[len("cmdstat_"):].split(":", 1)
                        f = dict(kv.split("=") for kv in fields.split(","))
                        calls += int(f["calls"])
                        # A script's usec includes the commands it runs, which are counted too.
                        usec += 0 if cmd in ("evalsha", "eval") else float(f["usec"])
                        each.append(f"{cmd} {int(f['calls']) / q:.2f}x {float(f['usec']) / q:.2f}us")
                print(f"| {name} | {b} | {1e6 * (all1 - all0) / q:.2f} | {1e6 * (main1 - main0) / q:.2f} | "
                      f"{1e6 * (sys1 - sys0) / q:.2f} | {calls / q:.2f} | {usec / q:.2f} |", flush=True)
                if args.detail:
                    print(f"|   | {', '.join(each)} (a query: calls, µs) | | | | | |", flush=True)
                admin.send(encode("FLUSHALL"), 1)
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
