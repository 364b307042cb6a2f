-- Remove messages the journal says are finished (Consumed, Deleted or Dead)
-- but this shard still holds: Redis lost an ack's or a cancel's write, or a
-- copy came back. Wherever each sits (delay zset, ready queue, in-flight
-- zset), it leaves, its record goes, and it leaves a tombstone so a restore
-- racing with this cannot bring it back (see schedule.lua).
-- KEYS[1] delay zset, KEYS[2] message hash, KEYS[3] in-flight zset,
-- KEYS[4] finished zset
-- ARGV[1] ready key prefix, ARGV[2..] ids (now: Redis's clock, clock.lua
-- prepended)
-- Returns one flag per id: 1 removed, 0 this shard did not hold it.
local now = now_ms()
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local rec = redis.call('HGET', KEYS[2], id)
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[3], id)
  if rec then
    local topic = string.match(rec, '^([^|]*)|')
    if topic then
      redis.call('ZREM', ARGV[1] .. topic, id)
      group_leave(ARGV[1], KEYS[2], rec, id)
    end
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZADD', KEYS[4], now, id)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
