// Errors: the server's answer with its stable code, or a transport failure.

/** Base of every error this client throws. */
export class DelayqError extends Error {}

/**
 * The server answered with an error document `{"error", "message"}`.
 * `code` is the stable code to branch on (`not_found`, `stale_delivery`,
 * `invalid_delay`, ...; see ERROR_CODES); `status` the HTTP status.
 */
export class ApiError extends DelayqError {
  constructor(status, code, message) {
    super(`${status} ${code}: ${message}`);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.detail = message;
  }

  /** Whether the same request may succeed later (an outage, not bad input). */
  get retryable() {
    return this.status === 502 || this.status === 503 || this.status === 504;
  }
}

/**
 * No node answered (connection refused, timeout, TLS refusal). For a push
 * without a bizKey the message may or may not have been accepted: the
 * client does not send it again on its own.
 */
export class TransportError extends DelayqError {
  constructor(message, options) {
    super(message, options);
    this.name = 'TransportError';
  }
}
