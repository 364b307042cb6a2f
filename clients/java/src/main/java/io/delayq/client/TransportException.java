package io.delayq.client;

/**
 * No node answered: the connection was refused or reset, the request timed out, TLS was
 * refused (a certificate not signed by a trusted CA).
 *
 * <p>For a push without a bizKey the message may or may not have been accepted: the client
 * does not send it again on its own (send it again with a bizKey to make that safe).
 */
public class TransportException extends DelayqException {
    private static final long serialVersionUID = 1L;

    public TransportException(String message) {
        super(message);
    }

    public TransportException(String message, Throwable cause) {
        super(message, cause);
    }
}
