-- The topics of the messages at some ranks of one shard's delay zset
-- (read only), for the next hour's count per topic in /metrics.
-- KEYS[1] {P:s}:delay, KEYS[2] {P:s}:msg; ARGV the ranks.
-- One topic per rank, false where the rank held no message with a record.
local out = {}
for i = 1, #ARGV do
    local ids = redis.call('ZRANGE', KEYS[1], ARGV[i], ARGV[i])
    local topic = false
    if ids[1] then
        local rec = redis.call('HGET', KEYS[2], ids[1])
        if rec then
            topic = string.match(rec, '^([^|]*)|')
        end
    end
    out[i] = topic
end
return out
