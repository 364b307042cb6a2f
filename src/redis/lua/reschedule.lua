-- Move a message not handed out yet to a new due time and/or priority.
-- KEYS[1] delay zset, KEYS[2] message hash, KEYS[3] in-flight zset,
-- KEYS[4] unjournaled hash
-- ARGV[1] id, ARGV[2] ready key prefix, ARGV[3] the new due time (ms; ''
-- keeps it), ARGV[4] the new priority ('' keeps it), ARGV[5] the shard's
-- wake channel
-- The message keeps its id, record and attempts; its score (due time, then
-- priority) changes in its record and in the zset that holds it. One
-- waiting ready that becomes due later goes back to the delay zset; one
-- delaying that is due now stays there for the shard's next scan, whose
-- owner is woken when it comes before everything the shard held (as
-- schedule.lua does).
-- Returns { 'moved', due, priority, 'delaying' or 'ready' (where it
-- waits now), the time the script ran (Redis's clock, ms) }, { 'in_flight' }, { 'finished', end }
-- (this shard ended it and the journal has not heard yet: end is
-- 'status|attempts|at'), or { 'absent' } (not in this shard's Redis).
local id = ARGV[1]
local now = now_ms()
local rec = redis.call('HGET', KEYS[2], id)
if not rec then
  local ended = redis.call('HGET', KEYS[4], id)
  if ended then
    return { 'finished', ended }
  end
  return { 'absent' }
end
if redis.call('ZSCORE', KEYS[3], id) then
  return { 'in_flight' }
end
local head, score = string.match(rec, '^([^|]*|%d+|%d+|)([^|]*)|')
if not head then
  return redis.error_reply('BAD_RECORD ' .. id)
end
local old = tonumber(score)
local due = math.floor(old / 256)
local priority = 255 - (old % 256)
if ARGV[3] ~= '' then due = tonumber(ARGV[3]) end
if ARGV[4] ~= '' then priority = tonumber(ARGV[4]) end
local new = due * 256 + (255 - priority)
local text = string.format('%.0f', new)
local ready = ARGV[2] .. string.match(head, '^([^|]*)|')
local delaying = redis.call('ZSCORE', KEYS[1], id)
local waiting = (not delaying) and redis.call('ZSCORE', ready, id)
if not delaying and not waiting then
  return { 'absent' }
end
redis.call('HSET', KEYS[2], id, head .. text .. string.sub(rec, #head + #score + 1))
local where = 'delaying'
if waiting and due <= now then
  redis.call('ZADD', ready, text, id)
  where = 'ready'
else
  if waiting then
    redis.call('ZREM', ready, id)
  end
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
  redis.call('ZADD', KEYS[1], text, id)
  if not first or new < tonumber(first) then
    redis.call('PUBLISH', ARGV[5], string.format('%d', math.floor(new / 256)))
  end
end
return { 'moved', string.format('%d', due), string.format('%d', priority), where, string.format('%d', now) }
