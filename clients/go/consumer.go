package delayq

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"
)

// Handler handles one delivery. Returning nil acks the message; an error
// (or a panic) nacks it. ctx ends at the handler's deadline (see
// ConsumerOptions.HandlerTimeout) or when a stop gives up waiting.
type Handler func(ctx context.Context, d Delivery) error

// ConsumerOptions configure a Consumer; zero fields take the defaults.
type ConsumerOptions struct {
	// Loops is the number of long-poll loops (goroutines) run at once,
	// each handling its messages one after another: the concurrency
	// wanted. Default 1.
	Loops int
	// Batch is the most messages a poll takes, 1 … 100. Default 100. A
	// loop asks for 10 (or Batch) at first and fits later polls to the
	// ttl (see Consumer): fewer while handlers are slow.
	Batch int
	// PollWait is how long a poll waits for messages (whole seconds).
	// Default 5 s. A stop waits for the polls in flight to answer.
	PollWait time.Duration
	// HandlerTimeout bounds a handler: its context ends then, and the
	// message is nacked when the handler has not returned. Keep it below
	// the messages' ttl. Whatever it is, a handler's deadline is never
	// later than its delivery's ack deadline (the poll's start plus the
	// ttl, less a tenth of the ttl up to 1 s): past that its ack would be
	// refused, the message being handed to another consumer.
	HandlerTimeout time.Duration
	// NackDelay is the delay of the nack of a failed message; 0 leaves
	// the wait to the message's retry policy.
	NackDelay time.Duration
	// Logf logs what goes wrong (failed polls, handlers, nacks). Default
	// log.Printf.
	Logf func(format string, args ...any)
}

// Consumer runs a Handler on the messages of a topic.
//
// Each loop long-polls POST /get/{topic} for up to Batch messages,
// carrying the acks (with their receipts) of the messages its handler
// finished since its last poll, so a burst costs one round trip per
// batch, not one per message. A handler that returns an error nacks its
// message, which then follows the message's retry policy (or is Dead on
// its last attempt). A poll that fails is tried again after 0.1 s,
// doubling up to 5 s, its acks carried again.
//
// Batches fit the ttl: a loop asks for 10 messages at first, twice as
// many (up to Batch) while a batch takes under an eighth of the
// messages' ttl, and fewer when one takes over a quarter, so a slow
// handler does not hold messages past their ttl. A message still in hand
// when its delivery is about to lapse (the poll's start plus its ttl,
// less a tenth of the ttl up to 1 s) is not started and not nacked: it
// is handed out again after its ttl. Acks held for the next poll go on
// their own (POST /ack) once half the shortest ttl has passed since the
// poll.
//
// Semantics: at least once. A message whose handler finished but whose
// ack did not reach the server (the process stopped, the node failed
// before the next poll) is handed out again after its ttl; a handler
// that takes longer than the ttl may see its message handed to another
// consumer, and its late ack is refused (stale_delivery) and changes
// nothing. Make handlers idempotent, and keep HandlerTimeout below the
// messages' ttl.
type Consumer struct {
	client  *Client
	topic   string
	handler Handler
	o       ConsumerOptions

	mu       sync.Mutex
	started  bool
	stopping chan struct{}
	stopOnce sync.Once
	finished chan struct{}
	// base is the context of the polls, acks and handlers: cancelled only
	// when a stop gives up waiting.
	base  context.Context
	abort context.CancelFunc
}

// NewConsumer makes a consumer of the topic; Start or Run sets it going.
func NewConsumer(client *Client, topic string, h Handler, o ConsumerOptions) (*Consumer, error) {
	if client == nil || h == nil || topic == "" {
		return nil, errors.New("delayq: a consumer needs a client, a topic and a handler")
	}
	if o.Loops == 0 {
		o.Loops = 1
	}
	if o.Batch == 0 {
		o.Batch = 100
	}
	if o.PollWait == 0 {
		o.PollWait = 5 * time.Second
	}
	if o.Loops < 1 || o.Batch < 1 || o.Batch > 100 || o.PollWait < 0 || o.HandlerTimeout < 0 || o.NackDelay < 0 {
		return nil, errors.New("delayq: Loops must be at least 1, Batch 1 to 100, and the durations not negative")
	}
	if o.Logf == nil {
		o.Logf = log.Printf
	}
	return &Consumer{
		client: client, topic: topic, handler: h, o: o,
		stopping: make(chan struct{}), finished: make(chan struct{}),
	}, nil
}

