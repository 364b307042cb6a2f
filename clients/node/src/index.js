// delayq's Node client: the producer's routes (Client), the consumer loop
// (Consumer), typed errors and the server's error codes.
export { Client, message, outboxRow } from './client.js';
export { Consumer } from './consumer.js';
export { ApiError, DelayqError, TransportError } from './errors.js';
export { ERROR_CODES } from './codes.js';
