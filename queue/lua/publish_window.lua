-- publish_window: register the database and raise the party's epoch window (worker heartbeat).
--
-- Writes the geometry and raises the registered epochs to this worker's: `epoch` (newest) and
-- `min_epoch` (oldest) only ever go up while the geometry stays the same, so a worker that is a
-- moment behind never moves a party's advertised window back. The shard count is written as it
-- is (gateways read it for readiness). Writes the digests of the worker's window. When another
-- database id than this worker's is registered, the same database registered anew (two
-- `--replace-db` workers on one file) is joined under that id; a different one (its digest at
-- this worker's newest epoch differs or is missing) replaced this worker's: then nothing is
-- written. An absent id (Redis lost its data) is written again, with everything else.
--
-- KEYS[1]   {P}:db        the database registration (hash)
-- KEYS[2]   {P}:digests   digest by epoch (hash)
-- ARGV[1]   field name num_pages,   ARGV[2]  value
-- ARGV[3]   field name page_size,   ARGV[4]  value
-- ARGV[5]   field name domain_bits, ARGV[6]  value
-- ARGV[7]   field name epoch,       ARGV[8]  newest epoch
-- ARGV[9]   field name min_epoch,   ARGV[10] oldest epoch
-- ARGV[11]  field name shards,      ARGV[12] the party's shard count (1: unsharded)
-- ARGV[13]  this worker's database id
-- ARGV[14..] epoch, digest pairs of the worker's window, the newest last
-- returns   the database id in force, or '' when another database replaced this worker's
local id = redis.call('HGET', KEYS[1], 'db_id')
local n = #ARGV
if id and id ~= ARGV[13] then
  if n < 15 or redis.call('HGET', KEYS[2], ARGV[n - 1]) ~= ARGV[n] then return '' end
else
  id = ARGV[13]
  redis.call('HSET', KEYS[1], 'db_id', id)
end
for i = 14, n, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
local same = redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2]
  and redis.call('HGET', KEYS[1], ARGV[3]) == ARGV[4]
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[11], ARGV[12])
for i = 7, 9, 2 do
  local current = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '-1')
  if not same or tonumber(ARGV[i + 1]) > current then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return id
