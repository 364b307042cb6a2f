-- The Redis horizon: a message due beyond it waits in the journal alone
-- (WaitPut), listed here by due time until its shard's owner schedules it
-- as it comes near. Only those messages have a row: a push due within the
-- horizon writes nothing here (an index over every message's due time
-- would make every push pay for it).
CREATE TABLE message_waiting (
    due_time BIGINT NOT NULL,
    id BIGINT NOT NULL,
    PRIMARY KEY (due_time, id)
);