// Start sets the loops going in goroutines of their own.
func (c *Consumer) Start() error { return c.start(context.Background()) }

func (c *Consumer) start(parent context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("delayq: the consumer was started already")
	}
	c.started = true
	c.base, c.abort = context.WithCancel(detached{parent})
	var wg sync.WaitGroup
	for n := 0; n < c.o.Loops; n++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.loop()
		}()
	}
	go func() {
		wg.Wait()
		c.abort()
		close(c.finished)
	}()
	return nil
}

// Stop stops gracefully: no new poll; the messages in hand are handled
// and their acks sent (POST /ack, as no poll follows to carry them). It
// returns once every loop is done, or when ctx ends first: then the
// polls and handlers still running are cancelled, and ctx's error
// returned (their messages come back after their ttl).
func (c *Consumer) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() { close(c.stopping) })
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-c.finished:
		return nil
	case <-ctx.Done():
		c.abort()
		return ctx.Err()
	}
}

// Run runs the consumer until ctx is done or Stop is called, then stops
// gracefully (as Stop with no time limit) and returns nil. The handlers'
// contexts carry ctx's values but not its end: a message in hand is
// finished.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return c.Stop(context.Background())
	case <-c.finished:
		return nil
	}
}

func (c *Consumer) stopped() bool {
	select {
	case <-c.stopping:
		return true
	default:
		return false
	}
}

// firstBatch is what a loop's first poll asks for (or Batch, if less).
const firstBatch = 10

// nextBatch is the next poll's count after a batch of got messages (of
// want asked for) whose handling took spent, ttl being the batch's
// shortest: as many as fit a quarter of the ttl when the batch took
// longer than that (at least 1, at most want), twice want (up to most)
// when a full batch took under an eighth of it, want otherwise.
func nextBatch(want, got int, spent, ttl time.Duration, most int) int {
	if spent > ttl/4 {
		n := int(float64(got) * float64(ttl/4) / float64(spent))
		if n > want {
			n = want
		}
		if n < 1 {
			n = 1
		}
		return n
	}
	if got >= want && spent < ttl/8 {
		if want*2 > most {
			return most
		}
		return want * 2
	}
	return want
}

func (c *Consumer) loop() {
	var done []Delivery
	backoff := 100 * time.Millisecond
	want := firstBatch
	if c.o.Batch < want {
		want = c.o.Batch
	}
	for {
		if c.stopped() {
			// The last acks, with no poll to carry them.
			c.ackAlone(done)
			return
		}
		sent := time.Now()
		res, err := c.client.Poll(c.base, c.topic, PollRequest{Count: want, Wait: c.o.PollWait, Ack: done})
		if err != nil {
			if c.base.Err() != nil {
				return // the stop gave up waiting
			}
			var apiErr *APIError
			if errors.As(err, &apiErr) && !apiErr.Retryable() && len(done) > 0 {
				// The poll was refused (bad input, not an outage): its acks
				// go alone, lest they keep the polls refused.
				c.ackAlone(done)
				done = nil
			}
			c.o.Logf("delayq: poll of %s failed (%v); trying again in %v", c.topic, err, backoff)
			t := time.NewTimer(backoff)
			select {
			case <-c.stopping:
				t.Stop()
			case <-t.C:
			}
			if backoff *= 2; backoff > 5*time.Second {
				backoff = 5 * time.Second
			}
			continue
		}
		backoff = 100 * time.Millisecond
		for _, r := range res.Results {
			if r.Result != "consumed" {
				c.o.Logf("delayq: ack of %s: %s (status %s)", r.ID, r.Result, r.Status)
			}
		}
		done = done[:0]
		if len(res.Messages) == 0 {
			continue
		}
		started := time.Now()
		flush := true
		for _, d := range res.Messages {
			if c.base.Err() != nil {
				return // the stop gave up waiting: these come back after their ttl
			}
			now := time.Now()
			lapse := ackDeadline(sent, d)
			if !now.Before(lapse) {
				// Too late to start: its ack would be refused. Not nacked
				// either (no failure of its own, and no round trip for
				// each of a batch's leftovers): it is handed out again
				// after its ttl.
				c.o.Logf("delayq: message %s not started: its delivery lapses (ttl %v); it is handed out again", d.ID, ttlOf(d))
				continue
			}
			deadline := lapse
			if c.o.HandlerTimeout > 0 && now.Add(c.o.HandlerTimeout).Before(deadline) {
				deadline = now.Add(c.o.HandlerTimeout)
			}
			if err := c.handle(d, deadline); err != nil {
				c.o.Logf("delayq: handler of message %s failed (%v); nacked", d.ID, err)
				c.nack(d)
				continue
			}
			done = append(done, d)
			// Acks held for the next poll must still reach the server in
			// time: past half the shortest ttl, send them now.
			if flush && time.Since(sent) > shortestTTL(done)/2 {
				if flush = c.ackAlone(done); flush {
					done = done[:0]
				}
			}
		}
		want = nextBatch(want, len(res.Messages), time.Since(started), shortestTTL(res.Messages), c.o.Batch)
	}
}

