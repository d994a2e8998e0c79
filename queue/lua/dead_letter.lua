-- dead_letter: give up on a job stream entry (worker).
--
-- Copies the entry (all its fields, whatever they are) to the capped dead-letter stream, with
-- the reason. The caller acknowledges and deletes the entry in the same transaction.
--
-- KEYS[1]  {P}:jobs   the job stream
-- KEYS[2]  {P}:dead   the dead-letter stream
-- ARGV[1]  entry id
-- ARGV[2]  the dead-letter stream's cap (MAXLEN ~)
-- ARGV[3]  error code
-- ARGV[4]  error message
-- ARGV[5]  deliveries so far
-- ARGV[6]  consumer that gave up
-- returns  the dead-letter entry's id
local fields = {'entry', ARGV[1], 'code', ARGV[3], 'message', ARGV[4], 'deliveries', ARGV[5],
  'consumer', ARGV[6]}
local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if e[1] then
  for _, v in ipairs(e[1][2]) do table.insert(fields, v) end
end
return redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', unpack(fields))
