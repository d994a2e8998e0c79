-- shard_start.lua: a shard's worker starts a window of jobs of a sharded party.
--
-- For every job it (1) announces the query running once, the first time any shard starts it,
-- when its client follows events, (2) stamps the combine state with the party's shard count S
-- unless a partial is already in (the first shard to start a job fixes S; a job queued before
-- the party was re-split takes the new S while nothing is combined yet), and (3) pins the epoch
-- every shard answers at: the first shard to start fixes it (HSETNX), so partials of different
-- epochs can never be XORed together, even when an update lands between two shards' passes.
-- The combine state {Pp}:sh:<id> is a hash that lives as long as a pending query may.
--
-- KEYS[2i-1]: the query record {Pp}:q:<id> of job i; KEYS[2i]: its combine state {Pp}:sh:<id>.
-- ARGV[1]: the events channel of the records' partition ({Pp}:done); ARGV[2]: this worker's S;
-- ARGV[3]: seconds the combine state lives;
-- ARGV[1 + 3i]: job i's request id; ARGV[2 + 3i]: the epoch this worker proposes (the job's
-- pinned epoch, or this worker's newest); ARGV[3 + 3i]: '1' when its client follows events.
-- Returns, per job: the epoch to answer at (>= 0), -2 already final (done or failed), -3 the
-- state holds partials of another shard count.
-- One HMGET reads the state and, for the first shard, one HSET writes it (the script is atomic:
-- read-then-write here is what HSETNX was, in fewer commands; every command inside counts
-- towards a query's Redis cost, docs/redis.md "Commands a query costs").
local out = {}
for i = 1, #KEYS / 2 do
  local record, state = KEYS[2 * i - 1], KEYS[2 * i]
  local id, proposed, follows = ARGV[1 + 3 * i], ARGV[2 + 3 * i], ARGV[3 + 3 * i]
  local head = redis.call('GETRANGE', record, 0, 4)
  if head == 'done ' or head == 'faile' then
    out[i] = -2
  else
    local st = redis.call('HMGET', state, 'started', 'shards', 'parts', 'epoch')
    local started, shards, epoch = st[1], st[2], st[4]
    local parts = tonumber(st[3] or '0')
    local set = {}
    if not started then
      set[#set + 1] = 'started'
      set[#set + 1] = '1'
    end
    if shards ~= ARGV[2] and parts == 0 then
      shards = ARGV[2]
      set[#set + 1] = 'shards'
      set[#set + 1] = shards
    end
    if shards ~= ARGV[2] then
      out[i] = -3
    else
      if not epoch then
        epoch = proposed
        set[#set + 1] = 'epoch'
        set[#set + 1] = epoch
      end
      out[i] = tonumber(epoch)
    end
    if #set > 0 then
      redis.call('HSET', state, unpack(set))
    end
    if not started then
      redis.call('EXPIRE', state, ARGV[3])
      if follows == '1' then
        redis.call('SPUBLISH', ARGV[1], id .. ' 7\nrunning')
      end
    end
  end
end
return out
