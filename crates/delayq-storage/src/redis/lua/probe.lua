-- Reads the clock of the master holding a shard, names that master, and
-- says whether the shard is fenced after a possible loss of writes (see
-- fence.lua, prepended).
-- KEYS[1] the shard's applied hash
-- Returns: seconds and microseconds of TIME, this process's run id, and
-- the run id the applied hash names ('' for none).
local t = redis.call('TIME')
return { t[1], t[2], server_run(), redis.call('HGET', KEYS[1], 'run') or '' }
