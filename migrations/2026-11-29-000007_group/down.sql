ALTER TABLE message DROP COLUMN msg_group;
