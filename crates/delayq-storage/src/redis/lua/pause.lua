-- Pause or resume a topic in one shard, in the order of the pauses and
-- resumes: each carries its number in `{P}:pause-seq` (pause_topic.lua),
-- and a shard takes no older word about a topic than the newest it took,
-- so a pause or resume that reaches a shard late (a slow node, a node
-- bringing every shard in line with an earlier reading) undoes nothing
-- newer.
-- KEYS[1] the shard's paused topics (set), KEYS[2] the topic's ready
-- queue, KEYS[3] the shard's numbers of the last word on each topic (hash)
-- ARGV[1] the topic, ARGV[2] '1' to pause, '0' to resume, ARGV[3] the
-- shard's ready channel, ARGV[4] the caller's node id, ARGV[5] the
-- pause's or resume's number
-- A resume that finds messages waiting ready publishes 'NODE|topic' on the
-- ready channel, so long polls on every node look again at once.
-- Returns 1 when the set changed, 0 when it held that state already or
-- the word was older than the shard's.
local seq = tonumber(ARGV[5])
local last = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '-1')
if seq < last then
  return 0
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[5])
if ARGV[2] == '1' then
  return redis.call('SADD', KEYS[1], ARGV[1])
end
local changed = redis.call('SREM', KEYS[1], ARGV[1])
if redis.call('ZCARD', KEYS[2]) > 0 then
  redis.call('PUBLISH', ARGV[3], ARGV[4] .. '|' .. ARGV[1])
end
return changed
