-- Acknowledge a delivered message: it is consumed and leaves Redis.
-- KEYS[1] in-flight zset, KEYS[2] message hash, KEYS[3] finished zset
-- ARGV[1] id, ARGV[2] ready key prefix, ARGV[3] now_ms
-- An acked message leaves a tombstone in the finished zset (see schedule.lua).
-- Returns { outcome, attempts }: 'acked'; 'acked_late' when its ack deadline
-- had passed and it was waiting in the ready queue again; 'not_in_flight'
-- when it is scheduled but was never handed out; 'absent' (attempts 0) when
-- this shard does not hold it.
local id = ARGV[1]
local rec = redis.call('HGET', KEYS[2], id)
if not rec then
  redis.call('ZREM', KEYS[1], id)
  return { 'absent', 0 }
end
local topic, _, attempts = string.match(rec, '^([^|]*)|(%d+)|(%d+)|')
attempts = tonumber(attempts)
if redis.call('ZREM', KEYS[1], id) == 1 then
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZADD', KEYS[3], ARGV[3], id)
  return { 'acked', attempts }
end
if attempts > 0 and redis.call('ZREM', ARGV[2] .. topic, id) == 1 then
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZADD', KEYS[3], ARGV[3], id)
  return { 'acked_late', attempts }
end
return { 'not_in_flight', attempts }
