-- shard_combine.lua: XORs one shard's partial answer into a query and, with the last shard's,
-- completes it; all in one atomic step.
--
-- The XOR is Redis' own BITOP XOR on strings (the partial is staged in KEYS[3] for it), never a
-- Lua byte loop. Idempotent per shard: field part:<I> records that shard I's partial is in, so a
-- replica that answers the same job again after a reclaim (or a retried write) XORs nothing
-- twice. The shard's entry is acknowledged in its own consumer group here too, so "partial in"
-- and "acknowledged" never disagree. When the S-th partial arrives the record becomes done
-- exactly as an unsharded worker writes it (status, epoch, page_size, pages, scan_us, worker_us,
-- the result TTL, the SPUBLISH), the running sum is dropped and the stream entry is deleted:
-- every shard's group has acknowledged it by then.
--
-- KEYS[1] the record {P}:q:<id>, KEYS[2] the running sum {P}:acc:<id>, KEYS[3] the staging key
-- {P}:part:<id>:<I>, KEYS[4] the jobs stream.
-- ARGV: [1] shard index I, [2] S, [3] partial bytes, [4] epoch, [5] page size, [6] scan_us,
-- [7] worker_us, [8] result TTL (s), [9] stream entry id, [10] this shard's group,
-- [11] the events channel of the record's partition ({Pp}:done), [12] request id, [13] the digest of the database the partial was
-- answered from ('' when unknown).
-- Returns 'done', 'partial', 'duplicate', 'final' (already done or failed, or failed now because
-- the shards answered from databases with different digests), 'gone' (the record expired) or
-- 'mismatch' (the record was started for another S or epoch: nothing XORed).
local record, sum, staged, jobs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ttl = tonumber(ARGV[8])
local function ack() redis.call('XACK', jobs, ARGV[10], ARGV[9]) end

local status = redis.call('HGET', record, 'status')
if not status then
  ack()
  return 'gone'
end
if status == 'done' or status == 'failed' then
  ack()
  return 'final'
end
if redis.call('HGET', record, 'shards') ~= ARGV[2] or redis.call('HGET', record, 'epoch') ~= ARGV[4] then
  return 'mismatch'
end
local function fail(message)
  redis.call('HSET', record, 'status', 'failed', 'error_code', 'internal', 'error_message', message)
  redis.call('EXPIRE', record, ttl)
  redis.call('DEL', sum)
  redis.call('SPUBLISH', ARGV[11], ARGV[12] .. ' failed')
  redis.call('XDEL', jobs, ARGV[9])
  ack()
  return 'final'
end
-- Every shard must answer from the same database: the first partial's digest is the query's.
if ARGV[13] ~= '' then
  local digest = redis.call('HGET', record, 'digest')
  if digest and digest ~= ARGV[13] then
    return fail('the shards answered from databases with different digests (' .. digest ..
      ', ' .. ARGV[13] .. '): every shard must serve the same database')
  end
  redis.call('HSET', record, 'digest', ARGV[13])
end
local part = 'part:' .. ARGV[1]
if redis.call('HEXISTS', record, part) == 1 then
  ack()
  return 'duplicate'
end
if tonumber(redis.call('HGET', record, 'parts') or '0') > 0 and redis.call('EXISTS', sum) == 0 then
  -- Partials were XORed in but their sum is gone: completing now would answer wrong.
  return fail('the partial answers of the shards were lost; submit the query again')
end
redis.call('SET', staged, ARGV[3])
redis.call('BITOP', 'XOR', sum, sum, staged)
redis.call('DEL', staged)
-- The sum lives as long as the record that waits for it.
redis.call('EXPIRE', sum, math.max(ttl, redis.call('TTL', record)))
redis.call('HSET', record, part, '1')
local parts = redis.call('HINCRBY', record, 'parts', 1)
-- The slowest shard's timings are the job's.
for _, f in ipairs({{'scan_us', 6}, {'worker_us', 7}}) do
  local v = tonumber(redis.call('HGET', record, f[1]) or '0')
  if tonumber(ARGV[f[2]]) > v then redis.call('HSET', record, f[1], ARGV[f[2]]) end
end
ack()
if parts < tonumber(ARGV[2]) then
  return 'partial'
end
redis.call('HSET', record, 'status', 'done', 'page_size', ARGV[5], 'pages', redis.call('GET', sum))
redis.call('EXPIRE', record, ttl)
redis.call('DEL', sum)
redis.call('SPUBLISH', ARGV[11], ARGV[12] .. ' done')
redis.call('XDEL', jobs, ARGV[9])
return 'done'
