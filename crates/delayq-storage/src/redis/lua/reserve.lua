-- Raise a worker id's reserved millisecond: ids of that worker never use a
-- millisecond above it, and its next holder starts above it.
-- KEYS[1] the worker's reserved key
-- ARGV[1] the millisecond (epoch ms) to reserve up to
-- Returns { reserved before, reserved now } (0 when none was stored).
local before = tonumber(redis.call('GET', KEYS[1]) or '0')
local now = math.max(before, tonumber(ARGV[1]))
redis.call('SET', KEYS[1], string.format('%d', now))
return { string.format('%d', before), string.format('%d', now) }
