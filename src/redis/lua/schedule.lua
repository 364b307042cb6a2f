-- Schedule messages into one shard, idempotently, and wake its owner.
-- KEYS[1] delay zset, KEYS[2] message hash, KEYS[3] finished zset (tombstones),
-- KEYS[4] the shard's epoch
-- ARGV[1] the shard's wake channel, ARGV[2] the caller's epoch ('0': any
-- node may schedule), then triples of (id, score, record)
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
-- Returns one flag per message: 1 added, 0 already present, 2 finished,
-- then the time the script ran (Redis's clock, ms).
local mine = tonumber(ARGV[2])
if mine > 0 then
  local stored = tonumber(redis.call('GET', KEYS[4]) or '0')
  if stored > mine then
    return redis.error_reply('STALE_EPOCH ' .. string.format('%.0f', stored) .. ' shard epoch is above ' .. ARGV[2])
  end
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
head = head and tonumber(head)
local earliest = nil
local out = {}
for i = 3, #ARGV, 3 do
  local id = ARGV[i]
  if redis.call('ZSCORE', KEYS[3], id) then
    out[#out + 1] = 2
  elseif redis.call('HSETNX', KEYS[2], id, ARGV[i + 2]) == 1 then
    local score = tonumber(ARGV[i + 1])
    redis.call('ZADD', KEYS[1], score, id)
    if not earliest or score < earliest then
      earliest = score
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if earliest and (not head or earliest < head) then
  redis.call('PUBLISH', ARGV[1], string.format('%d', math.floor(earliest / 256)))
end
out[#out + 1] = now_ms()
return out
