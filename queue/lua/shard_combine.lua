-- shard_combine.lua: XORs one shard's partial answer into a query and, with the last shard's,
-- completes it; all in one atomic step.
--
-- The XOR is Redis' own BITOP XOR on strings (the partial is staged in KEYS[3] for it), never a
-- Lua byte loop; the first partial is the running sum as it is (no XOR with nothing), and the
-- last one's XOR is the answer, never stored as a sum. One HMGET reads the combine state and one
-- HSET writes it: every command in here counts towards a query's Redis cost (2 shards: 6
-- commands for the first partial, 11 for the last; 20 and 28 before). Idempotent per shard: field part:<I> of the combine state records that shard
-- I's partial is in, so a replica that answers the same job again after a reclaim (or a retried
-- write) XORs nothing twice. The shard's entry is acknowledged in its own consumer group here
-- too, so "partial in" and "acknowledged" never disagree. When the S-th partial arrives the
-- query's record becomes done exactly as an unsharded worker writes it (the `done` record of
-- pirq_queue::record, kept ARGV[8] ms, announced with the record in its frame), the running
-- sum and the combine state are dropped and the stream entry is deleted: every shard's group
-- has acknowledged it by then.
--
-- KEYS[1] the record {Pp}:q:<id>, KEYS[2] the running sum {Pp}:acc:<id>, KEYS[3] the staging key
-- {Pp}:part:<id>:<I>, KEYS[4] the jobs stream, KEYS[5] the combine state {Pp}:sh:<id>.
-- ARGV: [1] shard index I, [2] S, [3] partial bytes, [4] epoch, [5] page size, [6] scan_us,
-- [7] worker_us, [8] milliseconds the final record lives, [9] stream entry id, [10] this
-- shard's group, [11] the events channel of the record's partition ({Pp}:done), [12] request
-- id, [13] the digest of the database the partial was answered from ('' when unknown),
-- [14] the query's Idempotency-Key ('-' when none).
-- Returns 'done', 'partial', 'duplicate', 'final' (already done or failed, or failed now because
-- the shards answered from databases with different digests), 'gone' (the combine state
-- expired or was never started) or 'mismatch' (the state was started for another S or epoch:
-- nothing XORed).
local record, sum, staged, jobs, state = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local keep = ARGV[8]
local function ack() redis.call('XACK', jobs, ARGV[10], ARGV[9]) end
local function publish(rec)
  redis.call('SPUBLISH', ARGV[11], ARGV[12] .. ' ' .. #rec .. '\n' .. rec)
end

local head = redis.call('GETRANGE', record, 0, 4)
if head == 'done ' or head == 'faile' then
  ack()
  return 'final'
end
local part = 'part:' .. ARGV[1]
local st = redis.call('HMGET', state, 'shards', 'epoch', 'digest', 'parts', part, 'scan_us', 'worker_us')
local shards, epoch, digest, mine = st[1], st[2], st[3], st[5]
-- shard_start.lua writes `shards` with the state: without it there is no state.
if not shards then
  ack()
  return 'gone'
end
if shards ~= ARGV[2] or epoch ~= ARGV[4] then
  return 'mismatch'
end
local function fail(message)
  local rec = 'failed internal - ' .. ARGV[7] .. ' ' .. ARGV[14] .. ' ' .. message
  redis.call('SET', record, rec, 'PX', keep)
  redis.call('DEL', sum, state)
  publish(rec)
  redis.call('XDEL', jobs, ARGV[9])
  ack()
  return 'final'
end
-- Every shard must answer from the same database: the first partial's digest is the query's.
if ARGV[13] ~= '' then
  if digest and digest ~= ARGV[13] then
    return fail('the shards answered from databases with different digests (' .. digest ..
      ', ' .. ARGV[13] .. '): every shard must serve the same database')
  end
  digest = ARGV[13]
end
if mine then
  ack()
  return 'duplicate'
end
local parts = tonumber(st[4] or '0')
if parts > 0 and redis.call('EXISTS', sum) == 0 then
  -- Partials were XORed in but their sum is gone: completing now would answer wrong.
  return fail('the partial answers of the shards were lost; submit the query again')
end
-- The slowest shard's timings are the job's.
local scan_us = math.max(tonumber(st[6] or '0'), tonumber(ARGV[6]))
local worker_us = math.max(tonumber(st[7] or '0'), tonumber(ARGV[7]))
parts = parts + 1
if parts < tonumber(ARGV[2]) then
  -- Not the last: into the running sum, which lives as long as the state that waits for it
  -- (BITOP's destination loses its expiry, so it is set again).
  local ttl = redis.call('PTTL', state)
  if ttl < 1 then ttl = 3600000 end
  if parts == 1 then
    redis.call('SET', sum, ARGV[3], 'PX', ttl)
  else
    redis.call('SET', staged, ARGV[3])
    redis.call('BITOP', 'XOR', sum, sum, staged)
    redis.call('DEL', staged)
    redis.call('PEXPIRE', sum, ttl)
  end
  local fields = {part, '1', 'parts', parts, 'scan_us', scan_us, 'worker_us', worker_us}
  if digest then
    fields[#fields + 1] = 'digest'
    fields[#fields + 1] = digest
  end
  redis.call('HSET', state, unpack(fields))
  ack()
  return 'partial'
end
-- The last partial: the answer is the sum XOR it (S = 1 cannot reach here as a sharded party,
-- but would answer its partial as it is).
local answer = ARGV[3]
if parts > 1 then
  redis.call('SET', staged, ARGV[3])
  redis.call('BITOP', 'XOR', staged, staged, sum)
  answer = redis.call('GET', staged)
end
local rec = 'done ' .. ARGV[4] .. ' ' .. ARGV[5] .. ' ' .. scan_us .. ' ' .. worker_us .. ' ' ..
  (digest or '-') .. ' ' .. ARGV[14] .. '\n' .. answer
redis.call('SET', record, rec, 'PX', keep)
redis.call('DEL', sum, state, staged)
publish(rec)
redis.call('XDEL', jobs, ARGV[9])
ack()
return 'done'
