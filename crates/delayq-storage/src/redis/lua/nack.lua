-- Give back delivered messages of one shard: each failed its delivery (see
-- retry.lua, prepended): ready again, scheduled again, or dead.
-- KEYS[1] in-flight zset, KEYS[2] message hash, KEYS[3] delay zset,
-- KEYS[4] finished zset, KEYS[5] unjournaled hash
-- ARGV[1] ready key prefix, ARGV[2] the shard's wake channel,
-- ARGV[3] ready channel, ARGV[4] the caller's node id, then triples of
-- (id, wait in ms or '-' for the message's retry policy, receipt or '')
-- A receipt (see ack.lua) must name the delivery in hand; one naming an
-- earlier delivery is 'stale' and changes nothing. Without one the nack
-- applies to the delivery in hand, whoever holds it.
-- Wakes the shard's owner (wake channel) when a message scheduled again is
-- due before everything the shard held, and consumers on every node (ready
-- channel) when messages are ready again.
-- Returns { outcome, attempts, due, topic, ... } four per id, outcome one of
-- 'ready', 'delaying', 'dead', 'not_in_flight' (scheduled or ready, not
-- handed out; topic: 'delaying' or 'ready', where it waits), 'stale' (topic: 'in_flight', 'ready' or 'delaying', where it
-- is now), 'absent' (this shard does not hold it), then the time the
-- script ran (Redis's clock, ms).
local now = now_ms()
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
head = head and tonumber(head)
local earliest = nil
local topics = {}
local out = {}
for i = 5, #ARGV, 3 do
  local id = ARGV[i]
  local wait = ARGV[i + 1] ~= '-' and tonumber(ARGV[i + 1]) or nil
  local receipt = ARGV[i + 2]
  local rec = redis.call('HGET', KEYS[2], id)
  local stale = nil
  if rec and receipt ~= '' then
    local _, _, attempts = string.match(rec, '^([^|]*)|(%d+)|(%d+)|')
    local ra, rd = string.match(receipt, '^(%d+)-(%d+)$')
    local deadline = redis.call('ZSCORE', KEYS[1], id)
    if deadline then
      if tonumber(ra) ~= tonumber(attempts) or tonumber(rd) ~= tonumber(deadline) then
        stale = 'in_flight'
      end
    elseif tonumber(ra) ~= tonumber(attempts) then
      stale = redis.call('ZSCORE', KEYS[3], id) and 'delaying' or 'ready'
    end
  end
  if not rec then
    out[#out + 1] = 'absent'
    out[#out + 1] = 0
    out[#out + 1] = 0
    out[#out + 1] = ''
  elseif stale then
    local _, _, attempts = string.match(rec, '^([^|]*)|(%d+)|(%d+)|')
    out[#out + 1] = 'stale'
    out[#out + 1] = tonumber(attempts)
    out[#out + 1] = 0
    out[#out + 1] = stale
  elseif redis.call('ZREM', KEYS[1], id) == 1 then
    local outcome, topic, attempts, due =
      fail_delivery(KEYS[3], KEYS[2], KEYS[4], KEYS[5], ARGV[1], id, rec, now, wait)
    redis.call('ZREM', busy_key(ARGV[1], topic), id)
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
    out[#out + 1] = redis.call('ZSCORE', KEYS[3], id) and 'delaying' or 'ready'
  end
end
if earliest and (not head or earliest * 256 < head) then
  redis.call('PUBLISH', ARGV[2], string.format('%.0f', earliest))
end
local list = {}
for t in pairs(topics) do
  list[#list + 1] = t
end
if #list > 0 then
  redis.call('PUBLISH', ARGV[3], ARGV[4] .. '|' .. table.concat(list, ','))
end
out[#out + 1] = now
return out
