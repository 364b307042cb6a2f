-- Acknowledge delivered messages of one shard: they are consumed and leave
-- Redis. A recurring message is not changed here: its record is returned,
-- and the caller moves it on to its next occurrence (advance.lua).
-- KEYS[1] in-flight zset, KEYS[2] message hash, KEYS[3] finished zset,
-- KEYS[4] unjournaled hash, KEYS[5] delay zset
-- ARGV[1] ready key prefix, then pairs of (id, receipt or '')
-- A receipt ('ATTEMPTS-DEADLINE', handed out with the delivery) names the
-- delivery acked: while the message is in flight it must be the delivery
-- in hand; once that delivery's deadline passed, the ack is still taken as
-- long as no later delivery was handed out (the message waits, ready or
-- scheduled again, with the same attempts). Anything else is 'stale' and
-- changes nothing. Without a receipt the ack applies to the current
-- delivery: in flight, or ended and not handed out again.
-- An acked message leaves a tombstone in the finished zset (see schedule.lua)
-- and its Consumed in the unjournaled hash until the journal has it
-- (clock.lua, prepended).
-- Returns { outcome, attempts, record, state, ... }, four per id, record ''
-- unless the message is recurring, state '' unless stale:
-- 'acked'; 'acked_stopped' when its series was cancelled while it was
-- out (it ends Deleted); 'acked_late' when its ack deadline had passed and it was waiting
-- again (ready, or scheduled by its retry policy); 'recurring' when it is
-- handed out (or waiting again after its deadline) and recurring;
-- 'not_in_flight' when it is scheduled but was never handed out (this
-- occurrence; state: 'delaying' or 'ready', where it waits); 'stale' when the receipt names another delivery (state:
-- 'in_flight', 'ready' or 'delaying', where it is now); 'finished'
-- (attempts 0) when this shard does not hold it and it left a tombstone
-- lately (acked or cancelled: an ack answered with an error may have got
-- this far before the journal heard of it), its state then the end that
-- waits for the journal ('status|attempts|at', '' when the journal has it); 'absent' (attempts 0) when this
-- shard does not hold it. Then the time the script ran (Redis's clock, ms).
local now = now_ms()
local out = {}
local function put(outcome, attempts, record, state)
  out[#out + 1] = outcome
  out[#out + 1] = attempts
  out[#out + 1] = record
  out[#out + 1] = state
end
local ids, receipts = {}, {}
for i = 2, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
  receipts[#receipts + 1] = ARGV[i + 1]
end
-- The records and deadlines are read for all ids at once, and the acked
-- messages leave in a few calls at the end (bulk.lua, prepended). An id
-- given twice must see what its first mention did, as two calls would:
-- such a call reads and writes id by id.
local grouped = groups_here(ARGV[1])
local one_by_one, seen = false, {}
for _, id in ipairs(ids) do
  if seen[id] then
    one_by_one = true
    break
  end
  seen[id] = true
end
local recs, deadlines = {}, {}
if not one_by_one then
  recs = bulk_read('HMGET', KEYS[2], ids)
  deadlines = bulk_read('ZMSCORE', KEYS[1], ids)
end
-- What the acked messages leave: the in-flight zset, a ready queue or the
-- delay zset (acked late), their records; what they gain: a tombstone and
-- their end for the journal. Written once every id is read, so a record
-- that cannot be read stops the call having changed nothing.
local left_flight, left_queues, records_gone, tombstones, ends = {}, {}, {}, {}, {}
-- Ids acked in flight, by topic: they leave the topic's hand-outs (a
-- topic with a concurrency cap; limit.lua).
local left_busy = {}
-- Adds `id` to the list of `key` in `groups`.
local function group_add(groups, key, id)
  local list = groups[key]
  if not list then
    list = {}
    groups[key] = list
  end
  list[#list + 1] = id
end
local function write_ends()
  bulk('ZREM', KEYS[1], left_flight)
  for topic, ids_left in pairs(left_busy) do
    bulk('ZREM', busy_key(ARGV[1], topic), ids_left)
  end
  left_busy = {}
  for queue, ids_left in pairs(left_queues) do
    bulk('ZREM', queue, ids_left)
  end
  bulk('HDEL', KEYS[2], records_gone)
  bulk('ZADD', KEYS[3], tombstones)
  bulk('HSET', KEYS[4], ends)
  left_flight, left_queues, records_gone, tombstones, ends = {}, {}, {}, {}, {}
end
for k, id in ipairs(ids) do
  local receipt = receipts[k]
  local rec = recs[k]
  if one_by_one then
    rec = redis.call('HGET', KEYS[2], id)
  end
  if not rec then
    left_flight[#left_flight + 1] = id
    if one_by_one then
      write_ends()
    end
    local ended = redis.call('HGET', KEYS[4], id)
    if ended then
      -- Ended in Redis, not yet journaled: its end says how.
      put('finished', 0, '', ended)
    elseif redis.call('ZSCORE', KEYS[3], id) then
      put('finished', 0, '', '')
    else
      put('absent', 0, '', '')
    end
  else
    local topic, _, attempts = string.match(rec, '^([^|]*)|(%d+)|(%d+)|')
    attempts = tonumber(attempts)
    local recurring = string.match(rec, '^[^|]*|%d+|%d+|[^|]*|[^|]*,r|') ~= nil
    -- A series cancelled while this delivery was out (cancel.lua): the
    -- delivery is its last, and the message ends Deleted, as the cancel
    -- answered.
    local stopped = string.match(rec, '^[^|]*|%d+|%d+|[^|]*|[^|]*,x|') ~= nil
    local deadline = deadlines[k]
    if one_by_one then
      deadline = redis.call('ZSCORE', KEYS[1], id)
    end
    local state, where, stale = nil, nil, false
    if receipt ~= '' then
      local ra, rd = string.match(receipt, '^(%d+)-(%d+)$')
      ra, rd = tonumber(ra), tonumber(rd)
      if deadline then
        if ra == attempts and rd == tonumber(deadline) then
          state = 'acked'
        else
          stale = true
        end
      elseif ra ~= attempts then
        stale = true
      end
    elseif deadline then
      state = 'acked'
    end
    if not state and not stale and not deadline and attempts > 0 then
      -- The latest delivery's deadline passed and nobody holds it since.
      if redis.call('ZSCORE', ARGV[1] .. topic, id) then
        state, where = 'acked_late', ARGV[1] .. topic
      elseif redis.call('ZSCORE', KEYS[5], id) then
        state, where = 'acked_late', KEYS[5]
      end
    end
    if stale then
      local now_state = 'ready'
      if deadline then
        now_state = 'in_flight'
      elseif redis.call('ZSCORE', KEYS[5], id) then
        now_state = 'delaying'
      end
      put('stale', attempts, recurring and rec or '', now_state)
    elseif not state then
      -- Where it waits: a message never handed out is scheduled (delay
      -- zset) or ready.
      local at = redis.call('ZSCORE', KEYS[5], id) and 'delaying' or 'ready'
      put('not_in_flight', attempts, recurring and rec or '', at)
    elseif recurring then
      put('recurring', attempts, rec, '')
    else
      if state == 'acked' then
        left_flight[#left_flight + 1] = id
        group_add(left_busy, topic, id)
      else
        group_add(left_queues, where, id)
      end
      -- Its group's next message takes the turn (group.lua).
      if grouped then
        group_leave(ARGV[1], KEYS[2], rec, id)
      end
      records_gone[#records_gone + 1] = id
      tombstones[#tombstones + 1] = now
      tombstones[#tombstones + 1] = id
      ends[#ends + 1] = id
      ends[#ends + 1] = unjournaled_end(stopped and 5 or 4, attempts, now)
      if one_by_one then
        write_ends()
      end
      put(stopped and 'acked_stopped' or state, attempts, '', '')
    end
  end
end
write_ends()
out[#out + 1] = now
return out
