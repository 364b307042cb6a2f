-- Cancel messages of one shard that have not been handed to a consumer.
-- KEYS[1] delay zset, KEYS[2] message hash, KEYS[3] in-flight zset,
-- KEYS[4] finished zset, KEYS[5] unjournaled hash
-- ARGV[1] ready key prefix, ARGV[2] '1' to leave a tombstone also when
-- this shard does not hold a message, then the ids
-- Unless a message is in flight, it leaves a tombstone in the finished
-- zset: a push or restore about to schedule it will not (see schedule.lua).
-- The caller asks for one on an absent message only once the journal said
-- it is live (pushed, not yet in Redis), so an unknown id changes nothing.
-- A recurring message in flight has its series stopped instead: its record
-- is marked (',x', see record.rs) so that delivery is its last, however it
-- ends (ack, nack, deadline).
-- A cancelled message's Deleted waits in the unjournaled hash until the
-- journal has it (clock.lua, prepended).
-- The ids are cancelled one after the other, as so many calls would: an id
-- given twice finds what its first mention did.
-- Returns { outcome, attempts, end, ... }, three per id: 'deleted',
-- 'stopped' (a series, in flight), 'in_flight' (left alone), 'finished'
-- (this shard ended it and the journal has not heard yet: end is
-- 'status|attempts|at'), or 'absent' (not in this shard; attempts 0); end
-- is '' unless 'finished'.
local now = now_ms()
local prefix, tombstone = ARGV[1], ARGV[2] == '1'
local out = {}
local function put(outcome, attempts, ended)
  out[#out + 1] = outcome
  out[#out + 1] = attempts
  out[#out + 1] = ended or ''
end
local function cancel(id)
  local rec = redis.call('HGET', KEYS[2], id)
  if not rec then
    local ended = redis.call('HGET', KEYS[5], id)
    if ended then
      -- Ended in Redis (acked, cancelled, dead), not yet journaled.
      return put('finished', 0, ended)
    end
    if tombstone then
      redis.call('ZADD', KEYS[4], now, id)
      unjournaled(KEYS[5], id, 5, 0, now)
    end
    return put('absent', 0)
  end
  local topic, _, attempts = string.match(rec, '^([^|]*)|(%d+)|(%d+)|')
  attempts = tonumber(attempts)
  if redis.call('ZSCORE', KEYS[3], id) then
    local marked, n = string.gsub(rec, '^([^|]*|%d+|%d+|[^|]*|[^|]*),[rx]|', '%1,x|', 1)
    if n == 1 then
      redis.call('HSET', KEYS[2], id, marked)
      return put('stopped', attempts)
    end
    return put('in_flight', attempts)
  end
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', prefix .. topic, id)
  group_leave(prefix, KEYS[2], rec, id)
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZADD', KEYS[4], now, id)
  unjournaled(KEYS[5], id, 5, attempts, now)
  put('deleted', attempts)
end
for i = 3, #ARGV do
  cancel(ARGV[i])
end
return out
