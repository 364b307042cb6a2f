-- Schedule messages into one shard, idempotently.
-- KEYS[1] delay zset, KEYS[2] message hash
-- ARGV: triples of (id, score, record)
-- A message whose record is already in the hash is left as it is (it is
-- scheduled, ready or in flight already).
-- Returns one flag per message: 1 added, 0 already present.
local out = {}
for i = 1, #ARGV, 3 do
  local id = ARGV[i]
  if redis.call('HSETNX', KEYS[2], id, ARGV[i + 2]) == 1 then
    redis.call('ZADD', KEYS[1], ARGV[i + 1], id)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
