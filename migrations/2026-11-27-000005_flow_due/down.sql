ALTER TABLE message_flow DROP COLUMN due_time;
