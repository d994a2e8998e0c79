-- shard_combine.lua: XORs one shard's partial answer into a query and, with the last shard's,
-- completes it; all in one atomic step.
--
-- The XOR is Redis' own BITOP XOR on strings (the partial is staged in KEYS[3] for it), never a
-- Lua byte loop. Idempotent per shard: field part:<I> of the combine state records that shard
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
if redis.call('EXISTS', state) == 0 then
  ack()
  return 'gone'
end
if redis.call('HGET', state, 'shards') ~= ARGV[2] or redis.call('HGET', state, 'epoch') ~= ARGV[4] then
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
  local digest = redis.call('HGET', state, 'digest')
  if digest and digest ~= ARGV[13] then
    return fail('the shards answered from databases with different digests (' .. digest ..
      ', ' .. ARGV[13] .. '): every shard must serve the same database')
  end
  redis.call('HSET', state, 'digest', ARGV[13])
end
local part = 'part:' .. ARGV[1]
if redis.call('HEXISTS', state, part) == 1 then
  ack()
  return 'duplicate'
end
if tonumber(redis.call('HGET', state, 'parts') or '0') > 0 and redis.call('EXISTS', sum) == 0 then
  -- Partials were XORed in but their sum is gone: completing now would answer wrong.
  return fail('the partial answers of the shards were lost; submit the query again')
end
redis.call('SET', staged, ARGV[3])
redis.call('BITOP', 'XOR', sum, sum, staged)
redis.call('DEL', staged)
-- The sum lives as long as the state that waits for it.
redis.call('EXPIRE', sum, math.max(1, redis.call('TTL', state)))
redis.call('HSET', state, part, '1')
local parts = redis.call('HINCRBY', state, 'parts', 1)
-- The slowest shard's timings are the job's.
for _, f in ipairs({{'scan_us', 6}, {'worker_us', 7}}) do
  local v = tonumber(redis.call('HGET', state, f[1]) or '0')
  if tonumber(ARGV[f[2]]) > v then redis.call('HSET', state, f[1], ARGV[f[2]]) end
end
ack()
if parts < tonumber(ARGV[2]) then
  return 'partial'
end
local digest = redis.call('HGET', state, 'digest') or '-'
local rec = 'done ' .. ARGV[4] .. ' ' .. ARGV[5] .. ' ' .. redis.call('HGET', state, 'scan_us') ..
  ' ' .. redis.call('HGET', state, 'worker_us') .. ' ' .. digest .. ' ' .. ARGV[14] .. '\n' ..
  redis.call('GET', sum)
redis.call('SET', record, rec, 'PX', keep)
redis.call('DEL', sum, state)
publish(rec)
redis.call('XDEL', jobs, ARGV[9])
return 'done'
