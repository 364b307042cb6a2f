-- MySQL/MariaDB form (SQLite: DROP INDEX ix_message_status_due;).
DROP INDEX ix_message_status_due ON message;
