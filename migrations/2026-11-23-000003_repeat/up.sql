-- Recurring messages: the series (JSON, NULL: not recurring), and the
-- occurrence the message is at with that occurrence's due time by the
-- series (due_time moves with retries; occurrence_time does not).
ALTER TABLE message ADD COLUMN repeat_spec VARCHAR(512) NULL;
ALTER TABLE message ADD COLUMN occurrence INTEGER NULL;
ALTER TABLE message ADD COLUMN occurrence_time BIGINT NULL;
