-- Ordered groups: the group a message belongs to within its topic (NULL:
-- none). Only read back with the row (a restore brings the group to
-- Redis, where the turn of each group is kept); nothing searches by it.
ALTER TABLE message ADD COLUMN msg_group VARCHAR(256) NULL;
