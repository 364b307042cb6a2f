-- Put back in the delay zset messages whose record this shard holds but
-- that sit nowhere: not scheduled, not ready, not in flight (Redis lost the
-- key that placed them). Nothing would ever deliver them; with their
-- record's score they are due when they were (at once when that passed),
-- but never before the due time the journal holds: a failed delivery's
-- retry time is the score of its delay zset entry alone (the record keeps
-- the message's first due time), and the journal took it with the nack or
-- the expired deadline. The priority stays the record's.
-- A message that found a place meanwhile is left as it is.
-- KEYS[1] delay zset, KEYS[2] message hash, KEYS[3] in-flight zset
-- ARGV[1] ready key prefix, ARGV[2] the shard's wake channel, ARGV[3..]
-- pairs of (id, the journal's due time in ms, or '' for none)
-- Publishes the earliest due time (ms) put back on the wake channel when it
-- is before everything the shard held, so its owner wakes.
-- Returns one flag per id: 1 put back, 0 left as it was.
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
head = head and tonumber(head)
local earliest = nil
local out = {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local floor = tonumber(ARGV[i + 1])
  local rec = redis.call('HGET', KEYS[2], id)
  local placed = true
  local topic, score
  if rec then
    topic, score = string.match(rec, '^([^|]*)|%d+|%d+|([^|]*)|')
    placed = redis.call('ZSCORE', KEYS[1], id)
      or redis.call('ZSCORE', KEYS[3], id)
      or (topic and redis.call('ZSCORE', ARGV[1] .. topic, id))
      or group_held_score(ARGV[1], rec, id)
  end
  score = score and tonumber(score)
  if score and floor and floor * 256 + score % 256 > score then
    score = floor * 256 + score % 256
  end
  if placed or not score then
    out[#out + 1] = 0
  else
    redis.call('ZADD', KEYS[1], string.format('%.0f', score), id)
    if not earliest or score < earliest then
      earliest = score
    end
    out[#out + 1] = 1
  end
end
if earliest and (not head or earliest < head) then
  redis.call('PUBLISH', ARGV[2], string.format('%d', math.floor(earliest / 256)))
end
return out
