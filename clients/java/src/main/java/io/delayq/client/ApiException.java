package io.delayq.client;

import java.util.Map;
import java.util.Optional;

/**
 * The server (or the balancer in front of it) answered with an error document
 * {@code {"error": code, "message": text}}.
 *
 * <p>{@link #code()} is the stable code to branch on ({@code not_found},
 * {@code stale_delivery}, {@code invalid_delay}, ...), also as {@link #errorCode()};
 * {@link #status()} the HTTP status. An answer that was not an error document has the code
 * {@code http_STATUS}.
 */
public class ApiException extends DelayqException {
    private static final long serialVersionUID = 1L;

    private final int status;
    private final String code;
    private final String serverMessage;
    private final transient Map<String, Object> body;

    public ApiException(int status, String code, String message) {
        this(status, code, message, Map.of());
    }

    public ApiException(int status, String code, String message, Map<String, Object> body) {
        super(status + " " + code + ": " + message);
        this.status = status;
        this.code = code;
        this.serverMessage = message;
        this.body = body == null ? Map.of() : body;
    }

    /** The HTTP status. */
    public int status() {
        return status;
    }

    /** The error code as the server sent it. */
    public String code() {
        return code;
    }

    /** The error code as a constant; empty for a code this client does not know. */
    public Optional<ErrorCode> errorCode() {
        return ErrorCode.of(code);
    }

    /** The server's sentence about it, for people. */
    public String serverMessage() {
        return serverMessage;
    }

    /**
     * The whole error document, with the fields some errors carry beside the code (a
     * {@code biz_key_taken}'s {@code holder}, a {@code not_dead}'s {@code status}).
     */
    public Map<String, Object> body() {
        return body;
    }

    /** Whether the same request may succeed later: an outage (502, 503, 504), not bad input. */
    public boolean retryable() {
        return status == 502 || status == 503 || status == 504;
    }
}
