package io.delayq.client;

import java.util.List;

/**
 * What {@code POST /get/{topic}} answered: the carried acks' results, then the messages
 * handed out (each now {@code Consuming}; empty when the poll's timeout passed).
 *
 * @param acked how many of the carried acks consumed their message
 * @param results one per carried ack
 * @param messages the deliveries handed out
 */
public record Polled(int acked, List<AckResult> results, List<Delivery> messages) {}
