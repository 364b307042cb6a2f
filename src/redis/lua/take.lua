-- A poll's claim in one call (one Redis without cluster slots): the first
-- ready messages of one topic across every shard, handed to a consumer.
-- KEYS: per shard, in shard order: ready zset of the topic, message hash,
-- in-flight zset (3 keys a shard).
-- ARGV[1] how many to take in all.
-- The heads of the shards' ready queues are merged by score, then by id
-- (as a peek across shards followed by claims would take them, in one
-- step): each shard gives up the head of its queue that many, claimed as
-- claim.lua claims them (attempts + 1, ack deadline now + ttl, now by
-- Redis's clock: clock.lua, prepended).
-- Returns, for each claimed message in score order: its shard (0-based),
-- id and record (attempts already raised); then the time the script ran.
local now = now_ms()
local want = tonumber(ARGV[1])
local shards = #KEYS / 3
local heads, at = {}, {}
for s = 1, shards do
  heads[s] = redis.call('ZRANGE', KEYS[3 * s - 2], 0, want - 1, 'WITHSCORES')
  at[s] = 1
end
-- Merge the sorted heads: the shard whose next entry comes first, `want` times.
local order = {}
while #order < want do
  local best, best_score, best_id
  for s = 1, shards do
    local h, p = heads[s], at[s]
    if p <= #h then
      local score, id = tonumber(h[p + 1]), h[p]
      if best == nil or score < best_score or (score == best_score and id < best_id) then
        best, best_score, best_id = s, score, id
      end
    end
  end
  if best == nil then break end
  order[#order + 1] = best
  at[best] = at[best] + 2
end
local out = {}
if #order == 0 then
  out[1] = tostring(now)
  return out
end
-- Claim each shard's share from its queue's head, then answer in merged order.
local claimed = {}
for s = 1, shards do
  local n = (at[s] - 1) / 2
  if n > 0 then
    local ready, records, inflight = KEYS[3 * s - 2], KEYS[3 * s - 1], KEYS[3 * s]
    local popped = redis.call('ZPOPMIN', ready, n)
    local mine = {}
    for i = 1, #popped, 2 do
      local id = popped[i]
      local rec = redis.call('HGET', records, id)
      if rec then
        local topic, ttl, attempts, rest = string.match(rec, '^([^|]*)|(%d+)|(%d+)|(.*)$')
        rec = topic .. '|' .. ttl .. '|' .. (tonumber(attempts) + 1) .. '|' .. rest
        redis.call('HSET', records, id, rec)
        redis.call('ZADD', inflight, now + tonumber(ttl), id)
        mine[#mine + 1] = { id, rec }
      else
        mine[#mine + 1] = false
      end
    end
    claimed[s] = { items = mine, next = 1 }
  end
end
for _, s in ipairs(order) do
  local c = claimed[s]
  local item = c.items[c.next]
  c.next = c.next + 1
  if item then
    out[#out + 1] = tostring(s - 1)
    out[#out + 1] = item[1]
    out[#out + 1] = item[2]
  end
end
out[#out + 1] = tostring(now)
return out
