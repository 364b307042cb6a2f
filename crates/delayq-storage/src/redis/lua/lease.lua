-- A lease held in one key: a Snowflake worker id, or the standalone node's
-- right to serve a key prefix.
-- KEYS[1] the lease key
-- ARGV[1] 'acquire' | 'renew' | 'release', ARGV[2] the holder (unique per
-- process), ARGV[3] lease time (ms)
-- acquire: takes a free lease (or one this holder has); renew: extends it
-- while this holder still has it; release: frees it if this holder has it.
-- Returns 1 when the holder has the lease afterwards (0 after a release),
-- else 0, and the current holder (false when free).
local cur = redis.call('GET', KEYS[1])
local op = ARGV[1]
if op == 'release' then
  if cur == ARGV[2] then
    redis.call('DEL', KEYS[1])
  end
  return { 0, false }
end
if cur == ARGV[2] or (op == 'acquire' and not cur) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return { 1, ARGV[2] }
end
return { 0, cur }
