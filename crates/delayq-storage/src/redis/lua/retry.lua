-- Prepended (after clock.lua) to tick.lua and nack.lua: what a failed delivery (a nack, or an
-- ack deadline that passed) leads to. The record's header carries the
-- message's attempt limit and retry policy (see record.rs); a record from
-- before that field gets the defaults (16 attempts, ready again at once).

-- topic, attempts, score, maxAttempts, backoff kind, delay, max, series
-- flag ('' not recurring, ',r' recurring, ',x' series cancelled)
local function retry_header(rec)
  local topic, _, attempts, score, max_attempts, kind, delay, max, series =
    string.match(rec, '^([^|]*)|(%d+)|(%d+)|([^|]*)|(%d+),(%a),(%d+),(%d+)([^|]*)|')
  if not topic then
    topic, _, attempts, score = string.match(rec, '^([^|]*)|(%d+)|(%d+)|([^|]*)|')
    max_attempts, kind, delay, max, series = 16, 'n', 0, 0, ''
  end
  return topic, tonumber(attempts), tonumber(score), tonumber(max_attempts), kind,
    tonumber(delay), tonumber(max), series
end

-- The message `id` (record `rec`, already out of the in-flight zset) failed
-- its delivery at `now`. `wait` is the nack's delay (ms), or nil for the
-- retry policy's. After its last attempt it is dead: its record goes and it
-- leaves a tombstone, its end waiting in the unjournaled hash for the
-- journal (see clock.lua); otherwise it is ready again at once (`wait` 0) or
-- scheduled again in the delay zset, keeping its priority.
-- A recurring message whose series was cancelled during this delivery
-- ends here ('stopped'): its record goes and it leaves a tombstone.
-- Returns outcome ('ready', 'delaying', 'dead' or 'stopped'), topic,
-- attempts, and the time it is due again (now when ready, dead or stopped).
local function fail_delivery(delay_key, msg_key, finished_key, unjournaled_key, ready_prefix, id, rec, now, wait)
  local topic, attempts, score, max_attempts, kind, delay, max, series = retry_header(rec)
  if series == ',x' then
    group_leave(ready_prefix, msg_key, rec, id)
    redis.call('HDEL', msg_key, id)
    redis.call('ZADD', finished_key, now, id)
    unjournaled(unjournaled_key, id, 5, attempts, now)
    return 'stopped', topic, attempts, now
  end
  if attempts >= max_attempts then
    group_leave(ready_prefix, msg_key, rec, id)
    redis.call('HDEL', msg_key, id)
    redis.call('ZADD', finished_key, now, id)
    unjournaled(unjournaled_key, id, 6, attempts, now)
    return 'dead', topic, attempts, now
  end
  if not wait then
    if kind == 'f' then
      wait = math.min(delay, max)
    elseif kind == 'e' then
      wait = math.min(delay * 2 ^ math.min(math.max(attempts, 1) - 1, 40), max)
    else
      wait = 0
    end
  end
  if wait <= 0 then
    -- Ready again (a message of a group keeps its turn, see group.lua).
    group_due(ready_prefix, msg_key, topic, rec, id, string.format('%.0f', score))
    return 'ready', topic, attempts, now
  end
  local due = now + wait
  redis.call('ZADD', delay_key, string.format('%.0f', due * 256 + score % 256), id)
  return 'delaying', topic, attempts, due
end

