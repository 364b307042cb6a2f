-- Retries and dead letters: a message's attempt limit and retry policy
-- (JSON, NULL: ready again at once after a failed delivery).
ALTER TABLE message ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 16;
ALTER TABLE message ADD COLUMN retry VARCHAR(128) NULL;
-- Dead letters are listed per topic, in id order.
CREATE INDEX ix_message_status_topic_id ON message (status, topic, id);
