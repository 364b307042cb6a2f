DROP TABLE message_waiting;
