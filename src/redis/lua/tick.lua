-- One scan step of a shard, run only by the shard's owner: move due
-- messages to their topic's ready queue and treat in-flight messages whose
-- ack deadline passed as failed deliveries (retry.lua, prepended: ready
-- again, scheduled again by their retry policy, or dead after their last
-- attempt; a series cancelled during its delivery stops). Also forgets
-- tombstones older than their retention, a batch at a time.
-- KEYS[1] delay zset, KEYS[2] message hash, KEYS[3] in-flight zset, KEYS[4] epoch,
-- KEYS[5] finished zset
-- ARGV[1] highest due score (now_ms * 256 + 255), ARGV[2] now_ms,
-- ARGV[3] batch limit, ARGV[4] ready key prefix, ARGV[5] the caller's epoch
-- (its ownership token), ARGV[6] tombstones finished before this time (ms)
-- are dropped, ARGV[7] ready channel, ARGV[8] the caller's node id
-- Fencing: fails with STALE_EPOCH when the stored epoch is above the
-- caller's; a caller's higher epoch raises the stored one, so a new owner
-- fences the old one even after Redis lost the epoch key.
-- When messages became ready, publishes 'NODE|topic,topic,...' on the ready
-- channel so consumers waiting on other nodes wake.
-- Returns { moved: {id, topic, ...},
--           failed: {id, topic, attempts, outcome, due again, ...},
--           next due score or false, next in-flight deadline or false,
--           the time the script ran (Redis's clock, ms) }
local stored = tonumber(redis.call('GET', KEYS[4]) or '0')
local mine = tonumber(ARGV[5])
if stored > mine then
  return redis.error_reply('STALE_EPOCH shard epoch ' .. stored .. ' is above ' .. ARGV[5])
end
if stored < mine then
  redis.call('SET', KEYS[4], ARGV[5])
end
local limit = tonumber(ARGV[3])
-- At most `limit` tombstones go per scan, so one call stays short however
-- many expired at once (a mass cancel); the rest go on the next scans.
local stale = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', '(' .. ARGV[6], 'LIMIT', 0, limit)
if #stale > 0 then
  redis.call('ZREM', KEYS[5], unpack(stale))
end

local topics = {}
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
      topics[topic] = true
    end
  end
  redis.call('ZREM', KEYS[1], unpack(ids))
end

local failed = {}
local now = tonumber(ARGV[2])
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[2], 'LIMIT', 0, limit)
if #expired > 0 then
  redis.call('ZREM', KEYS[3], unpack(expired))
  for _, id in ipairs(expired) do
    local rec = redis.call('HGET', KEYS[2], id)
    if rec then
      local outcome, topic, attempts, due =
        fail_delivery(KEYS[1], KEYS[2], KEYS[5], ARGV[4], id, rec, now, nil)
      failed[#failed + 1] = id
      failed[#failed + 1] = topic
      failed[#failed + 1] = attempts
      failed[#failed + 1] = outcome
      failed[#failed + 1] = string.format('%.0f', due)
      if outcome == 'ready' then
        topics[topic] = true
      end
    end
  end
end

if next(topics) then
  local list = {}
  for t in pairs(topics) do
    list[#list + 1] = t
  end
  redis.call('PUBLISH', ARGV[7], ARGV[8] .. '|' .. table.concat(list, ','))
end

local next_due = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2] or false
local next_inflight = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2] or false
local t = redis.call('TIME')
local ran_at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return { moved, failed, next_due, next_inflight, ran_at }
