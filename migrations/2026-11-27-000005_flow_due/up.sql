-- A flow row that set a due time (a reschedule, a retry's wait, a
-- recurring message's next occurrence) keeps it, so a message's history
-- says where each move sent it. NULL for every other change.
ALTER TABLE message_flow ADD COLUMN due_time BIGINT NULL;
