-- register: join the database registered under the prefix, or register this one (worker).
--
-- The check and the claim are one script, so two workers starting at once on different files
-- cannot both win. A database of another shape, or another digest at this worker's newest epoch,
-- is a conflict.
--
-- KEYS[1]  {P}:db        the database registration (hash)
-- KEYS[2]  {P}:digests   digest by epoch (hash)
-- ARGV[1]  num_pages      ARGV[2]  page_size
-- ARGV[3]  this worker's newest epoch, ARGV[4] its digest (hex)
-- ARGV[5]  candidate database id (used when none is registered)
-- ARGV[6]  domain_bits    ARGV[7]  oldest epoch
-- ARGV[8]  kv layout JSON ('' for a page database)
-- returns  {'ok', id} | {'conflict', pages, size, epoch, digest}
local pages = redis.call('HGET', KEYS[1], 'num_pages')
if pages then
  local size = redis.call('HGET', KEYS[1], 'page_size')
  local newest = redis.call('HGET', KEYS[1], 'epoch') or '0'
  if pages ~= ARGV[1] or size ~= ARGV[2] then
    return {'conflict', pages, size or '?', newest, redis.call('HGET', KEYS[2], newest) or ''}
  end
  local d = redis.call('HGET', KEYS[2], ARGV[3])
  if d and d ~= ARGV[4] then
    return {'conflict', pages, size, ARGV[3], d}
  end
  if not d and redis.call('HLEN', KEYS[2]) > 0 and tonumber(ARGV[3]) > tonumber(newest) then
    return {'conflict', pages, size, newest, redis.call('HGET', KEYS[2], newest) or ''}
  end
  local id = redis.call('HGET', KEYS[1], 'db_id')
  if id then return {'ok', id} end
  redis.call('HSET', KEYS[1], 'db_id', ARGV[5])
  return {'ok', ARGV[5]}
end
if ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'kv', ARGV[8]) end
redis.call('HSET', KEYS[1], 'db_id', ARGV[5], 'num_pages', ARGV[1], 'page_size', ARGV[2],
  'domain_bits', ARGV[6], 'epoch', ARGV[3], 'min_epoch', ARGV[7])
return {'ok', ARGV[5]}
