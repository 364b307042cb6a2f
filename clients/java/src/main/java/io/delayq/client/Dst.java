package io.delayq.client;

/**
 * Which instant a local wall-clock time ({@link Message.Builder#deliverAtLocal(String, String)},
 * {@link Reschedule#local(String, String, Dst)}) means when its zone's clock jumps over it (a
 * gap) or passes it twice (a fold), as JavaScript's {@code Temporal} names them.
 */
public enum Dst {
    /** Refuse such a time: 400 {@code invalid_delay}, the server's answer naming both readings (the default). */
    REJECT("reject"),
    /**
     * The earlier instant: a fold's first pass; a gap time read with the offset after the jump
     * (Berlin's 02:30 on its spring day is 01:30 +01:00).
     */
    EARLIER("earlier"),
    /**
     * The later instant: a fold's second pass; a gap time read with the offset before the jump
     * (03:30 +02:00).
     */
    LATER("later");

    private final String wire;

    Dst(String wire) {
        this.wire = wire;
    }

    /** The value sent: {@code reject}, {@code earlier} or {@code later}. */
    public String wire() {
        return wire;
    }
}
