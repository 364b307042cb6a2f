-- Give back delivered messages of one shard: each failed its delivery (see
-- retry.lua, prepended): ready again, scheduled again, or dead.
-- KEYS[1] in-flight zset, KEYS[2] message hash, KEYS[3] delay zset,
-- KEYS[4] finished zset
-- ARGV[1] ready key prefix, ARGV[2] now_ms, ARGV[3] the shard's wake channel,
-- ARGV[4] ready channel, ARGV[5] the caller's node id, then pairs of
-- (id, wait in ms, or '-' for the message's retry policy)
-- Wakes the shard's owner (wake channel) when a message scheduled again is
-- due before everything the shard held, and consumers on every node (ready
-- channel) when messages are ready again.
-- Returns { outcome, attempts, due, topic, ... } four per id, outcome one of
-- 'ready', 'delaying', 'dead', 'not_in_flight' (scheduled or ready, not
-- handed out), 'absent' (this shard does not hold it), then the time the
-- script ran (Redis's clock, ms).
local now = tonumber(ARGV[2])
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
head = head and tonumber(head)
local earliest = nil
local topics = {}
local out = {}
for i = 6, #ARGV, 2 do
  local id = ARGV[i]
  local wait = ARGV[i + 1] ~= '-' and tonumber(ARGV[i + 1]) or nil
  local rec = redis.call('HGET', KEYS[2], id)
  if not rec then
    out[#out + 1] = 'absent'
    out[#out + 1] = 0
    out[#out + 1] = 0
    out[#out + 1] = ''
  elseif redis.call('ZREM', KEYS[1], id) == 1 then
    local outcome, topic, attempts, due =
      fail_delivery(KEYS[3], KEYS[2], KEYS[4], ARGV[1], id, rec, now, wait)
    if outcome == 'ready' then
      topics[topic] = true
    elseif outcome == 'delaying' and (not earliest or due < earliest) then
      earliest = due
    end
    out[#out + 1] = outcome
    out[#out + 1] = attempts
    out[#out + 1] = string.format('%.0f', due)
    out[#out + 1] = topic
  else
    local _, _, attempts = string.match(rec, '^([^|]*)|(%d+)|(%d+)|')
    out[#out + 1] = 'not_in_flight'
    out[#out + 1] = tonumber(attempts)
    out[#out + 1] = 0
    out[#out + 1] = ''
  end
end
if earliest and (not head or earliest * 256 < head) then
  redis.call('PUBLISH', ARGV[3], string.format('%.0f', earliest))
end
local list = {}
for t in pairs(topics) do
  list[#list + 1] = t
end
if #list > 0 then
  redis.call('PUBLISH', ARGV[4], ARGV[5] .. '|' .. table.concat(list, ','))
end
local t = redis.call('TIME')
out[#out + 1] = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return out
