package io.delayq.client;

import java.util.Map;

/**
 * A pushed message.
 *
 * @param id the message's id (a 64-bit Snowflake as decimal text)
 * @param duplicate a live message of the topic held the bizKey: {@code id} is that message's,
 *     and nothing was pushed
 * @param result for a duplicate pushed with {@link OnDuplicate#REPLACE} or
 *     {@link OnDuplicate#EXTEND}: what it did to the live message; null otherwise
 * @param dueTime with {@code result}: the live message's due time now (epoch ms); null when it
 *     is in flight, or without {@code result}
 */
public record Pushed(String id, boolean duplicate, DuplicateOutcome result, Long dueTime) {
    /** A push's answer without an {@code onDuplicate} outcome. */
    public Pushed(String id, boolean duplicate) {
        this(id, duplicate, null, null);
    }

    /** From {@code update}'s {@code result} and {@code dueTime}: a push's answer, or a batch's update. */
    static Pushed of(String id, boolean duplicate, Map<String, Object> update) {
        Object due = update.get("dueTime");
        return new Pushed(id, duplicate, DuplicateOutcome.of(Json.string(update, "result")),
                due instanceof Number n ? n.longValue() : null);
    }
}
