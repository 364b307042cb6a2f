-- Prepended to the scripts that hand messages out (and to the probe).
-- Redis may lose its last writes and keep its data set marker (a replica
-- promoted before it caught up, an AOF everysec crash, an older snapshot
-- restored): acks and cancels the journal holds would then be undone in
-- Redis. Every such loss has another data set serve the shard: a new
-- Redis process (a new run id), or a promoted replica (a new replication
-- id, also when a process that was master before, then a replica that
-- took another master's data, is promoted again). A shard's `applied`
-- hash names (`run`: run id and replication id) the data set on which the
-- journal's ends were last known to be applied to the shard; while
-- another serves the shard, the shard hands nothing out (a node
-- re-applies the journal's ends, then names the new one).
local function server_run()
  local info = redis.call('INFO', 'server', 'replication')
  return string.match(info, 'run_id:(%x+)') .. '/' .. string.match(info, 'master_replid:(%x+)')
end

local function loss_fenced(applied_key)
  return redis.call('HGET', applied_key, 'run') ~= server_run()
end
