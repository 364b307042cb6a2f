-- Prepended to the scripts that touch many messages at once: a redis.call
-- costs about a microsecond whatever it carries, so they read and write a
-- batch's messages in a few calls rather than a few calls a message.

-- `cmd key args...` over a long list, at most 1,000 arguments a call
-- (Lua's unpack is bounded); an even step keeps (score, member) and
-- (field, value) pairs together.
local function bulk(cmd, key, args)
  local n = #args
  local i = 1
  while i <= n do
    local j = math.min(i + 999, n)
    redis.call(cmd, key, unpack(args, i, j))
    i = j + 1
  end
end

-- `cmd key ids...` for a reading command that answers one value per id
-- (HMGET, ZMSCORE), at most 1,000 ids a call; the answers in id order.
-- A Redis older than 6.2 has no ZMSCORE: there each id's ZSCORE is read.
local function bulk_read(cmd, key, ids)
  local out = {}
  local n = #ids
  local i = 1
  while i <= n do
    local j = math.min(i + 999, n)
    local got
    if cmd == 'ZMSCORE' then
      got = redis.pcall(cmd, key, unpack(ids, i, j))
      if type(got) == 'table' and got.err then
        got = {}
        for k = i, j do
          got[k - i + 1] = redis.call('ZSCORE', key, ids[k])
        end
      end
    else
      got = redis.call(cmd, key, unpack(ids, i, j))
    end
    for k = 1, j - i + 1 do
      out[i + k - 1] = got[k]
    end
    i = j + 1
  end
  return out
end

-- Hands the first `n` ready messages of one queue to a consumer: each gets
-- attempts + 1 and an ack deadline of now + ttl. Returns, in queue order,
-- {id, record} per message (record with attempts raised), false for an id
-- whose record is gone (its queue entry is dropped), and how many those
-- were. Every record is read before anything is written, so a record
-- that cannot be read stops the call having changed nothing.
local function claim_head(ready, records, inflight, n, now)
  if n < 1 then
    return {}, 0
  end
  local ids = redis.call('ZRANGE', ready, 0, n - 1)
  if #ids == 0 then
    return {}, 0
  end
  local recs = redis.call('HMGET', records, unpack(ids))
  local out, sets, deadlines, gone = {}, {}, {}, 0
  for i, id in ipairs(ids) do
    local rec = recs[i]
    if rec then
      local topic, ttl, attempts, rest = string.match(rec, '^([^|]*)|(%d+)|(%d+)|(.*)$')
      rec = topic .. '|' .. ttl .. '|' .. (tonumber(attempts) + 1) .. '|' .. rest
      sets[#sets + 1] = id
      sets[#sets + 1] = rec
      deadlines[#deadlines + 1] = now + tonumber(ttl)
      deadlines[#deadlines + 1] = id
      out[i] = { id, rec }
    else
      out[i] = false
      gone = gone + 1
    end
  end
  redis.call('ZREMRANGEBYRANK', ready, 0, #ids - 1)
  bulk('HSET', records, sets)
  bulk('ZADD', inflight, deadlines)
  return out, gone
end
