-- MySQL/MariaDB form (SQLite: DROP INDEX ix_message_status_topic_id;).
DROP INDEX ix_message_status_topic_id ON message;
ALTER TABLE message DROP COLUMN retry;
ALTER TABLE message DROP COLUMN max_attempts;
