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
-- Kept lean, as it runs for every query (issue 35): the gateway builds each Idempotency-Key
-- record's value, declares only the keys a query uses, and a queued query is answered by a 0,
-- so that a query costs the script no string built and no table but its arguments.
--
-- KEYS[1]        {Pp}:jobs            the partition's job stream
-- KEYS[2..]      per query i, in order: {Pp}:idem:<key i> when it has an Idempotency-Key, then
--                {Pp}:q:<id i> when it has a `queued` record to write (every key in the
--                partition's slot)
-- ARGV[1]        backlog bound: refuse when the stream holds this many entries (0 = no bound)
-- ARGV[2]        seconds a `queued` record lives
-- ARGV[3]        seconds an Idempotency-Key record lives
-- ARGV[4i]       request id of query i (i = 1..n, n = (#ARGV - 3) / 4)
-- ARGV[4i+1]     the job (bincode wire::Job)
-- ARGV[4i+2]     the `queued` record to write ('' = none: the gateway holds the request)
-- ARGV[4i+3]     the Idempotency-Key record, '<fingerprint> <id i>' ('' = no Idempotency-Key)
-- returns        per query: 0 (queued under its id) | -<backlog> (the backlog is full: nothing
--                queued) | '<fingerprint> <id>' (the key is known: nothing queued)
local max = tonumber(ARGV[1])
local len = 0
if max > 0 then len = redis.call('XLEN', KEYS[1]) end
local call = redis.call
local out = {}
local k = 1
for i = 1, (#ARGV - 3) / 4 do
  local a = 4 * i
  local record, idem = ARGV[a + 2], ARGV[a + 3]
  local full = max > 0 and len >= max
  local known = false
  if idem ~= '' then
    k = k + 1
    if full then
      known = call('GET', KEYS[k])
    else
      -- Claims the key and reads what it held in one command (SET … NX GET, Redis >= 7.0).
      known = call('SET', KEYS[k], idem, 'NX', 'GET', 'EX', ARGV[3])
    end
  end
  if record ~= '' then k = k + 1 end
  if known then
    out[i] = known
  elseif full then
    out[i] = -len
  else
    if record ~= '' then call('SET', KEYS[k], record, 'EX', ARGV[2]) end
    call('XADD', KEYS[1], '*', 'id', ARGV[a], 'job', ARGV[a + 1])
    len = len + 1
    out[i] = 0
  end
end
return out
