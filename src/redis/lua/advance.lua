-- Acked occurrences of recurring messages of one shard: each moves on to
-- its next occurrence (a new record, scheduled in the delay zset), or, after
-- its last one, leaves Redis like any acked message.
-- KEYS[1] in-flight zset, KEYS[2] message hash, KEYS[3] delay zset,
-- KEYS[4] finished zset
-- ARGV[1] ready key prefix, ARGV[2] now_ms, ARGV[3] the shard's wake channel,
-- then quadruples of (id, the record the ack read, the next occurrence's
-- record or '' when the series ends, its score)
-- The record must still be the one the ack read: otherwise (another ack
-- moved it on, its deadline passed and it was scheduled again, its series
-- was cancelled) the outcome is 'changed' and nothing is done: ack again.
-- Wakes the shard's owner when a next occurrence is due before everything
-- the shard held.
-- Returns { outcome, ... } one per id, 'advanced', 'ended' or 'changed',
-- then the time the script ran (Redis's clock, ms).
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
head = head and tonumber(head)
local earliest = nil
local out = {}
for i = 4, #ARGV, 4 do
  local id, seen, nextrec, score = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  local rec = redis.call('HGET', KEYS[2], id)
  local handed = false
  if rec == seen then
    if redis.call('ZREM', KEYS[1], id) == 1 then
      handed = true
    else
      local topic = string.match(rec, '^([^|]*)|')
      handed = redis.call('ZREM', ARGV[1] .. topic, id) == 1
    end
  end
  if not handed then
    out[#out + 1] = 'changed'
  elseif nextrec == '' then
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZADD', KEYS[4], ARGV[2], id)
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
  redis.call('PUBLISH', ARGV[3], string.format('%.0f', math.floor(earliest / 256)))
end
local t = redis.call('TIME')
out[#out + 1] = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return out
