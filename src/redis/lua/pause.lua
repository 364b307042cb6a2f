-- Pause or resume a topic in one shard.
-- KEYS[1] the shard's paused topics (set), KEYS[2] the topic's ready queue
-- ARGV[1] the topic, ARGV[2] '1' to pause, '0' to resume, ARGV[3] the
-- shard's ready channel, ARGV[4] the caller's node id
-- A resume that finds messages waiting ready publishes 'NODE|topic' on the
-- ready channel, so long polls on every node look again at once.
-- Returns 1 when the set changed, 0 when it held that state already.
if ARGV[2] == '1' then
  return redis.call('SADD', KEYS[1], ARGV[1])
end
local changed = redis.call('SREM', KEYS[1], ARGV[1])
if redis.call('ZCARD', KEYS[2]) > 0 then
  redis.call('PUBLISH', ARGV[3], ARGV[4] .. '|' .. ARGV[1])
end
return changed
