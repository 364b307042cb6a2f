-- Schedule messages into one shard, idempotently.
-- KEYS[1] delay zset, KEYS[2] message hash, KEYS[3] finished zset (tombstones)
-- ARGV: triples of (id, score, record)
-- A message whose record is already in the hash is left as it is (it is
-- scheduled, ready or in flight already); a message acked or cancelled
-- recently (a tombstone) is not brought back, so a restore that read the
-- journal just before the journal heard of the ack cannot revive it.
-- Returns one flag per message: 1 added, 0 already present, 2 finished.
local out = {}
for i = 1, #ARGV, 3 do
  local id = ARGV[i]
  if redis.call('ZSCORE', KEYS[3], id) then
    out[#out + 1] = 2
  elseif redis.call('HSETNX', KEYS[2], id, ARGV[i + 2]) == 1 then
    redis.call('ZADD', KEYS[1], ARGV[i + 1], id)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
