-- kv_write: write or delete the kv layout field of the registration (worker).
--
-- KEYS[1]  {P}:db   the database registration (hash)
-- ARGV[1]  this worker's database id: nothing is written when another id is registered
-- ARGV[2]  field name of the kv layout
-- ARGV[3]  the layout JSON ('' = delete the field)
-- returns  1 when written, 0 when another database is registered
local id = redis.call('HGET', KEYS[1], 'db_id')
if id and id ~= ARGV[1] then return 0 end
if ARGV[3] == '' then redis.call('HDEL', KEYS[1], ARGV[2]) else redis.call('HSET', KEYS[1], ARGV[2], ARGV[3]) end
return 1
