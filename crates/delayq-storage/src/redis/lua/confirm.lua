-- Names the Redis process on which the journal's ends were re-applied to
-- a shard, lifting the shard's fence (see fence.lua, prepended), unless
-- the process changed since the re-application began (another loss:
-- begin again).
-- KEYS[1] the shard's applied hash
-- ARGV[1] the run id the re-application began on, ARGV[2] the time (ms)
-- Returns 1 when named, 0 when the process changed.
if server_run() ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'run', ARGV[1], 'at', ARGV[2])
return 1
