-- Take a shard past a stored epoch that no live owner holds: the shard's
-- owner in ZooKeeper was refused as stale although ZooKeeper says it owns
-- the shard (the ensemble was rebuilt or restored from an older snapshot,
-- so its new zxids are below the epochs Redis keeps). The caller checked
-- its ownership with a ZooKeeper round trip and holds a fresh scan permit;
-- the raise happens only if the stored epoch is still the one it was
-- refused by, so a takeover that reaches Redis late (after another owner
-- moved the epoch on) changes nothing.
-- KEYS[1] the shard's epoch
-- ARGV[1] the stored epoch the caller was refused by, ARGV[2] its new epoch
-- (above ARGV[1])
-- Returns { 1, epoch } when the epoch is now ARGV[2], else { 0, stored }.
local stored = redis.call('GET', KEYS[1]) or '0'
if tonumber(stored) == tonumber(ARGV[1]) and tonumber(ARGV[2]) > tonumber(stored) then
  redis.call('SET', KEYS[1], ARGV[2])
  return { 1, ARGV[2] }
end
return { 0, stored }
