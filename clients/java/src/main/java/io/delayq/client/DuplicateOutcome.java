package io.delayq.client;

/**
 * What a push with {@link OnDuplicate#REPLACE} or {@link OnDuplicate#EXTEND} did to the live
 * message holding its bizKey ({@link Pushed#result()}).
 */
public enum DuplicateOutcome {
    /** It took the push's body, due time and priority. */
    REPLACED("replaced"),
    /** Its due time moved later. */
    EXTENDED("extended"),
    /** The push's time was not later than its own: it was left as it was. */
    NOT_LATER("not_later"),
    /** It was handed to a consumer: left alone (no due time is answered). */
    IN_FLIGHT("in_flight"),
    /** An outcome this version of the client does not know (a newer server's). */
    UNKNOWN("unknown");

    private final String wire;

    DuplicateOutcome(String wire) {
        this.wire = wire;
    }

    /** The name the server sends: {@code replaced}, {@code extended}, ... */
    public String wire() {
        return wire;
    }

    /** The outcome named {@code wire}; null for null, {@link #UNKNOWN} for a name not known. */
    static DuplicateOutcome of(String wire) {
        if (wire == null) {
            return null;
        }
        for (DuplicateOutcome o : values()) {
            if (o != UNKNOWN && o.wire.equals(wire)) {
                return o;
            }
        }
        return UNKNOWN;
    }
}
