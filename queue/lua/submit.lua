-- submit: queue one query (gateway).
--
-- Records the query as `queued` and appends its job to the stream in one step: a job is never on
-- the stream without its record, nor the reverse. The idempotency key is checked first (a replay
-- is answered even when the backlog is full), then the backlog bound.
--
-- KEYS[1]  {P}:q:<id>       the query record (hash)
-- KEYS[2]  {P}:jobs         the job stream
-- KEYS[3]  {P}:idem:<key>   the Idempotency-Key record (declared even when unused: one slot)
-- ARGV[1]  request id
-- ARGV[2]  number of keys in the query
-- ARGV[3]  accepted_ms (Unix ms)
-- ARGV[4]  seconds the queued record lives
-- ARGV[5]  the job (bincode wire::Job)
-- ARGV[6]  backlog bound: refuse when the stream holds this many entries (0 = no bound)
-- ARGV[7]  request fingerprint ('' = no Idempotency-Key)
-- ARGV[8]  seconds the idempotency record lives
-- ARGV[9]  the Idempotency-Key ('' = none), kept in the record's `idem` field
-- returns  {'queued', id} | {'full', backlog} | {'known', '<fingerprint> <id>'}
if ARGV[7] ~= '' then
  local known = redis.call('GET', KEYS[3])
  if known then return {'known', known} end
end
local max = tonumber(ARGV[6])
if max > 0 then
  local len = redis.call('XLEN', KEYS[2])
  if len >= max then return {'full', tostring(len)} end
end
if ARGV[9] ~= '' then
  -- The gateway that hands the result over shortens the idempotency record with it.
  redis.call('HSET', KEYS[1], 'status', 'queued', 'keys', ARGV[2], 'accepted_ms', ARGV[3],
    'idem', ARGV[9])
else
  redis.call('HSET', KEYS[1], 'status', 'queued', 'keys', ARGV[2], 'accepted_ms', ARGV[3])
end
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('XADD', KEYS[2], '*', 'id', ARGV[1], 'job', ARGV[5])
if ARGV[7] ~= '' then
  redis.call('SET', KEYS[3], ARGV[7] .. ' ' .. ARGV[1], 'EX', ARGV[8])
end
return {'queued', ARGV[1]}
