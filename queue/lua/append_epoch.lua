-- append_epoch: append the next epoch's update (gateway admin route).
--
-- Checks that the epoch is the registered newest + 1, appends the whole update as one stream
-- entry with id `<epoch>-0`, and raises the registered newest epoch: all pages of an epoch or
-- none, and no two gateways can append the same epoch.
--
-- KEYS[1]  {P}:db        the database registration (hash)
-- KEYS[2]  {P}:updates   the updates stream
-- ARGV[1]  the epoch
-- ARGV[2]  the update (bincode update::EpochUpdate)
-- ARGV[3]  field name of the newest epoch in {P}:db
-- ARGV[4]  field name of the update in a stream entry
-- returns  {epoch, previous newest} | {-1, newest} when the epoch is not the next one
local newest = tonumber(redis.call('HGET', KEYS[1], ARGV[3]) or '-1')
local epoch = tonumber(ARGV[1])
if epoch ~= newest + 1 then
  return {-1, newest}
end
redis.call('XADD', KEYS[2], ARGV[1] .. '-0', ARGV[4], ARGV[2])
redis.call('HSET', KEYS[1], ARGV[3], ARGV[1])
return {epoch, newest}
