-- Prepended to every script that reads the time. The cluster has one
-- clock, Redis's (see clock.rs): due times, ack deadlines and tombstone
-- times are compared with it here, never with a node's wall clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A message reached an end in Redis (acked, cancelled, dead) that the
-- journal has not recorded yet: `unjournaled` (a hash) keeps
-- `status|attempts|at` until the node that made the change has journaled
-- it (it deletes the entry then), so the tombstone outlives any crash in
-- between and the reconciler can finish the journal's side.
local function unjournaled_end(status, attempts, at)
  return status .. '|' .. attempts .. '|' .. string.format('%.0f', at)
end

-- A topic's hand-outs in a shard (see limit.lua), named from the shard's
-- ready key prefix ('{P:s}:ready:'): an ended delivery leaves it.
local function busy_key(ready_prefix, topic)
  return string.sub(ready_prefix, 1, -7) .. 'busy:' .. topic
end

local function unjournaled(key, id, status, attempts, at)
  redis.call('HSET', key, id, unjournaled_end(status, attempts, at))
end
