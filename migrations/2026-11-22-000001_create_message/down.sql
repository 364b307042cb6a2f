DROP TABLE message_flow;
DROP TABLE message;
