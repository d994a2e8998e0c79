-- fail: record a query's failure and announce it (worker).
--
-- Writes the failure unless the query is already done: a slow worker's late failure, or a dead
-- letter racing a success, never hides an answer.
--
-- KEYS[1]  {Pp}:q:<id>   the query record (a string: pirq_queue::record)
-- ARGV[1]  the `failed` record
-- ARGV[2]  milliseconds it lives
-- ARGV[3]  {Pp}:done     the partition's status channel (sharded: SPUBLISH)
-- ARGV[4]  the request id (the event's frame is built here: '<id> <length>\n<record>')
-- returns  1 when written, 0 when the query was already done
if redis.call('GETRANGE', KEYS[1], 0, 4) == 'done ' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SPUBLISH', ARGV[3], ARGV[4] .. ' ' .. #ARGV[1] .. '\n' .. ARGV[1])
return 1
