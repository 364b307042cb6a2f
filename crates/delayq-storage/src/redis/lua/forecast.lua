-- The forecast's sample of one shard's delay zset (read only).
-- KEYS[1] {P:s}:delay, KEYS[2] {P:s}:msg.
-- ARGV[1] the topic; then groups, one per bucket: K followed by K ranks.
-- For each group: how many of the messages at those ranks are of the topic,
-- and how many ranks still held a message with a record (a rank past the
-- end, or a message gone since the counts were read, is not counted).
local prefix = ARGV[1] .. '|'
local out = {}
local i = 2
while i <= #ARGV do
    local k = tonumber(ARGV[i])
    i = i + 1
    local matched, seen = 0, 0
    for _ = 1, k do
        local r = tonumber(ARGV[i])
        i = i + 1
        local ids = redis.call('ZRANGE', KEYS[1], r, r)
        if ids[1] then
            local rec = redis.call('HGET', KEYS[2], ids[1])
            if rec then
                seen = seen + 1
                if string.sub(rec, 1, #prefix) == prefix then
                    matched = matched + 1
                end
            end
        end
    end
    out[#out + 1] = matched
    out[#out + 1] = seen
end
return out
