-- A poll's claim in one call (one Redis without cluster slots): the first
-- ready messages of one topic across every shard, handed to a consumer.
-- KEYS: per shard, in shard order: ready zset of the topic, message hash,
-- in-flight zset, paused topics (set), the topic's hand-outs, the shard's
-- applied hash (fence.lua, prepended) (6 keys a shard); then the topic's rate limit bucket (limit.lua, prepended).
-- ARGV[1] how many to take in all, ARGV[2] the topic, ARGV[3] its rate
-- limit a second (0: none), ARGV[4] its concurrency cap (0: none), ARGV[5]
-- how long (ms) a poll the cap holds back waits before it looks again.
-- A shard whose paused set holds the topic hands nothing out, nor does a
-- shard fenced after a possible loss of Redis's last writes.
-- The heads of the shards' ready queues are merged by score, then by id
-- (as a peek across shards followed by claims would take them, in one
-- step): each shard gives up the head of its queue that many, claimed by
-- claim_head (bulk.lua, prepended; now by Redis's clock, clock.lua).
-- Returns, for each claimed message in score order: its shard (0-based),
-- id and record (attempts already raised); then how many queue entries
-- had no record (dropped: the caller looks again when that left it with
-- nothing), how long (ms) the rate limit or the concurrency cap holds the
-- topic back when it allowed nothing (0 otherwise), then the time the
-- script ran.
local now = now_ms()
local want = tonumber(ARGV[1])
local shards = (#KEYS - 1) / 6
-- A topic with a concurrency cap takes what room its hand-outs leave (when
-- some wait to be taken).
local cap = tonumber(ARGV[4] or '0')
if cap > 0 then
  local busy = 0
  for s = 1, shards do
    busy = busy + busy_count(KEYS[6 * s - 1], cap, now)
  end
  if busy >= cap then
    for s = 1, shards do
      if redis.call('SISMEMBER', KEYS[6 * s - 2], ARGV[2]) == 0 and redis.call('ZCARD', KEYS[6 * s - 5]) > 0 then
        return { '0', ARGV[5], tostring(now) }
      end
    end
    return { '0', '0', tostring(now) }
  end
  want = math.min(want, cap - busy)
end
-- A topic with a rate limit takes what its bucket (the last key) allows.
local rate, bucket = tonumber(ARGV[3]), KEYS[#KEYS]
local b_wait, b_tokens, b_at
want, b_wait, b_tokens, b_at = bucket_take(bucket, rate, want, now)
if want == 0 then
  return { '0', tostring(b_wait), tostring(now) }
end
-- Each queue's head is read a few entries at a time (writing out a score
-- costs more than the rest of an entry), and further while the merge
-- takes from it.
local step = math.max(4, math.ceil(want / shards) + 2)
local heads, at, read, more = {}, {}, {}, {}
local function fetch(s)
  local got = redis.call('ZRANGE', KEYS[6 * s - 5], read[s], read[s] + step - 1, 'WITHSCORES')
  local h = heads[s]
  for i = 1, #got do
    h[#h + 1] = got[i]
  end
  read[s] = read[s] + #got / 2
  more[s] = #got == 2 * step
end
local run = server_run()
for s = 1, shards do
  heads[s], at[s], read[s] = {}, 1, 0
  if redis.call('SISMEMBER', KEYS[6 * s - 2], ARGV[2]) == 1
      or redis.call('HGET', KEYS[6 * s], 'run') ~= run then
    more[s] = false
  else
    fetch(s)
  end
end
-- Merge: the shard whose next entry comes first, `want` times.
local order, taken = {}, 0
while taken < want do
  local best, best_score, best_id
  for s = 1, shards do
    if at[s] > #heads[s] and more[s] then
      fetch(s)
    end
    local h, p = heads[s], at[s]
    if p <= #h then
      local score, id = tonumber(h[p + 1]), h[p]
      if best == nil or score < best_score or (score == best_score and id < best_id) then
        best, best_score, best_id = s, score, id
      end
    end
  end
  if best == nil then break end
  taken = taken + 1
  order[taken] = best
  at[best] = at[best] + 2
end
local out = {}
-- Claim each shard's share from its queue's head, then answer in merged order.
local claimed, dropped = {}, 0
for s = 1, shards do
  local n = (at[s] - 1) / 2
  if n > 0 then
    local items, gone = claim_head(KEYS[6 * s - 5], KEYS[6 * s - 4], KEYS[6 * s - 3], n, now)
    busy_add(KEYS[6 * s - 1], cap, items, now)
    claimed[s] = { items = items, next = 1 }
    dropped = dropped + gone
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
bucket_spend(bucket, rate, b_tokens, b_at, #out / 3)
out[#out + 1] = tostring(dropped)
out[#out + 1] = '0'
out[#out + 1] = tostring(now)
return out
