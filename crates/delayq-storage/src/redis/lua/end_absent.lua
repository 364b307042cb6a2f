-- End messages this shard does not hold, as the journal says they are
-- live (an ack of a message Redis lost, or one whose ack reached Redis
-- before a crash): a tombstone and the end for the journal, so a restore
-- or a repair running at the same moment cannot schedule them again. A
-- message that is back in the shard meanwhile (a restore got there first)
-- is left alone: its caller acks it the usual way.
-- KEYS[1] message hash, KEYS[2] finished zset, KEYS[3] unjournaled hash
-- ARGV triples of (id, status code, attempts)
-- Returns one flag per id: 1 ended here, 0 back in the shard.
local now = now_ms()
local out = {}
for i = 1, #ARGV, 3 do
  local id = ARGV[i]
  if redis.call('HEXISTS', KEYS[1], id) == 1 then
    out[#out + 1] = 0
  else
    redis.call('ZADD', KEYS[2], now, id)
    unjournaled(KEYS[3], id, ARGV[i + 1], ARGV[i + 2], now)
    out[#out + 1] = 1
  end
end
return out
