-- Prepended to the scripts that hand messages out (and to the probe).
-- Redis may lose its last writes and keep its data set marker (a replica
-- promoted before it caught up, an AOF everysec crash, an older snapshot
-- restored): acks and cancels the journal holds would then be undone in
-- Redis. Every such loss starts a new Redis process, with a new run id.
-- A shard's `applied` hash names (`run`) the process on which the
-- journal's ends were last known to be applied to the shard; while the
-- process serving the shard is another, the shard hands nothing out (a
-- node re-applies the journal's ends, then names the new process).
local function server_run()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
end

local function loss_fenced(applied_key)
  return redis.call('HGET', applied_key, 'run') ~= server_run()
end
