-- Removes the first lines of the journal spill list, only while this
-- holder still has the replay lock: a replay that lost the lock (paused
-- past it, another node replaying since) must not trim a page it did not
-- write.
-- KEYS[1] the lock, KEYS[2] the spill list
-- ARGV[1] the holder, ARGV[2] how many lines to remove
-- Returns 1 when trimmed, 0 when the lock is not this holder's.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('LTRIM', KEYS[2], ARGV[2], -1)
return 1
