-- publish_window: register the database and raise the party's epoch window (worker).
--
-- Writes the geometry and raises the registered epochs to this worker's: `epoch` (newest) and
-- `min_epoch` (oldest) only ever go up while the geometry stays the same, so a worker that is a
-- moment behind never moves a party's advertised window back. A new geometry replaces all. The
-- shard count is written as it is: gateways read it for readiness.
--
-- KEYS[1]   {P}:db   the database registration (hash)
-- ARGV[1]   field name num_pages,  ARGV[2]  value
-- ARGV[3]   field name page_size,  ARGV[4]  value
-- ARGV[5]   field name domain_bits, ARGV[6] value
-- ARGV[7]   field name epoch,      ARGV[8]  newest epoch
-- ARGV[9]   field name min_epoch,  ARGV[10] oldest epoch
-- ARGV[11]  field name shards,     ARGV[12] the party's shard count (1: unsharded)
-- returns   1
local same = redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2]
  and redis.call('HGET', KEYS[1], ARGV[3]) == ARGV[4]
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[11], ARGV[12])
for i = 7, 9, 2 do
  local current = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '-1')
  if not same or tonumber(ARGV[i + 1]) > current then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 1
