package io.delayq.client;

import java.util.HashMap;
import java.util.Map;
import java.util.Optional;

/**
 * The stable error codes of delayq's API: the {@code error} field of every error answer,
 * for a client to branch on ({@link ApiException#errorCode()}).
 *
 * <p>The server's codes (its OpenAPI document lists them as the {@code ErrorCode} schema),
 * then the two that the shipped nginx answers itself: {@link #NO_ANSWER} (504, the node did
 * not answer in time) and {@link #NO_NODE} (502, no node to send it to). Data only: a code
 * this list does not know is still carried as text by {@link ApiException#code()}.
 */
public enum ErrorCode {
    // The server's own.
    BIZ_KEY_TAKEN("biz_key_taken"),
    BODY_TOO_LARGE("body_too_large"),
    FORBIDDEN("forbidden"),
    HTTPS_REQUIRED("https_required"),
    INTERNAL("internal"),
    INVALID_BATCH("invalid_batch"),
    INVALID_BIZ_KEY("invalid_biz_key"),
    INVALID_BODY("invalid_body"),
    INVALID_CANCEL("invalid_cancel"),
    INVALID_CONTENT_TYPE("invalid_content_type"),
    INVALID_DELAY("invalid_delay"),
    INVALID_FIELD("invalid_field"),
    INVALID_GROUP("invalid_group"),
    INVALID_ID("invalid_id"),
    INVALID_IDS("invalid_ids"),
    INVALID_JSON("invalid_json"),
    INVALID_MAX_ATTEMPTS("invalid_max_attempts"),
    INVALID_MESSAGE("invalid_message"),
    INVALID_PARAMETER("invalid_parameter"),
    INVALID_PATH("invalid_path"),
    INVALID_PRIORITY("invalid_priority"),
    INVALID_RECEIPT("invalid_receipt"),
    INVALID_REPEAT("invalid_repeat"),
    INVALID_RETRY("invalid_retry"),
    INVALID_SHARD("invalid_shard"),
    INVALID_TOPIC("invalid_topic"),
    INVALID_TTL("invalid_ttl"),
    JOURNAL_BEHIND("journal_behind"),
    JOURNAL_REFUSED("journal_refused"),
    JOURNAL_UNAVAILABLE("journal_unavailable"),
    MISSING_BODY("missing_body"),
    MISSING_ID("missing_id"),
    MISSING_TO("missing_to"),
    MISSING_TOPIC("missing_topic"),
    NO_SUCH_NODE("no_such_node"),
    NO_SUCH_ROUTE("no_such_route"),
    NO_SUCH_SHARD("no_such_shard"),
    NODE_STALLED("node_stalled"),
    NODE_UNAVAILABLE("node_unavailable"),
    NOT_DEAD("not_dead"),
    NOT_FOUND("not_found"),
    NOT_IN_FLIGHT("not_in_flight"),
    NOT_POSSIBLE("not_possible"),
    PAYLOAD_TOO_LARGE("payload_too_large"),
    REDIS_UNAVAILABLE("redis_unavailable"),
    STALE_DELIVERY("stale_delivery"),
    UNAUTHORIZED("unauthorized"),
    UNKNOWN_FIELD("unknown_field"),
    UNKNOWN_PARAMETER("unknown_parameter"),

    // The proxy's (cluster/nginx-routes.conf): it answers these itself.
    NO_ANSWER("no_answer"),
    NO_NODE("no_node");

    private static final Map<String, ErrorCode> BY_WIRE = new HashMap<>();

    static {
        for (ErrorCode c : values()) {
            BY_WIRE.put(c.wire, c);
        }
    }

    private final String wire;

    ErrorCode(String wire) {
        this.wire = wire;
    }

    /** The code as the server sends it. */
    public String wire() {
        return wire;
    }

    /** The constant for a code on the wire; empty for a code this client does not know. */
    public static Optional<ErrorCode> of(String wire) {
        return Optional.ofNullable(wire == null ? null : BY_WIRE.get(wire));
    }

    @Override
    public String toString() {
        return wire;
    }
}
