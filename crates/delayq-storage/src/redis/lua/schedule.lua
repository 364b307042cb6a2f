-- Schedule messages into one shard, idempotently, and wake its owner.
-- KEYS[1] delay zset, KEYS[2] message hash, KEYS[3] finished zset (tombstones),
-- KEYS[4] the shard's epoch, KEYS[5] the shard's moved hash, KEYS[6] its
-- index (see moved.lua, prepended)
-- ARGV[1] the shard's wake channel, ARGV[2] the caller's epoch ('0': any
-- node may schedule), ARGV[3] when the caller read what it schedules (the
-- journal's rows, a push's commit; ms, '0': just now), ARGV[4] how old
-- (ms) such a reading may be, then triples of (id, score, record)
-- A message whose record is already in the hash is left as it is (it is
-- scheduled, ready or in flight already); a message acked or cancelled
-- recently (a tombstone) is not brought back, so a restore that read the
-- journal just before the journal heard of the ack cannot revive it.
-- The horizon loader (the shard's owner) passes its epoch: when the stored
-- one is above it, the call fails with 'STALE_EPOCH <stored> ...' and
-- changes nothing, so a deposed owner holding an old page of the journal
-- cannot schedule what the new owner already delivered.
-- When an added message is due before everything the shard held, its due
-- time (ms) is published on the wake channel: the owner, on whichever node,
-- sleeps until the earliest due time and must wake earlier.
-- A message rescheduled while Redis did not hold it (reschedule.lua) is
-- added at the score the move left in the moved hash, not the one given,
-- which its caller may have read from the journal before the move; the
-- move is taken (it leaves the hash); a move that carries a whole record
-- ('score|R<record>|at', a replaced body) puts that record in place of
-- the one given. A move older than MOVE_MS is stale
-- (every caller reading the journal since read the moved row): it is not
-- taken, and leaves the hash all the same.
-- A reading older than ARGV[4] fails the call with 'STALE_READING <age>'
-- and changes nothing: the tombstones and moves that guard a reading from
-- the journal last two minutes, and a process frozen since its reading
-- (a stopped or paused machine) may hold one the journal has long
-- overtaken (a cancel, a reschedule); its caller reads again.
-- Returns one flag per message: 1 added, 0 already present, 2 finished,
-- then the time the script ran (Redis's clock, ms).
local mine = tonumber(ARGV[2])
if mine > 0 then
  local stored = tonumber(redis.call('GET', KEYS[4]) or '0')
  if stored > mine then
    return redis.error_reply('STALE_EPOCH ' .. string.format('%.0f', stored) .. ' shard epoch is above ' .. ARGV[2])
  end
end
local read_at = tonumber(ARGV[3])
if read_at > 0 then
  local age = now_ms() - read_at
  if age > tonumber(ARGV[4]) then
    return redis.error_reply('STALE_READING ' .. string.format('%.0f', age) .. ' ms old')
  end
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
head = head and tonumber(head)
local earliest = nil
local out = {}
local ids = {}
for i = 5, #ARGV, 3 do
  ids[#ids + 1] = ARGV[i]
end
local finished = bulk_read('ZMSCORE', KEYS[3], ids)
local held = bulk_read('HMGET', KEYS[2], ids)
-- Added by this call: an id given twice is added once (as HSETNX would).
local added = {}
local records, scores = {}, {}
for k, id in ipairs(ids) do
  if finished[k] then
    out[k] = 2
  elseif held[k] or added[id] then
    out[k] = 0
  else
    added[id] = true
    local score = tonumber(ARGV[3 * k + 3])
    records[#records + 1] = id
    records[#records + 1] = ARGV[3 * k + 4]
    scores[#scores + 1] = ARGV[3 * k + 3]
    scores[#scores + 1] = id
    if not earliest or score < earliest then
      earliest = score
    end
    out[k] = 1
  end
end
if #records > 0 and redis.call('HLEN', KEYS[5]) > 0 then
  local now = now_ms()
  drop_old_moves(KEYS[5], KEYS[6], now)
  -- A hash an older version left without an expiry goes like the others.
  if redis.call('PTTL', KEYS[5]) == -1 then
    redis.call('PEXPIRE', KEYS[5], MOVE_MS)
  end
  local added_ids = {}
  for i = 1, #records, 2 do
    added_ids[#added_ids + 1] = records[i]
  end
  local moved = bulk_read('HMGET', KEYS[5], added_ids)
  local seen = {}
  for k, m in ipairs(moved) do
    if m then
      local score, at = string.match(m, '^([^|]*)|(%d+)$')
      local carried = nil
      if not score then
        score, carried, at = string.match(m, '^([^|]*)|R(.*)|(%d+)$')
      end
      if score and now - tonumber(at) < MOVE_MS then
        local rec = carried or records[2 * k]
        local head, old = string.match(rec, '^([^|]*|%d+|%d+|)([^|]*)|')
        if head then
          records[2 * k] = head .. score .. string.sub(rec, #head + #old + 1)
          scores[2 * k - 1] = score
          if tonumber(score) < earliest then
            earliest = tonumber(score)
          end
        end
      end
      seen[#seen + 1] = added_ids[k]
    end
  end
  bulk('HDEL', KEYS[5], seen)
  bulk('ZREM', KEYS[6], seen)
end
bulk('HSET', KEYS[2], records)
bulk('ZADD', KEYS[1], scores)
if earliest and (not head or earliest < head) then
  redis.call('PUBLISH', ARGV[1], string.format('%d', math.floor(earliest / 256)))
end
out[#out + 1] = now_ms()
return out
