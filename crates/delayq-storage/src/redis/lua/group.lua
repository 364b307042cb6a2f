-- Prepended to the scripts that make a message ready or end it: the turn
-- of ordered groups. Every message of a group of a topic is in one shard
-- (its id was drawn there, see keys.rs), so these keys, named from the
-- shard's ready key prefix ('{P:s}:ready:'), are in the caller's slot:
--   '{P:s}:turn:TOPIC'       hash  group -> the id holding the group's turn
--   '{P:s}:held:TOPIC|GROUP' zset  due ids waiting behind the turn (ready scores)
--   '{P:s}:gwait:TOPIC'      set   groups of the topic with ids held
--   '{P:s}:heldn:TOPIC'      int   how many ids of the topic are held
--   '{P:s}:gtopics'          set   topics with a group holding its turn here
-- The holder is ready, handed out, or waiting for the retry after a failed
-- delivery (a nack or an expired deadline keeps the turn); it gives the
-- turn up when it ends (acked, dead, cancelled, removed) or is moved to
-- later, and the group's first held message takes it, ready at once.
-- Messages without a group touch none of this.

-- The group of a record, or nil (see record.rs: ',gN' closes the field
-- list '|~...|', the sixth field, and the group's N bytes come first after
-- it). Every hand-out step of every message asks, grouped or not, so the
-- common answer (none) costs two plain finds and a byte or two: the
-- header's fields hold no '~', so the first '|~' opens the field list,
-- whose last entry is read backwards from its closing '|'. An older
-- record holds JSON from its fifth or sixth field on ('|{' before any
-- '|~'), where a '|~' would be the body's.
local function group_of(rec)
  local _, tilde = string.find(rec, '|~', 1, true)
  if not tilde then
    return nil
  end
  local close = string.find(rec, '|', tilde + 1, true)
  if not close then
    return nil
  end
  local i = close - 1
  while i > tilde do
    local b = string.byte(rec, i)
    if b < 48 or b > 57 then
      break
    end
    i = i - 1
  end
  if i == close - 1 or string.byte(rec, i) ~= 103 or string.byte(rec, i - 1) ~= 44 then
    return nil
  end
  local json = string.find(rec, '|{', 1, true)
  if json and json < tilde then
    return nil
  end
  local n = tonumber(string.sub(rec, i + 1, close - 1))
  return string.sub(rec, close + 1, close + n)
end

local function group_base(ready_prefix)
  return string.sub(ready_prefix, 1, -7)
end

local function turn_key(ready_prefix, topic)
  return group_base(ready_prefix) .. 'turn:' .. topic
end

local function held_key(ready_prefix, topic, group)
  return group_base(ready_prefix) .. 'held:' .. topic .. '|' .. group
end

local function gwait_key(ready_prefix, topic)
  return group_base(ready_prefix) .. 'gwait:' .. topic
end

local function heldn_key(ready_prefix, topic)
  return group_base(ready_prefix) .. 'heldn:' .. topic
end

local function gtopics_key(ready_prefix)
  return group_base(ready_prefix) .. 'gtopics'
end

-- Consumers on every node wake: a message became ready outside a scan.
local function group_wake(ready_prefix, topic)
  redis.call('PUBLISH', string.sub(ready_prefix, 1, -2), '-|' .. topic)
end

-- `id` leaves its group's held messages, if it is there.
local function group_unhold(ready_prefix, topic, group, id)
  local held = held_key(ready_prefix, topic, group)
  if redis.call('ZREM', held, id) == 0 then
    return false
  end
  redis.call('DECR', heldn_key(ready_prefix, topic))
  if redis.call('EXISTS', held) == 0 then
    redis.call('SREM', gwait_key(ready_prefix, topic), group)
  end
  return true
end

-- Message `id` (record `rec`, in hash `msg_key`) of topic `topic` is due
-- with `score` (text): it takes its group's turn and joins the ready queue
-- when the turn is free, already its own, or held by a message this shard
-- no longer has; otherwise it waits behind the turn. Returns true when it
-- is ready. A message without a group is ready.
local function group_due(ready_prefix, msg_key, topic, rec, id, score)
  local group = group_of(rec)
  if group then
    local turn = turn_key(ready_prefix, topic)
    local holder = redis.call('HGET', turn, group)
    if holder and holder ~= id and redis.call('HEXISTS', msg_key, holder) == 1 then
      if redis.call('ZADD', held_key(ready_prefix, topic, group), score, id) == 1 then
        redis.call('INCR', heldn_key(ready_prefix, topic))
      end
      redis.call('SADD', gwait_key(ready_prefix, topic), group)
      return false
    end
    if redis.call('HSET', turn, group, id) == 1 then
      redis.call('SADD', gtopics_key(ready_prefix), topic)
    end
  end
  redis.call('ZADD', ready_prefix .. topic, score, id)
  return true
end

-- Message `id` (record `rec`) no longer holds its group's turn, or waits
-- behind it: it ended or moves to later. When it held the turn, the
-- group's first held message that this shard still has takes it and is
-- ready (consumers wake). Returns true when one became ready.
local function group_leave(ready_prefix, msg_key, rec, id)
  local group = group_of(rec)
  if not group then
    return false
  end
  local topic = string.match(rec, '^([^|]*)|')
  local turn = turn_key(ready_prefix, topic)
  if redis.call('HGET', turn, group) ~= id then
    group_unhold(ready_prefix, topic, group, id)
    return false
  end
  local held = held_key(ready_prefix, topic, group)
  while true do
    local head = redis.call('ZPOPMIN', held)
    if not head[1] then
      break
    end
    redis.call('DECR', heldn_key(ready_prefix, topic))
    if redis.call('HEXISTS', msg_key, head[1]) == 1 then
      redis.call('HSET', turn, group, head[1])
      redis.call('ZADD', ready_prefix .. topic, head[2], head[1])
      if redis.call('EXISTS', held) == 0 then
        redis.call('SREM', gwait_key(ready_prefix, topic), group)
      end
      group_wake(ready_prefix, topic)
      return true
    end
  end
  redis.call('HDEL', turn, group)
  redis.call('SREM', gwait_key(ready_prefix, topic), group)
  if redis.call('EXISTS', turn) == 0 then
    redis.call('SREM', gtopics_key(ready_prefix), topic)
  end
  return false
end

-- Whether any group of any topic holds its turn in the shard: a message
-- held behind a turn, or holding one, implies so, so a step that only
-- passes turns on (an ack) skips looking for groups when none does.
local function groups_here(ready_prefix)
  return redis.call('EXISTS', gtopics_key(ready_prefix)) == 1
end

-- Where a message of a group waits behind its turn: its score there, or nil.
local function group_held_score(ready_prefix, rec, id)
  local group = group_of(rec)
  if not group then
    return nil
  end
  local topic = string.match(rec, '^([^|]*)|')
  return redis.call('ZSCORE', held_key(ready_prefix, topic, group), id)
end
