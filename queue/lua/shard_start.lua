-- shard_start.lua: a shard's worker starts a window of jobs of a sharded party.
--
-- For every job it (1) marks the query running (announced once, as MARK_RUNNING does for an
-- unsharded party), (2) stamps the record with the party's shard count S unless a partial is
-- already in (the first shard to start a job fixes S; a job queued before the party was re-split
-- takes the new S while nothing is combined yet), and (3) pins the epoch every shard answers at:
-- the first shard to start fixes it (HSETNX), so partials of different epochs can never be XORed
-- together, even when an update lands between two shards' passes.
--
-- KEYS[i]: the query record {P}:q:<id> of job i.
-- ARGV[1]: the events channel of the records' partition ({Pp}:done); ARGV[2]: this worker's S;
-- ARGV[2 + 2i - 1]: job i's request id; ARGV[2 + 2i]: the epoch this worker proposes (the job's
-- pinned epoch, or this worker's newest).
-- Returns, per job: the epoch to answer at (>= 0), -1 record gone (expired: nobody waits),
-- -2 already final (done or failed), -3 the record holds partials of another shard count.
local out = {}
for i, key in ipairs(KEYS) do
  local id, proposed = ARGV[1 + 2 * i], ARGV[2 + 2 * i]
  local status = redis.call('HGET', key, 'status')
  if not status then
    out[i] = -1
  elseif status == 'done' or status == 'failed' then
    out[i] = -2
  else
    if status == 'queued' then
      redis.call('HSET', key, 'status', 'running')
      redis.call('SPUBLISH', ARGV[1], id .. ' running')
    end
    local shards = redis.call('HGET', key, 'shards')
    local parts = tonumber(redis.call('HGET', key, 'parts') or '0')
    if shards ~= ARGV[2] and parts == 0 then
      redis.call('HSET', key, 'shards', ARGV[2])
      shards = ARGV[2]
    end
    if shards ~= ARGV[2] then
      out[i] = -3
    else
      redis.call('HSETNX', key, 'epoch', proposed)
      out[i] = tonumber(redis.call('HGET', key, 'epoch'))
    end
  end
end
return out
