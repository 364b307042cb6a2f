ALTER TABLE message DROP COLUMN occurrence_time;
ALTER TABLE message DROP COLUMN occurrence;
ALTER TABLE message DROP COLUMN repeat_spec;
