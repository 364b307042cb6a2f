-- Move a message not handed out yet to a new due time and/or priority.
-- KEYS[1] delay zset, KEYS[2] message hash, KEYS[3] in-flight zset,
-- KEYS[4] unjournaled hash, KEYS[5] moved hash, KEYS[6] its index (see
-- moved.lua, prepended), KEYS[7] finished zset (tombstones)
-- ARGV[1] id, ARGV[2] ready key prefix, ARGV[3] the new due time (ms; ''
-- keeps it), ARGV[4] the new priority ('' keeps it), ARGV[5] the shard's
-- wake channel, ARGV[6] the message's whole new score as the journal has it
-- (due time and priority, for one Redis does not hold), ARGV[7] and
-- ARGV[8] ('' for neither): a recurring series moved as a whole, the
-- record as the caller read it and the record to put in its place (the
-- occurrence's own due time moved: later occurrences follow from it),
-- ARGV[9] '1': the due time moves only later than the one the zset holds
-- (a push's onDuplicate "extend"; a retry's wait the journal has not heard
-- of yet is never cut short), '' or absent: to ARGV[3] as given,
-- ARGV[10] ('' for none): the whole record a message Redis does not hold
-- is to have when it comes (a push's onDuplicate "replace": its body
-- changed), left with its move as 'score|R<record>|at', so whatever
-- schedules it from an older reading of the journal schedules this one
-- The message keeps its id, record and attempts; its score (due time, then
-- priority) changes in its record and in the zset that holds it (whose
-- score is the truth: a failed delivery's retry time is there alone). One
-- waiting ready that becomes due later goes back to the delay zset; one
-- delaying that is due now stays there for the shard's next scan, whose
-- owner is woken when it comes before everything the shard held (as
-- schedule.lua does).
-- A message Redis does not hold and that did not end here lately (no
-- tombstone) may be on its way (a push, a restore, the horizon loader,
-- each scheduling what it read from the journal before the move): its new
-- score is left in the moved hash as 'score|now', which schedule.lua takes
-- instead of the one it was given (see there). One with a tombstone ended
-- (acked, cancelled, dead) and no schedule brings it back: nothing is left
-- for it.
-- Returns { 'moved', due, priority, 'delaying' or 'ready' (where it
-- waits now), the time the script ran (Redis's clock, ms) },
-- { 'changed' } (the record is not the one the caller read: read it again),
-- { 'in_flight' }, { 'finished', end } (this shard ended it lately: end is
-- 'status|attempts|at' while the journal has not heard of it, '' once it
-- has), or { 'absent' } (not in this shard's Redis).
local id = ARGV[1]
local now = now_ms()
local function new_score(old)
  local due = math.floor(old / 256)
  local priority = 255 - (old % 256)
  if ARGV[3] ~= '' then
    local asked = tonumber(ARGV[3])
    if (ARGV[9] or '') ~= '1' or asked > due then due = asked end
  end
  if ARGV[4] ~= '' then priority = tonumber(ARGV[4]) end
  return due * 256 + (255 - priority), due, priority
end
if redis.call('ZSCORE', KEYS[3], id) then
  return { 'in_flight' }
end
local rec = redis.call('HGET', KEYS[2], id)
if not rec then
  local ended = redis.call('HGET', KEYS[4], id)
  if ended then
    return { 'finished', ended }
  end
  if redis.call('ZSCORE', KEYS[7], id) then
    return { 'finished', '' }
  end
  drop_old_moves(KEYS[5], KEYS[6], now)
  local with = ''
  if (ARGV[10] or '') ~= '' then
    with = '|R' .. ARGV[10]
  end
  redis.call('HSET', KEYS[5], id, ARGV[6] .. with .. '|' .. string.format('%d', now))
  redis.call('ZADD', KEYS[6], now, id)
  redis.call('PEXPIRE', KEYS[5], MOVE_MS)
  redis.call('PEXPIRE', KEYS[6], MOVE_MS)
  return { 'absent' }
end
if (ARGV[7] or '') ~= '' then
  if rec ~= ARGV[7] then
    return { 'changed' }
  end
  rec = ARGV[8]
end
local head, score = string.match(rec, '^([^|]*|%d+|%d+|)([^|]*)|')
if not head then
  return redis.error_reply('BAD_RECORD ' .. id)
end
local ready = ARGV[2] .. string.match(head, '^([^|]*)|')
local delaying = redis.call('ZSCORE', KEYS[1], id)
local waiting = (not delaying) and redis.call('ZSCORE', ready, id)
-- Due, behind its group's turn (group.lua): it stays there while due.
local held = (not delaying and not waiting) and group_held_score(ARGV[2], rec, id)
if not delaying and not waiting and not held then
  -- Held, yet in no zset (Redis lost the key that placed it): the record
  -- changes all the same, for the reconciler that puts it back.
  if (ARGV[7] or '') ~= '' then
    redis.call('HSET', KEYS[2], id, rec)
  end
  return { 'absent' }
end
local old = tonumber(delaying or waiting or held)
local new, due, priority = new_score(old)
local text = string.format('%.0f', new)
redis.call('HSET', KEYS[2], id, head .. text .. string.sub(rec, #head + #score + 1))
local where = 'delaying'
if waiting and due <= now then
  redis.call('ZADD', ready, text, id)
  where = 'ready'
elseif held and due <= now then
  group_leave(ARGV[2], KEYS[2], rec, id)
  group_due(ARGV[2], KEYS[2], string.match(head, '^([^|]*)|'), rec, id, text)
  where = 'ready'
else
  if waiting then
    redis.call('ZREM', ready, id)
  end
  -- No longer due: its place behind its group's turn is given up; moved
  -- to later than it was, so is the turn when it held it (one waiting for
  -- its retry keeps it through a move earlier or a new priority).
  if held or due > math.floor(old / 256) then
    group_leave(ARGV[2], KEYS[2], rec, id)
  end
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
  redis.call('ZADD', KEYS[1], text, id)
  if not first or new < tonumber(first) then
    redis.call('PUBLISH', ARGV[5], string.format('%d', math.floor(new / 256)))
  end
end
return { 'moved', string.format('%d', due), string.format('%d', priority), where, string.format('%d', now) }
