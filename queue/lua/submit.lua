-- submit: queue a batch of queries of one partition (gateway).
--
-- A gateway collects the submits that arrive while its previous batch to the partition is on
-- the wire and sends them as one run of this script: the script's own cost and the backlog
-- check are paid once a batch, and each query costs its XADD (and, with an Idempotency-Key,
-- one SET; with a polling client, the SET of its `queued` record). For each query, in order: a
-- known Idempotency-Key queues nothing (a replay is answered even when the backlog is full);
-- then the backlog bound; then the record (only for a query whose client polls: a client whose
-- request the gateway holds gets its answer from the completion event) and the job entry.
--
-- KEYS[1]        {Pp}:jobs            the partition's job stream
-- KEYS[2i]       {Pp}:q:<id i>        query i's record
-- KEYS[2i+1]     {Pp}:idem:<key i>    query i's Idempotency-Key record (declared even when
--                                     unused: every key in the partition's slot)
-- ARGV[1]        backlog bound: refuse when the stream holds this many entries (0 = no bound)
-- ARGV[2]        seconds a `queued` record lives
-- ARGV[3]        seconds an Idempotency-Key record lives
-- ARGV[4i]       request id of query i (i = 1..n, n = (#ARGV - 3) / 4)
-- ARGV[4i+1]     the job (bincode wire::Job)
-- ARGV[4i+2]     the `queued` record to write ('' = none: the gateway holds the request)
-- ARGV[4i+3]     request fingerprint ('' = no Idempotency-Key)
-- returns        per query: {'queued', id} | {'full', backlog} | {'known', '<fingerprint> <id>'}
local max = tonumber(ARGV[1])
local len = 0
if max > 0 then len = redis.call('XLEN', KEYS[1]) end
local out = {}
local n = (#ARGV - 3) / 4
for i = 1, n do
  local id, job, record, fp = ARGV[4 * i], ARGV[4 * i + 1], ARGV[4 * i + 2], ARGV[4 * i + 3]
  local idem = KEYS[2 * i + 1]
  local known = false
  local full = max > 0 and len >= max
  if fp ~= '' then
    if full then
      known = redis.call('GET', idem)
    else
      -- Claims the key and reads what it held in one command (SET … NX GET, Redis >= 7.0).
      known = redis.call('SET', idem, fp .. ' ' .. id, 'NX', 'GET', 'EX', ARGV[3])
    end
  end
  if known then
    out[i] = {'known', known}
  elseif full then
    out[i] = {'full', tostring(len)}
  else
    if record ~= '' then
      redis.call('SET', KEYS[2 * i], record, 'EX', ARGV[2])
    end
    redis.call('XADD', KEYS[1], '*', 'id', id, 'job', job)
    len = len + 1
    out[i] = {'queued', id}
  end
end
return out
