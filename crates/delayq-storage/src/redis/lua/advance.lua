-- Acked occurrences of recurring messages of one shard: each moves on to
-- its next occurrence (a new record, scheduled in the delay zset), or, after
-- its last one, leaves Redis like any acked message.
-- KEYS[1] in-flight zset, KEYS[2] message hash, KEYS[3] delay zset,
-- KEYS[4] finished zset, KEYS[5] unjournaled hash
-- ARGV[1] ready key prefix, ARGV[2] the shard's wake channel,
-- then quadruples of (id, the record the ack read, the next occurrence's
-- record or '' when the series ends, its score)
-- The record must still be the one the ack read, handed out or waiting
-- again after its deadline (ready, or scheduled by its retry policy):
-- otherwise (another ack
-- moved it on, its deadline passed and it was scheduled again, its series
-- was cancelled) the outcome is 'changed' and nothing is done: ack again.
-- Wakes the shard's owner when a next occurrence is due before everything
-- the shard held.
-- Returns { outcome, ... } one per id, 'advanced', 'ended' or 'changed',
-- then the time the script ran (Redis's clock, ms).
local now = now_ms()
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
head = head and tonumber(head)
local earliest = nil
local out = {}
for i = 3, #ARGV, 4 do
  local id, seen, nextrec, score = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  local rec = redis.call('HGET', KEYS[2], id)
  local handed = false
  if rec == seen then
    if redis.call('ZREM', KEYS[1], id) == 1 then
      handed = true
      redis.call('ZREM', busy_key(ARGV[1], string.match(rec, '^([^|]*)|')), id)
    else
      local topic, _, attempts = string.match(rec, '^([^|]*)|(%d+)|(%d+)|')
      handed = redis.call('ZREM', ARGV[1] .. topic, id) == 1
        or (tonumber(attempts) > 0 and redis.call('ZREM', KEYS[3], id) == 1)
    end
  end
  if handed then
    -- Ended or moved on to a later occurrence: its group's turn passes.
    group_leave(ARGV[1], KEYS[2], rec, id)
  end
  if not handed then
    out[#out + 1] = 'changed'
  elseif nextrec == '' then
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZADD', KEYS[4], now, id)
    local _, _, attempts = string.match(rec, '^([^|]*)|(%d+)|(%d+)|')
    unjournaled(KEYS[5], id, 4, attempts, now)
    out[#out + 1] = 'ended'
  else
    redis.call('HSET', KEYS[2], id, nextrec)
    redis.call('ZADD', KEYS[3], string.format('%.0f', score), id)
    if not earliest or score < earliest then
      earliest = score
    end
    out[#out + 1] = 'advanced'
  end
end
if earliest and (not head or earliest < head) then
  redis.call('PUBLISH', ARGV[2], string.format('%.0f', math.floor(earliest / 256)))
end
out[#out + 1] = now
return out
