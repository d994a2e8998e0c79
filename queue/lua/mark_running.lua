-- mark_running: a window's queries start (worker).
--
-- Moves `queued` records to `running` and announces each; never moves a final status back, and
-- never creates a record that expired (HSET keeps the gateway's TTL on an existing key).
--
-- KEYS[i]    {P}:q:<id i>   the window's query records
-- ARGV[1]    {Pp}:done      the status event channel (sharded: SPUBLISH) of the records' partition
-- ARGV[i+1]  request id i
-- returns    0
for i, key in ipairs(KEYS) do
  if redis.call('HGET', key, 'status') == 'queued' then
    redis.call('HSET', key, 'status', 'running')
    redis.call('SPUBLISH', ARGV[1], ARGV[i + 1] .. ' running')
  end
end
return 0
