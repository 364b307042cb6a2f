-- One scan step of a shard: move due messages to their topic's ready queue
-- and return expired in-flight messages to it.
-- Also forgets tombstones older than their retention.
-- KEYS[1] delay zset, KEYS[2] message hash, KEYS[3] in-flight zset, KEYS[4] epoch,
-- KEYS[5] finished zset
-- ARGV[1] highest due score (now_ms * 256 + 255), ARGV[2] now_ms,
-- ARGV[3] batch limit, ARGV[4] ready key prefix, ARGV[5] the caller's epoch,
-- ARGV[6] tombstones finished before this time (ms) are dropped
-- Fails with STALE_EPOCH when the shard's epoch is above the caller's.
-- Returns { moved: {id, topic, ...}, requeued: {id, topic, attempts, ...},
--           next due score or false, next in-flight deadline or false }
local epoch = tonumber(redis.call('GET', KEYS[4]) or '0')
if epoch > tonumber(ARGV[5]) then
  return redis.error_reply('STALE_EPOCH shard epoch ' .. epoch .. ' is above ' .. ARGV[5])
end
local limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', '(' .. ARGV[6])

local moved = {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, limit)
if #due > 0 then
  local ids = {}
  for i = 1, #due, 2 do
    local id, score = due[i], due[i + 1]
    ids[#ids + 1] = id
    local rec = redis.call('HGET', KEYS[2], id)
    if rec then
      local topic = string.match(rec, '^([^|]*)|')
      redis.call('ZADD', ARGV[4] .. topic, score, id)
      moved[#moved + 1] = id
      moved[#moved + 1] = topic
    end
  end
  redis.call('ZREM', KEYS[1], unpack(ids))
end

local requeued = {}
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[2], 'LIMIT', 0, limit)
if #expired > 0 then
  for _, id in ipairs(expired) do
    local rec = redis.call('HGET', KEYS[2], id)
    if rec then
      local topic, _, attempts, score = string.match(rec, '^([^|]*)|(%d+)|(%d+)|([^|]*)|')
      redis.call('ZADD', ARGV[4] .. topic, score, id)
      requeued[#requeued + 1] = id
      requeued[#requeued + 1] = topic
      requeued[#requeued + 1] = attempts
    end
  end
  redis.call('ZREM', KEYS[3], unpack(expired))
end

local next_due = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2] or false
local next_inflight = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2] or false
return { moved, requeued, next_due, next_inflight }
