-- Prepended to the scripts that leave or take the new score of a message
-- rescheduled while its shard did not hold it (reschedule.lua,
-- schedule.lua). The moved hash keeps 'score|at' per id (or
-- 'score|R<record>|at' with the record it is to have) for MOVE_MS, the
-- time a caller holding a reading of the journal from before the move can
-- take to schedule it (every caller reading the journal later reads the
-- moved row); its index, a zset, holds the same ids scored by `at`, so the
-- moves past their time are found without reading the hash. Every call
-- that leaves a move, or looks for moves to take, drops up to MOVE_DROP of
-- those; both keys expire MOVE_MS after the last move left (a shard whose
-- moves stop keeps none, nor any an older version left without the index).
local MOVE_MS = 120000
local MOVE_DROP = 100

local function drop_old_moves(hash, index, now)
  local old = redis.call('ZRANGEBYSCORE', index, '-inf', '(' .. string.format('%.0f', now - MOVE_MS), 'LIMIT', 0, MOVE_DROP)
  if #old > 0 then
    redis.call('HDEL', hash, unpack(old))
    redis.call('ZREM', index, unpack(old))
  end
end
