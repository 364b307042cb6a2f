-- The cluster-wide word on a paused topic, numbered: the hash of paused
-- topics changes and the pause or resume takes the next number, in one
-- step, so the numbers order the words as the hash took them (pause.lua
-- applies them to the shards in that order).
-- KEYS[1] paused topics (hash: topic -> when paused, ms), KEYS[2] the
-- number of the last word (string)
-- ARGV[1] 'pause', 'resume' or 'read'; ARGV[2] the topic, ARGV[3] now (ms)
-- Returns, for 'pause': { number, when the topic was paused, 1 if this
-- paused it }; for 'resume': { number, 1 if it was paused }; for 'read':
-- { the last number, topic, when, topic, when, ... }.
if ARGV[1] == 'read' then
  local out = { redis.call('GET', KEYS[2]) or '0' }
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all do
    out[#out + 1] = all[i]
  end
  return out
end
local seq = redis.call('INCR', KEYS[2])
if ARGV[1] == 'pause' then
  local changed = redis.call('HSETNX', KEYS[1], ARGV[2], ARGV[3])
  return { seq, redis.call('HGET', KEYS[1], ARGV[2]), changed }
end
return { seq, redis.call('HDEL', KEYS[1], ARGV[2]) }
