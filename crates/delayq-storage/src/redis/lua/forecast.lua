-- The forecast's reading of one shard's delay zset (read only): for each
-- range of scores, how many messages it holds and which, all of them or
-- some at random, counted and read in this one step (so the ids read are
-- always of the range, whatever moved since an earlier count).
-- KEYS[1] {P:s}:delay.
-- ARGV: groups of LOW, HIGH (scores; the range is [LOW, HIGH)), K, then K
-- uniform numbers in [0, 1).
-- Returns per group {N, WHOLE, id...}: N the range's count; WHOLE 1 when
-- N <= K and every id of the range follows, else 0 and K ids at the ranks
-- the uniforms pick (with replacement).
local out = {}
local i = 1
while i <= #ARGV do
    local low, high, k = ARGV[i], '(' .. ARGV[i + 1], tonumber(ARGV[i + 2])
    i = i + 3
    local n = redis.call('ZCOUNT', KEYS[1], low, high)
    local g = {n}
    if n <= k then
        g[2] = 1
        local ids = redis.call('ZRANGEBYSCORE', KEYS[1], low, high)
        for _, id in ipairs(ids) do
            g[#g + 1] = id
        end
    else
        g[2] = 0
        local base = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. low)
        for j = 0, k - 1 do
            local r = base + math.floor(tonumber(ARGV[i + j]) * n)
            local ids = redis.call('ZRANGE', KEYS[1], r, r)
            if ids[1] then
                g[#g + 1] = ids[1]
            end
        end
    end
    i = i + k
    out[#out + 1] = g
end
return out
