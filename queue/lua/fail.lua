-- fail: record a query's failure (worker).
--
-- Writes the failure unless the query is already done: a slow worker's late failure, or a dead
-- letter racing a success, never hides an answer.
--
-- KEYS[1]  {P}:q:<id>   the query record
-- ARGV[1]  error code
-- ARGV[2]  error message
-- ARGV[3]  worker_us
-- ARGV[4]  index of the offending key ('' = none)
-- ARGV[5]  seconds the result lives
-- returns  1 when written, 0 when the query was already done
if redis.call('HGET', KEYS[1], 'status') == 'done' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'failed', 'error_code', ARGV[1], 'error_message', ARGV[2],
  'worker_us', ARGV[3])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'key_index', ARGV[4]) end
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
