-- party_id: the party's identity, drawn once (gateway).
--
-- The first gateway that asks stores its random candidate; every later one reads it back.
--
-- KEYS[1]  {P}:party
-- ARGV[1]  a fresh random id (used only if none is stored)
-- returns  the stored id
local id = redis.call('GET', KEYS[1])
if id then return id end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
