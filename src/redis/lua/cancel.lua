-- Cancel a message that has not been handed to a consumer.
-- KEYS[1] delay zset, KEYS[2] message hash, KEYS[3] in-flight zset,
-- KEYS[4] finished zset
-- ARGV[1] id, ARGV[2] ready key prefix, ARGV[3] now_ms, ARGV[4] '1' to
-- leave a tombstone also when this shard does not hold the message
-- Unless the message is in flight, it leaves a tombstone in the finished
-- zset: a push or restore about to schedule it will not (see schedule.lua).
-- The caller asks for one on an absent message only once the journal said
-- it is live (pushed, not yet in Redis), so an unknown id changes nothing.
-- A recurring message in flight has its series stopped instead: its record
-- is marked (',x', see record.rs) so that delivery is its last, however it
-- ends (ack, nack, deadline).
-- Returns { outcome, attempts }: 'deleted', 'stopped' (a series, in flight),
-- 'in_flight' (left alone), or 'absent' (not in this shard; attempts 0).
local id = ARGV[1]
local rec = redis.call('HGET', KEYS[2], id)
if not rec then
  if ARGV[4] == '1' then
    redis.call('ZADD', KEYS[4], ARGV[3], id)
  end
  return { 'absent', 0 }
end
local topic, _, attempts = string.match(rec, '^([^|]*)|(%d+)|(%d+)|')
attempts = tonumber(attempts)
if redis.call('ZSCORE', KEYS[3], id) then
  local marked, n = string.gsub(rec, '^([^|]*|%d+|%d+|[^|]*|[^|]*),[rx]|', '%1,x|', 1)
  if n == 1 then
    redis.call('HSET', KEYS[2], id, marked)
    return { 'stopped', attempts }
  end
  return { 'in_flight', attempts }
end
redis.call('ZREM', KEYS[1], id)
redis.call('ZREM', ARGV[2] .. topic, id)
redis.call('HDEL', KEYS[2], id)
redis.call('ZADD', KEYS[4], ARGV[3], id)
return { 'deleted', attempts }
