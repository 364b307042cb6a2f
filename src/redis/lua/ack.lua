-- Acknowledge delivered messages of one shard: they are consumed and leave
-- Redis. A recurring message is not changed here: its record is returned,
-- and the caller moves it on to its next occurrence (advance.lua).
-- KEYS[1] in-flight zset, KEYS[2] message hash, KEYS[3] finished zset
-- ARGV[1] ready key prefix, ARGV[2] now_ms, ARGV[3..] ids
-- An acked message leaves a tombstone in the finished zset (see schedule.lua).
-- Returns { outcome, attempts, record, ... }, three per id, record '' unless
-- the message is recurring:
-- 'acked'; 'acked_late' when its ack deadline had passed and it was waiting
-- in the ready queue again; 'recurring' when it is handed out (or waiting
-- again after its deadline) and recurring; 'not_in_flight' when it is
-- scheduled but was never handed out (this occurrence); 'finished'
-- (attempts 0) when this shard does not hold it and it left a tombstone
-- lately (acked or cancelled: an ack answered with an error may have got
-- this far before the journal heard of it); 'absent' (attempts 0) when this
-- shard does not hold it.
local out = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local rec = redis.call('HGET', KEYS[2], id)
  if not rec then
    redis.call('ZREM', KEYS[1], id)
    if redis.call('ZSCORE', KEYS[3], id) then
      out[#out + 1] = 'finished'
    else
      out[#out + 1] = 'absent'
    end
    out[#out + 1] = 0
    out[#out + 1] = ''
  else
    local topic, _, attempts = string.match(rec, '^([^|]*)|(%d+)|(%d+)|')
    attempts = tonumber(attempts)
    local recurring = string.match(rec, '^[^|]*|%d+|%d+|[^|]*|[^|]*,r|') ~= nil
    local state = nil
    if redis.call('ZSCORE', KEYS[1], id) then
      state = 'acked'
    elseif attempts > 0 and redis.call('ZSCORE', ARGV[1] .. topic, id) then
      state = 'acked_late'
    end
    if not state then
      out[#out + 1] = 'not_in_flight'
      out[#out + 1] = attempts
      out[#out + 1] = recurring and rec or ''
    elseif recurring then
      out[#out + 1] = 'recurring'
      out[#out + 1] = attempts
      out[#out + 1] = rec
    else
      if state == 'acked' then
        redis.call('ZREM', KEYS[1], id)
      else
        redis.call('ZREM', ARGV[1] .. topic, id)
      end
      redis.call('HDEL', KEYS[2], id)
      redis.call('ZADD', KEYS[3], ARGV[2], id)
      out[#out + 1] = state
      out[#out + 1] = attempts
      out[#out + 1] = ''
    end
  end
end
return out
