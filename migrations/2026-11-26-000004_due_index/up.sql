-- The Redis horizon: messages due beyond it wait in the journal (WaitPut)
-- and each shard's owner reads them in due-time order as they come near.
CREATE INDEX ix_message_status_due ON message (status, due_time, id);