// ackDeadline is d's ack deadline as this process can bound it: the
// poll's start plus the ttl, less a tenth of it up to 1 s. A handler of
// d ends then at the latest (or at HandlerTimeout, when sooner), and
// one not started by then is not started at all.
func ackDeadline(sent time.Time, d Delivery) time.Time {
	ttl := ttlOf(d)
	margin := ttl / 10
	if margin > time.Second {
		margin = time.Second
	}
	return sent.Add(ttl - margin)
}

// ttlOf is d's ttl: 30 s (the server's default) when it has none.
func ttlOf(d Delivery) time.Duration {
	if d.TTL <= 0 {
		return 30 * time.Second
	}
	return time.Duration(d.TTL) * time.Millisecond
}

func shortestTTL(ds []Delivery) time.Duration {
	least := time.Duration(0)
	for _, d := range ds {
		if ttl := ttlOf(d); least == 0 || ttl < least {
			least = ttl
		}
	}
	return least
}

// handle runs the handler under its deadline. A handler that has not
// returned by then counts as failed, whatever it returns later; one still
// running is left to finish in its goroutine (its context ended).
func (c *Consumer) handle(d Delivery, deadline time.Time) error {
	ctx, cancel := context.WithDeadline(c.base, deadline)
	defer cancel()
	result := make(chan error, 1)
	go func() {
		var err error
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("handler panicked: %v", p)
			}
			if err == nil && ctx.Err() != nil {
				err = fmt.Errorf("handler returned after its deadline: %w", ctx.Err())
			}
			result <- err
		}()
		err = c.handler(ctx, d)
	}()
	select {
	case err := <-result:
		return err
	case <-ctx.Done():
		return fmt.Errorf("handler still running at its deadline: %w", ctx.Err())
	}
}

func (c *Consumer) nack(d Delivery) {
	if _, err := c.client.Nack(c.base, d, c.o.NackDelay); err != nil {
		c.o.Logf("delayq: nack of %s not taken (%v); it comes back after its ttl", d.ID, err)
	}
}

// ackAlone sends acks with POST /ack; false when they did not get there.
func (c *Consumer) ackAlone(ds []Delivery) bool {
	if len(ds) == 0 {
		return true
	}
	r, err := c.client.AckBatch(c.base, ds)
	if err != nil {
		c.o.Logf("delayq: %d acks not sent (%v); those messages are handed out again after their ttl", len(ds), err)
		return false
	}
	for _, res := range r.Results {
		if res.Result != "consumed" {
			c.o.Logf("delayq: ack of %s: %s (status %s)", res.ID, res.Result, res.Status)
		}
	}
	return true
}

// detached carries a context's values but not its deadline or end.
type detached struct{ parent context.Context }

func (detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (detached) Done() <-chan struct{}       { return nil }
func (detached) Err() error                  { return nil }
func (d detached) Value(key any) any         { return d.parent.Value(key) }
func (d detached) String() string            { return "delayq.detached" }
