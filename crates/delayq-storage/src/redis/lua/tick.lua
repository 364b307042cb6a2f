-- One scan step of a shard, run only by the shard's owner: move due
-- messages to their topic's ready queue and treat in-flight messages whose
-- ack deadline passed as failed deliveries (retry.lua, prepended: ready
-- again, scheduled again by their retry policy, or dead after their last
-- attempt; a series cancelled during its delivery stops). Also forgets
-- tombstones older than their retention, a batch at a time, once the
-- journal has the end they guard (none waits in the unjournaled hash).
-- "Due" and "passed" are by Redis's clock (clock.lua, prepended).
-- KEYS[1] delay zset, KEYS[2] message hash, KEYS[3] in-flight zset, KEYS[4] epoch,
-- KEYS[5] finished zset, KEYS[6] unjournaled hash, KEYS[7] the shard's
-- applied hash (fence.lua, prepended)
-- A shard fenced after a possible loss of Redis's writes still promotes
-- (nothing is handed out of it), but leaves its in-flight messages alone
-- until the journal's ends are re-applied: an expired copy Redis brought
-- back may be of a message acked since, or requeued from the dead letters
-- (it would fail it again); it looks again in 100 ms.
-- ARGV[1] batch limit, ARGV[2] ready key prefix, ARGV[3] the caller's epoch
-- (its ownership token), ARGV[4] how long a tombstone lasts (ms),
-- ARGV[5] ready channel, ARGV[6] the caller's node id
-- Fencing: fails with 'STALE_EPOCH <stored> ...' when the stored epoch is
-- above the caller's; a caller's higher epoch raises the stored one, so a
-- new owner fences the old one even after Redis lost the epoch key.
-- When messages became ready, publishes 'NODE|topic,topic,...' on the ready
-- channel so consumers waiting on other nodes wake.
-- Returns { moved: {id, topic, attempts (deliveries so far), ...},
--           failed: {id, topic, attempts, outcome, due again, ...},
--           next due score or false, next in-flight deadline or false,
--           the time the script ran (Redis's clock, ms) }
local stored = tonumber(redis.call('GET', KEYS[4]) or '0')
local mine = tonumber(ARGV[3])
if stored > mine then
  return redis.error_reply('STALE_EPOCH ' .. string.format('%.0f', stored) .. ' shard epoch is above ' .. ARGV[3])
end
if stored < mine then
  redis.call('SET', KEYS[4], ARGV[3])
end
local now = now_ms()
local limit = tonumber(ARGV[1])
-- At most `limit` tombstones go per scan, so one call stays short however
-- many expired at once (a mass cancel); the rest go on the next scans.
-- A tombstone whose end the journal has not recorded yet stays, looked at
-- again a retention later.
local stale = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', '(' .. string.format('%.0f', now - tonumber(ARGV[4])), 'LIMIT', 0, limit)
for _, id in ipairs(stale) do
  if redis.call('HEXISTS', KEYS[6], id) == 1 then
    redis.call('ZADD', KEYS[5], now, id)
  else
    redis.call('ZREM', KEYS[5], id)
  end
end

local topics = {}
local moved = {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now * 256 + 255), 'WITHSCORES', 'LIMIT', 0, limit)
if #due > 0 then
  local ids = {}
  for i = 1, #due, 2 do
    ids[#ids + 1] = due[i]
  end
  local recs = bulk_read('HMGET', KEYS[2], ids)
  -- (score, id) pairs per topic's ready queue, added a batch at a time.
  local ready = {}
  for k, id in ipairs(ids) do
    local rec = recs[k]
    if rec then
      local topic = string.match(rec, '^([^|]*)|')
      if group_of(rec) then
        -- A message of an ordered group is ready with its group's turn,
        -- or waits behind it (group.lua); it is due either way.
        if group_due(ARGV[2], KEYS[2], topic, rec, id, due[2 * k]) then
          topics[topic] = true
        end
      else
        local pairs_of = ready[topic]
        if not pairs_of then
          pairs_of = {}
          ready[topic] = pairs_of
        end
        pairs_of[#pairs_of + 1] = due[2 * k]
        pairs_of[#pairs_of + 1] = id
        topics[topic] = true
      end
      moved[#moved + 1] = id
      moved[#moved + 1] = topic
      moved[#moved + 1] = string.match(rec, '^[^|]*|%d+|(%d+)|') or '0'
    end
  end
  for topic, pairs_of in pairs(ready) do
    bulk('ZADD', ARGV[2] .. topic, pairs_of)
  end
  bulk('ZREM', KEYS[1], ids)
end

local failed = {}
local fenced = loss_fenced(KEYS[7])
local expired = {}
if not fenced then
  expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', string.format('%.0f', now), 'LIMIT', 0, limit)
end
if #expired > 0 then
  redis.call('ZREM', KEYS[3], unpack(expired))
  for _, id in ipairs(expired) do
    local rec = redis.call('HGET', KEYS[2], id)
    if rec then
      local outcome, topic, attempts, due =
        fail_delivery(KEYS[1], KEYS[2], KEYS[5], KEYS[6], ARGV[2], id, rec, now, nil)
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
  redis.call('PUBLISH', ARGV[5], ARGV[6] .. '|' .. table.concat(list, ','))
end

local next_due = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2] or false
local next_inflight = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2] or false
if fenced and next_inflight and tonumber(next_inflight) <= now then
  next_inflight = now + 100
end
return { moved, failed, next_due, next_inflight, now }
