-- set_if_exists: set one field of a hash only while the hash exists (worker).
--
-- A late write (a shard's digest stamp after the record expired) must not create a key without
-- a TTL.
--
-- KEYS[1]  the hash ({P}:q:<id>)
-- ARGV[1]  field
-- ARGV[2]  value
-- returns  nil
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
