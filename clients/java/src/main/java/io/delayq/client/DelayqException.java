package io.delayq.client;

/**
 * Base of every exception this client throws: {@link ApiException} when the server answered
 * with an error, {@link TransportException} when no node answered. Unchecked.
 */
public class DelayqException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public DelayqException(String message) {
        super(message);
    }

    public DelayqException(String message, Throwable cause) {
        super(message, cause);
    }
}
