// The Go client against a real delayq server and a real Redis.
//
// TestMain starts a redis-server and `delayq serve` (SQLite journal) of
// its own on free ports; DELAYQ_BIN names the binary (default: the
// checkout's target/debug/delayq). Some tests start servers of their own
// (a node restarted, a node serving HTTPS). The failover rules are tested
// against stand-in nodes (httptest) whose answers the tests choose.
//
//	DELAYQ_BIN=/path/to/delayq go test ./...
package delayq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	delayq "github.com/delayq/delayq/clients/go"
)

// srv is the node most tests share; each test uses topics of its own.
var srv *server

func TestMain(m *testing.M) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		fmt.Fprintln(os.Stderr, "the tests need redis-server on PATH:", err)
		os.Exit(1)
	}
	if _, err := os.Stat(delayqBin()); err != nil {
		fmt.Fprintf(os.Stderr, "the tests need the delayq binary (DELAYQ_BIN, default ../../target/debug/delayq): %v\n", err)
		os.Exit(1)
	}
	var err error
	if srv, err = startServer("", "", ""); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	srv.close()
	os.Exit(code)
}

func newClient(t *testing.T, urls []string, opts ...delayq.Option) *delayq.Client {
	t.Helper()
	c, err := delayq.New(urls, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func apiError(t *testing.T, err error) *delayq.APIError {
	t.Helper()
	var e *delayq.APIError
	if !errors.As(err, &e) {
		t.Fatalf("want an *APIError, got %T %v", err, err)
	}
	return e
}

// eventually waits up to d for cond.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

func TestPushConsumeAckNoneEarlyNoneTwice(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	c := newClient(t, []string{srv.url}, delayq.WithTimeout(5*time.Second))
	const topic, n = "go-burst", 200
	delay := func(i int) time.Duration { return time.Duration(200+(i%5)*100) * time.Millisecond }
	msgs := make([]delayq.Message, n)
	for i := range msgs {
		msgs[i] = delayq.Message{Topic: topic, Body: fmt.Sprint(i), Delay: delay(i)}
	}
	pushedAt := time.Now()
	pushed, err := c.PushBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(pushed) != n {
		t.Fatalf("%d ids for %d messages", len(pushed), n)
	}
	var (
		mu    sync.Mutex
		seen  = map[string]time.Time{}
		twice []string
		all   = make(chan struct{})
	)
	consumer, err := delayq.NewConsumer(c, topic, func(ctx context.Context, d delayq.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := seen[d.ID]; ok {
			twice = append(twice, d.ID)
			return nil
		}
		seen[d.ID] = time.Now()
		if len(seen) == n {
			close(all)
		}
		return nil
	}, delayq.ConsumerOptions{Loops: 2, PollWait: time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if err := consumer.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-all:
	case <-time.After(30 * time.Second):
	}
	if err := consumer.Stop(testContext(t, 10*time.Second)); err != nil {
		t.Fatal("stop:", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Fatalf("%d of %d delivered", len(seen), n)
	}
	if len(twice) > 0 {
		t.Errorf("handed out twice: %v", twice)
	}
	for i, p := range pushed {
		if at, due := seen[p.ID], pushedAt.Add(delay(i)); at.Before(due) {
			t.Errorf("message %s delivered %v early", p.ID, due.Sub(at))
		}
	}
	// Every ack was carried (or sent at the stop): each message ends Consumed.
	var notConsumed []string
	eventually(10*time.Second, func() bool {
		notConsumed = notConsumed[:0]
		for _, p := range pushed {
			info, err := c.Message(ctx, p.ID)
			if err != nil || info.Message.Status != delayq.StatusConsumed {
				notConsumed = append(notConsumed, p.ID)
			}
		}
		return len(notConsumed) == 0
	})
	if len(notConsumed) > 0 {
		t.Errorf("%d messages not Consumed, such as %s", len(notConsumed), notConsumed[0])
	}
}

func TestAStaleReceiptIsRefused(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	c := newClient(t, []string{srv.url}, delayq.WithTimeout(5*time.Second))
	if _, err := c.Push(ctx, delayq.Message{Topic: "go-stale", Body: "x", TTL: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	poll := func() delayq.Delivery {
		t.Helper()
		r, err := c.Poll(ctx, "go-stale", delayq.PollRequest{Count: 1, Wait: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Messages) != 1 {
			t.Fatalf("%d messages handed out", len(r.Messages))
		}
		return r.Messages[0]
	}
	first := poll()
	time.Sleep(500 * time.Millisecond)
	second := poll()
	if first.ID != second.ID || first.Receipt == second.Receipt {
		t.Fatalf("want the same message again with another receipt: %+v, %+v", first, second)
	}
	if second.Attempts != 2 {
		t.Errorf("attempts %d, want 2", second.Attempts)
	}
	_, err := c.Ack(ctx, first)
	if e := apiError(t, err); e.Status != 409 || e.Code != delayq.CodeStaleDelivery {
		t.Fatalf("late ack: %v", e)
	}
	r, err := c.Ack(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != delayq.StatusConsumed {
		t.Fatalf("ack: %+v", r)
	}
}

func TestAFailingHandlerNacksAndTheRetryComesBack(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	c := newClient(t, []string{srv.url}, delayq.WithTimeout(5*time.Second))
	if _, err := c.Push(ctx, delayq.Message{Topic: "go-nack", Body: "x", Retry: &delayq.Retry{Delay: 100 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var calls []int
	consumer, err := delayq.NewConsumer(c, "go-nack", func(ctx context.Context, d delayq.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, d.Attempts)
		if len(calls) == 1 {
			return errors.New("the first try fails")
		}
		return nil
	}, delayq.ConsumerOptions{PollWait: time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	_ = consumer.Start()
	eventually(20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(calls) >= 2 })
	if err := consumer.Stop(testContext(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(calls) != "[1 2]" {
		t.Fatalf("attempts seen %v, want [1 2]", calls)
	}
}

func TestAHandlerPastItsTimeoutIsNacked(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	c := newClient(t, []string{srv.url}, delayq.WithTimeout(5*time.Second))
	if _, err := c.Push(ctx, delayq.Message{Topic: "go-slow", Body: "x", TTL: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var calls []int
	var sawDeadline bool
	consumer, err := delayq.NewConsumer(c, "go-slow", func(ctx context.Context, d delayq.Delivery) error {
		mu.Lock()
		calls = append(calls, d.Attempts)
		first := len(calls) == 1
		mu.Unlock()
		if first {
			<-ctx.Done() // far slower than its timeout
			mu.Lock()
			sawDeadline = errors.Is(ctx.Err(), context.DeadlineExceeded)
			mu.Unlock()
		}
		return nil
	}, delayq.ConsumerOptions{PollWait: time.Second, HandlerTimeout: 200 * time.Millisecond, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	_ = consumer.Start()
	// Nacked at its timeout, it is back at once (no retry policy), well
	// before its 20 s ttl.
	eventually(10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(calls) >= 2 })
	if err := consumer.Stop(testContext(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(calls) != "[1 2]" || !sawDeadline {
		t.Fatalf("attempts seen %v (want [1 2]), deadline seen %v", calls, sawDeadline)
	}
}

func TestBatchesFitTheTTLOfASlowHandler(t *testing.T) {
	// 30 messages of 1 s ttl and a 60 ms handler: a whole batch of 30
	// handled in one go would take 1.8 s, past the ttl, and every ack
	// carried after it would come too late (each message handed out
	// twice). Batches that fit the ttl hand each out once.
	ctx := testContext(t, 60*time.Second)
	c := newClient(t, []string{srv.url}, delayq.WithTimeout(5*time.Second))
	const topic, n = "go-slow-batch", 30
	msgs := make([]delayq.Message, n)
	for i := range msgs {
		msgs[i] = delayq.Message{Topic: topic, Body: fmt.Sprint(i), TTL: time.Second}
	}
	pushed, err := c.PushBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	distinct := func() int {
		mu.Lock()
		defer mu.Unlock()
		set := map[string]bool{}
		for _, id := range seen {
			set[id] = true
		}
		return len(set)
	}
	consumer, err := delayq.NewConsumer(c, topic, func(ctx context.Context, d delayq.Delivery) error {
		time.Sleep(60 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, d.ID)
		return nil
	}, delayq.ConsumerOptions{Loops: 2, PollWait: time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if err := consumer.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(30*time.Second, func() bool { return distinct() == n })
	time.Sleep(1500 * time.Millisecond) // a lapsed delivery would come back meanwhile
	if err := consumer.Stop(testContext(t, 10*time.Second)); err != nil {
		t.Fatal("stop:", err)
	}
	mu.Lock()
	got := append([]string(nil), seen...)
	mu.Unlock()
	want := make([]string, 0, n)
	for _, p := range pushed {
		want = append(want, p.ID)
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("each handled once: %d handlings of %d messages (%d distinct)", len(got), n, distinct())
	}
	for _, p := range pushed {
		info, err := c.Message(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if info.Message.Status != delayq.StatusConsumed {
			t.Errorf("message %s is %s", p.ID, info.Message.Status)
		}
	}
}

func TestRunStopsGracefullyAndSendsTheLastAcks(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	c := newClient(t, []string{srv.url}, delayq.WithTimeout(5*time.Second))
	const topic, n = "go-run", 5
	msgs := make([]delayq.Message, n)
	for i := range msgs {
		msgs[i] = delayq.Message{Topic: topic, Body: fmt.Sprint(i)}
	}
	pushed, err := c.PushBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	run, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	handled := 0
	consumer, err := delayq.NewConsumer(c, topic, func(hctx context.Context, d delayq.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if handled++; handled == n {
			stop() // the stop comes while messages are in hand,
			// and Run has stopped the polls when this handler returns
			time.Sleep(200 * time.Millisecond)
		}
		if hctx.Err() != nil {
			return hctx.Err() // the handlers' contexts do not end with Run's
		}
		return nil
	}, delayq.ConsumerOptions{Batch: 10, PollWait: time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if err := consumer.Run(run); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(started); took > 900*time.Millisecond {
		t.Errorf("Run returned after %v: a poll followed the stop", took)
	}
	// No poll followed the last messages: their acks went alone, and were
	// committed before Run returned.
	for _, p := range pushed {
		info, err := c.Message(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if info.Message.Status != delayq.StatusConsumed {
			t.Errorf("message %s is %s", p.ID, info.Message.Status)
		}
	}
	if err := consumer.Run(ctx); err == nil {
		t.Error("a consumer ran twice")
	}
}

func TestCancelRescheduleAndErrorCodes(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	c := newClient(t, []string{srv.url}, delayq.WithTimeout(5*time.Second))
	const topic = "go-manage"
	p, err := c.Push(ctx, delayq.Message{Topic: topic, Body: "x", Delay: 10 * time.Minute, BizKey: "order-1", Priority: 3})
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Push(ctx, delayq.Message{Topic: topic, Body: "y", Delay: 10 * time.Minute, BizKey: "order-1"})
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != p.ID || !again.Duplicate || p.Duplicate {
		t.Fatalf("a repeated bizKey: %+v then %+v", p, again)
	}
	r, err := c.Reschedule(ctx, delayq.RescheduleRequest{IDs: []string{p.ID}, Delay: 15 * time.Minute, Priority: delayq.Ptr(0)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Rescheduled != 1 || len(r.Results) != 1 || r.Results[0].Result != "rescheduled" || r.Results[0].Priority != 0 {
		t.Fatalf("reschedule: %+v", r)
	}
	page, err := c.Search(ctx, topic, delayq.SearchOptions{BizKey: "order-1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 1 || page.Messages[0].ID != p.ID || page.Messages[0].Body != "x" || page.Next != "" {
		t.Fatalf("search: %+v", page)
	}
	info, err := c.Message(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if m := info.Message; m.Status != delayq.StatusDelaying || m.BizKey != "order-1" || m.DueTime != r.Results[0].DueTime || len(info.History) == 0 {
		t.Fatalf("message: %+v", info)
	}
	cancelled, err := c.Cancel(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cancelled.Deleted != 1 || cancelled.Results[0].Result != "deleted" {
		t.Fatalf("cancel: %+v", cancelled)
	}
	_, err = c.CancelBizKey(ctx, topic, "order-1")
	if e := apiError(t, err); e.Status != 404 || e.Code != delayq.CodeNotFound || !delayq.IsCode(err, delayq.CodeNotFound) {
		t.Fatalf("cancel of a free bizKey: %v", e)
	}
	_, err = c.Push(ctx, delayq.Message{Topic: topic, Body: "x", Delay: -time.Millisecond})
	if e := apiError(t, err); e.Status != 400 || e.Code != delayq.CodeInvalidDelay {
		t.Fatalf("a negative delay: %v", e)
	}
	_, err = c.Message(ctx, "1")
	if e := apiError(t, err); e.Status != 404 || e.Code != delayq.CodeNotFound {
		t.Fatalf("an unknown id: %v", e)
	}

	// By ids, and by prefix (counts per outcome).
	var ids []string
	for i := 0; i < 3; i++ {
		p, err := c.Push(ctx, delayq.Message{Topic: topic, Body: "z", Delay: time.Hour, BizKey: fmt.Sprintf("pre-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	moved, err := c.Reschedule(ctx, delayq.RescheduleRequest{Topic: topic, BizKeyPrefix: "pre-", DeliverAt: time.Now().Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if moved.Matched != 3 || moved.Counts["rescheduled"] != 3 {
		t.Fatalf("reschedule by prefix: %+v", moved)
	}
	byIDs, err := c.CancelIDs(ctx, ids[:1])
	if err != nil {
		t.Fatal(err)
	}
	if byIDs.Deleted != 1 {
		t.Fatalf("cancel by ids: %+v", byIDs)
	}
	byPrefix, err := c.CancelPrefix(ctx, topic, "pre-")
	if err != nil {
		t.Fatal(err)
	}
	if byPrefix.Matched != 2 || byPrefix.Counts["deleted"] != 2 {
		t.Fatalf("cancel by prefix: %+v", byPrefix)
	}

	topics, err := c.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tp := range topics.Topics {
		found = found || tp.Topic == topic
	}
	if !found {
		t.Fatalf("%s not among the topics: %+v", topic, topics)
	}
	paused, err := c.Pause(ctx, topic)
	if err != nil || !paused.Paused || !paused.Changed || !paused.Known {
		t.Fatalf("pause: %+v %v", paused, err)
	}
	resumed, err := c.Resume(ctx, topic)
	if err != nil || resumed.Paused || !resumed.Changed {
		t.Fatalf("resume: %+v %v", resumed, err)
	}
}

func TestOrderedGroups(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	c := newClient(t, []string{srv.url}, delayq.WithTimeout(10*time.Second))
	a1, err := c.Push(ctx, delayq.Message{Topic: "go-groups", Body: "a1", Group: "a"})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := c.Push(ctx, delayq.Message{Topic: "go-groups", Body: "a2", Group: "a", Delay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Push(ctx, delayq.Message{Topic: "go-groups", Body: "free", Delay: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	var got []delayq.Delivery
	for len(got) < 2 {
		r, err := c.Poll(ctx, "go-groups", delayq.PollRequest{Count: 10, Wait: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Messages...)
	}
	seen := map[string]string{}
	for _, d := range got {
		seen[d.Body] = d.Group
	}
	if len(got) != 2 || seen["a1"] != "a" || seen["free"] != "" {
		t.Fatalf("one of group a at a time: %+v", got)
	}
	if r, err := c.Poll(ctx, "go-groups", delayq.PollRequest{Count: 10, Wait: time.Second}); err != nil || len(r.Messages) != 0 {
		t.Fatalf("a2 waits behind a1: %+v %v", r, err)
	}
	for _, d := range got {
		if _, err := c.Ack(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.Poll(ctx, "go-groups", delayq.PollRequest{Wait: 5 * time.Second})
	if err != nil || len(r.Messages) != 1 || r.Messages[0].ID != a2.ID || a2.ID == a1.ID {
		t.Fatalf("a2 after a1's ack: %+v %v", r, err)
	}
	if _, err := c.Ack(ctx, r.Messages[0]); err != nil {
		t.Fatal(err)
	}
	_, err = c.Push(ctx, delayq.Message{Topic: "go-groups", Body: "x", Group: strings.Repeat("g", 257)})
	if e := apiError(t, err); e.Status != 400 || e.Code != delayq.CodeInvalidGroup {
		t.Fatalf("a bad group: %+v", e)
	}
}

func TestForecast(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	c := newClient(t, []string{srv.url}, delayq.WithTimeout(5*time.Second))
	if _, err := c.Push(ctx, delayq.Message{Topic: "go-forecast", Body: "x", Delay: 30 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	f, err := c.Forecast(ctx, "go-forecast", "20m", "1h")
	if err != nil {
		t.Fatal(err)
	}
	var counts []uint64
	for _, b := range f.Buckets {
		counts = append(counts, b.Count)
	}
	if fmt.Sprint(counts) != "[0 1 0]" || !f.Exact || f.Topic == nil || *f.Topic != "go-forecast" {
		t.Fatalf("forecast: %v %+v", counts, f)
	}
	all, err := c.Forecast(ctx, "", "1h", "2h")
	if err != nil || len(all.Buckets) != 2 || all.Topic != nil {
		t.Fatalf("every topic: %+v %v", all, err)
	}
	_, err = c.Forecast(ctx, "", "0s", "")
	if e := apiError(t, err); e.Status != 400 || e.Code != "invalid_parameter" {
		t.Fatalf("a bad bucket: %+v", e)
	}
}

func TestLocalWallClockTimes(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	c := newClient(t, []string{srv.url}, delayq.WithTimeout(5*time.Second))
	const topic = "go-local"
	// Berlin's clock jumps from 02:00 to 03:00 on 2027-03-28: 02:30 does
	// not exist, and is refused unless DST says which instant it means.
	gap := delayq.Message{Topic: topic, Body: "x", DeliverAtLocal: "2027-03-28T02:30:00", TZ: "Europe/Berlin"}
	_, err := c.Push(ctx, gap)
	if e := apiError(t, err); e.Status != 400 || e.Code != delayq.CodeInvalidDelay {
		t.Fatalf("a time in a gap without DST: %v", e)
	}
	gap.DST = delayq.DSTLater
	p, err := c.Push(ctx, gap)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Message(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	// 03:30 +02:00.
	if info.Message.DueTime != 1806197400000 {
		t.Fatalf("dueTime %d, want 1806197400000 (03:30 +02:00)", info.Message.DueTime)
	}
	// 2027-10-31 02:30 happens twice in Berlin; DSTEarlier is its first
	// pass, 02:30 +02:00.
	r, err := c.Reschedule(ctx, delayq.RescheduleRequest{IDs: []string{p.ID},
		DeliverAtLocal: "2027-10-31T02:30:00", TZ: "Europe/Berlin", DST: delayq.DSTEarlier})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Results) != 1 || r.Results[0].Result != "rescheduled" || r.Results[0].DueTime != 1824942600000 {
		t.Fatalf("reschedule to a fold's first pass: %+v, want dueTime 1824942600000", r)
	}
	if _, err := c.Cancel(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
}

func TestOnDuplicateReplaceAndExtend(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	c := newClient(t, []string{srv.url}, delayq.WithTimeout(5*time.Second))
	const topic = "go-debounce"
	first, err := c.Push(ctx, delayq.Message{Topic: topic, Body: "v1", Delay: time.Minute, BizKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Duplicate || first.Result != "" || first.DueTime != 0 {
		t.Fatalf("a first push: %+v", first)
	}
	asked := time.Now().UnixMilli()
	again, err := c.Push(ctx, delayq.Message{Topic: topic, Body: "v2", Delay: 500 * time.Millisecond, BizKey: "k",
		OnDuplicate: delayq.OnDuplicateReplace})
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID || !again.Duplicate || again.Result != delayq.DuplicateReplaced {
		t.Fatalf("a replace: %+v, want id %s duplicate replaced", again, first.ID)
	}
	if again.DueTime < asked+500 || again.DueTime > time.Now().UnixMilli()+500 {
		t.Fatalf("a replace's dueTime %d, want 500 ms after %d", again.DueTime, asked)
	}
	// The live message now holds v2 under its first id, due in 500 ms.
	got, err := c.Poll(ctx, topic, delayq.PollRequest{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Messages) != 1 || got.Messages[0].ID != first.ID || got.Messages[0].Body != "v2" {
		t.Fatalf("poll after a replace: %+v, want %s with v2", got.Messages, first.ID)
	}
	if now := time.Now().UnixMilli(); now < again.DueTime {
		t.Fatalf("delivered at %d, before its dueTime %d", now, again.DueTime)
	}
	if acked, err := c.Ack(ctx, got.Messages[0]); err != nil || acked.Status != delayq.StatusConsumed {
		t.Fatalf("ack: %+v %v", acked, err)
	}
	// Extend to a time sooner than the live message's: left as it was.
	held, err := c.Push(ctx, delayq.Message{Topic: topic, Body: "e", Delay: time.Minute, BizKey: "k-extend"})
	if err != nil {
		t.Fatal(err)
	}
	sooner := delayq.Message{Topic: topic, Body: "e", Delay: 100 * time.Millisecond, BizKey: "k-extend",
		OnDuplicate: delayq.OnDuplicateExtend}
	kept, err := c.Push(ctx, sooner)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Message(ctx, held.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := delayq.Pushed{ID: held.ID, Duplicate: true, Result: delayq.DuplicateNotLater, DueTime: info.Message.DueTime}
	if kept != want {
		t.Fatalf("an extend to a sooner time: %+v, want %+v", kept, want)
	}
	// A batch answers the same from its updates.
	batch, err := c.PushBatch(ctx, []delayq.Message{sooner})
	if err != nil {
		t.Fatal(err)
	}
	if len(batch) != 1 || batch[0] != want {
		t.Fatalf("a batch's extend to a sooner time: %+v, want %+v", batch, want)
	}
	// Without a bizKey there is no live message to act on: refused.
	_, err = c.Push(ctx, delayq.Message{Topic: topic, Body: "x", OnDuplicate: delayq.OnDuplicateReplace})
	if e := apiError(t, err); e.Status != 400 || e.Code != delayq.CodeInvalidField {
		t.Fatalf("onDuplicate without a bizKey: %v", e)
	}
	if _, err := c.Cancel(ctx, held.ID); err != nil {
		t.Fatal(err)
	}
}

func TestAnOutboxRowIsWhatPushSends(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	m := delayq.Message{Topic: "go-outbox", Body: `order "42" <é>`, Delay: 10 * time.Minute, BizKey: "order-42",
		Priority: 3, TTL: 20 * time.Second, MaxAttempts: 4, Retry: &delayq.Retry{Delay: time.Second},
		OnDuplicate: delayq.OnDuplicateKeep}
	row, err := delayq.OutboxRow(m)
	if err != nil {
		t.Fatal(err)
	}
	// The row parses as the JSON of the body Push sends for the message.
	n := standIn(t, answer(200, `{"id":"7"}`))
	if _, err := newClient(t, []string{n.URL}).Push(ctx, m); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	sent := n.bodies[0]
	n.mu.Unlock()
	var fromRow, fromPush any
	if err := json.Unmarshal([]byte(row), &fromRow); err != nil {
		t.Fatalf("the row %s: %v", row, err)
	}
	if err := json.Unmarshal([]byte(sent), &fromPush); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromRow, fromPush) {
		t.Fatalf("the row %s, push sent %s", row, sent)
	}
	if plain, err := delayq.OutboxRow(delayq.Message{Topic: "go-outbox", Body: "x"}); err != nil || plain != `{"topic":"go-outbox","body":"x"}` {
		t.Fatalf("a plain row: %s %v", plain, err)
	}
	// The server refuses replace and extend in an outbox row: so does the client.
	for _, refused := range []string{delayq.OnDuplicateReplace, delayq.OnDuplicateExtend} {
		r, err := delayq.OutboxRow(delayq.Message{Topic: "go-outbox", Body: "x", BizKey: "k", OnDuplicate: refused})
		if !errors.Is(err, delayq.ErrOutboxOnDuplicate) || r != "" {
			t.Fatalf("onDuplicate %s: %q %v, want ErrOutboxOnDuplicate", refused, r, err)
		}
	}
	// The row's text, as is, is a message POST /push takes.
	resp, err := http.Post(srv.url+"/push", "application/json", strings.NewReader(row))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var pushed struct {
		ID string `json:"id"`
	}
	reply, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || json.Unmarshal(reply, &pushed) != nil || pushed.ID == "" {
		t.Fatalf("POST /push of the row: %d %s", resp.StatusCode, reply)
	}
	c := newClient(t, []string{srv.url}, delayq.WithTimeout(5*time.Second))
	info, err := c.Message(ctx, pushed.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v := info.Message; v.Topic != m.Topic || v.Body != m.Body || v.BizKey != m.BizKey || v.Priority != 3 || v.MaxAttempts != 4 {
		t.Fatalf("the pushed row: %+v", v)
	}
	if _, err := c.Cancel(ctx, pushed.ID); err != nil {
		t.Fatal(err)
	}
}

func TestADeadLetterIsRequeued(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	c := newClient(t, []string{srv.url}, delayq.WithTimeout(5*time.Second))
	const topic = "go-dead"
	p, err := c.Push(ctx, delayq.Message{Topic: topic, Body: "x", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Poll(ctx, topic, delayq.PollRequest{Wait: 5 * time.Second})
	if err != nil || len(r.Messages) != 1 {
		t.Fatalf("poll: %+v %v", r, err)
	}
	nacked, err := c.Nack(ctx, r.Messages[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	if nacked.Result != "dead" || nacked.Status != delayq.StatusDead {
		t.Fatalf("nack on the last attempt: %+v", nacked)
	}
	var dead *delayq.DeadPage
	eventually(5*time.Second, func() bool {
		dead, err = c.Dead(ctx, topic, delayq.PageOptions{Limit: 10})
		return err == nil && len(dead.Messages) == 1
	})
	if err != nil || len(dead.Messages) != 1 || dead.Messages[0].ID != p.ID || len(dead.Messages[0].History) == 0 {
		t.Fatalf("dead letters: %+v %v", dead, err)
	}
	requeued, err := c.Requeue(ctx, p.ID)
	if err != nil || requeued.Result != "requeued" {
		t.Fatalf("requeue: %+v %v", requeued, err)
	}
	r, err = c.Poll(ctx, topic, delayq.PollRequest{Wait: 5 * time.Second})
	if err != nil || len(r.Messages) != 1 || r.Messages[0].ID != p.ID || r.Messages[0].Attempts != 1 {
		t.Fatalf("poll after the requeue: %+v %v", r, err)
	}
	// The poll that follows carries the ack.
	r, err = c.Poll(ctx, topic, delayq.PollRequest{Ack: r.Messages})
	if err != nil || r.Acked != 1 || r.Results[0].Result != "consumed" {
		t.Fatalf("carried ack: %+v %v", r, err)
	}
	_, err = c.Requeue(ctx, p.ID)
	if e := apiError(t, err); e.Status != 409 || e.Code != delayq.CodeNotDead {
		t.Fatalf("requeue of a consumed message: %v", e)
	}
}

func TestASecondURLServesWhenTheFirstDoesNotAnswer(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	dead := fmt.Sprintf("http://127.0.0.1:%d", freePort())
	c := newClient(t, []string{dead, srv.url}, delayq.WithTimeout(2*time.Second))
	p, err := c.Push(ctx, delayq.Message{Topic: "go-failover", Body: "x", BizKey: "k-1"})
	if err != nil || p.ID == "" {
		t.Fatalf("push with a bizKey: %+v %v", p, err)
	}
	// Without a bizKey a push is not sent twice: the error says so.
	c = newClient(t, []string{dead, srv.url}, delayq.WithTimeout(2*time.Second))
	_, err = c.Push(ctx, delayq.Message{Topic: "go-failover", Body: "y"})
	var te *delayq.TransportError
	if !errors.As(err, &te) || te.Node != dead {
		t.Fatalf("want a *TransportError from %s, got %T %v", dead, err, err)
	}
	// Reads go on to the next node.
	if _, err := c.Topics(ctx); err != nil {
		t.Fatal(err)
	}
}

// node is a stand-in node: it counts its requests and answers as told.
type node struct {
	*httptest.Server
	hits     atomic.Int32
	mu       sync.Mutex
	requests []*http.Request
	bodies   []string
}

func standIn(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *node {
	n := &node{}
	n.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		n.mu.Lock()
		n.requests = append(n.requests, r)
		n.bodies = append(n.bodies, string(body))
		n.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(n.Close)
	return n
}

func answer(status int, body string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func hangUp(w http.ResponseWriter, r *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

func TestTheNodesAreTriedByTheRules(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	good := standIn(t, answer(200, `{"id":"7"}`))
	push := func(first *node, bizKey string) error {
		c := newClient(t, []string{first.URL, good.URL}, delayq.WithTimeout(300*time.Millisecond))
		_, err := c.Push(ctx, delayq.Message{Topic: "t", Body: "x", BizKey: bizKey})
		return err
	}
	cases := []struct {
		name    string
		first   func(http.ResponseWriter, *http.Request)
		bizKey  string
		next    bool   // the second node is asked
		errCode string // the error, when not
	}{
		{"stalled", answer(503, `{"error":"node_stalled","message":"resumed"}`), "", true, ""},
		{"unavailable", answer(503, `{"error":"node_unavailable","message":"no lease"}`), "", true, ""},
		{"504 with a bizKey", answer(504, `{"error":"no_answer","message":"timeout"}`), "k", true, ""},
		{"504 without", answer(504, `{"error":"no_answer","message":"timeout"}`), "", false, delayq.CodeNoAnswer},
		{"502 page without", answer(502, `<html>bad gateway</html>`), "", false, "http_502"},
		{"502 page with a bizKey", answer(502, `<html>bad gateway</html>`), "k", true, ""},
		{"redis down", answer(503, `{"error":"redis_unavailable","message":"down"}`), "k", false, delayq.CodeRedisUnavailable},
		{"bad input", answer(400, `{"error":"invalid_topic","message":"no"}`), "k", false, delayq.CodeInvalidTopic},
		{"hang-up with a bizKey", hangUp, "k", true, ""},
		{"hang-up without", hangUp, "", false, "transport"},
		{"frozen with a bizKey", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, "k", true, ""},
		{"frozen without", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, "", false, "transport"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			first := standIn(t, tc.first)
			before := good.hits.Load()
			err := push(first, tc.bizKey)
			asked := good.hits.Load() > before
			if first.hits.Load() != 1 || asked != tc.next {
				t.Fatalf("first node asked %d times, second asked: %v (want %v); %v", first.hits.Load(), asked, tc.next, err)
			}
			switch {
			case tc.next && err != nil:
				t.Fatal(err)
			case tc.errCode == "transport":
				var te *delayq.TransportError
				if !errors.As(err, &te) {
					t.Fatalf("want a *TransportError, got %T %v", err, err)
				}
			case tc.errCode != "":
				if e := apiError(t, err); e.Code != tc.errCode {
					t.Fatalf("want %s, got %v", tc.errCode, e)
				}
			}
		})
	}
}

func TestWhatGoesOnTheWire(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	n := standIn(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/push":
			answer(200, `{"id":"7"}`)(w, r)
		case strings.HasPrefix(r.URL.Path, "/get/"):
			answer(200, `{"acked":1,"results":[{"id":"5","result":"consumed"}],"messages":[]}`)(w, r)
		case r.URL.Path == "/topics":
			answer(200, `{"topics":[],"cut":false}`)(w, r)
		default:
			answer(200, `{"id":"5","status":"Consumed"}`)(w, r)
		}
	})
	c := newClient(t, []string{n.URL + "/"}, delayq.WithAdminToken("adm"), delayq.Options{ReadToken: "rd"})
	if _, err := c.Push(ctx, delayq.Message{Topic: "t", Body: "b", Delay: 1500 * time.Millisecond, Retry: &delayq.Retry{Delay: 0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Push(ctx, delayq.Message{Topic: "t", Body: "b", DeliverAtLocal: "2027-03-28T09:00", TZ: "Europe/Berlin", DST: delayq.DSTLater}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Push(ctx, delayq.Message{Topic: "t", Body: "b", BizKey: "k", OnDuplicate: delayq.OnDuplicateReplace}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Poll(ctx, "t", delayq.PollRequest{Count: 10, Wait: 1500 * time.Millisecond, Ack: []delayq.Delivery{{ID: "5", Receipt: "1-2"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Topics(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ack(ctx, delayq.Delivery{ID: "5", Receipt: "1-2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Nack(ctx, delayq.Delivery{ID: "5"}, 0); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	want := []struct{ method, uri, auth, body string }{
		{"POST", "/push", "Bearer adm", `{"topic":"t","body":"b","delay":1500,"retry":{"delay":0}}`},
		{"POST", "/push", "Bearer adm", `{"topic":"t","body":"b","deliverAtLocal":"2027-03-28T09:00","tz":"Europe/Berlin","dst":"later"}`},
		{"POST", "/push", "Bearer adm", `{"topic":"t","bizKey":"k","body":"b","onDuplicate":"replace"}`},
		{"POST", "/get/t?timeout=2", "", `{"ack":[{"id":"5","receipt":"1-2"}],"count":10}`},
		{"GET", "/topics", "Bearer rd", ``},
		{"POST", "/ack/5?receipt=1-2", "", ``},
		{"POST", "/nack/5", "", ``},
	}
	if len(n.requests) != len(want) {
		t.Fatalf("%d requests", len(n.requests))
	}
	for i, w := range want {
		r := n.requests[i]
		if r.Method != w.method || r.RequestURI != w.uri || r.Header.Get("Authorization") != w.auth || n.bodies[i] != w.body {
			t.Errorf("request %d: %s %s auth %q body %s; want %+v", i, r.Method, r.RequestURI, r.Header.Get("Authorization"), n.bodies[i], w)
		}
		if ct := r.Header.Get("Content-Type"); (w.body != "") != (ct == "application/json") {
			t.Errorf("request %d: Content-Type %q", i, ct)
		}
	}
}

func TestTheConsumerRidesOutANodeRestart(t *testing.T) {
	s := startTestServer(t, "", "", "")
	ctx := testContext(t, 90*time.Second)
	c := newClient(t, []string{s.url}, delayq.WithTimeout(3*time.Second))
	var mu sync.Mutex
	got := map[string]bool{}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	consumer, err := delayq.NewConsumer(c, "go-restart", func(ctx context.Context, d delayq.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		got[d.Body] = true
		return nil
	}, delayq.ConsumerOptions{PollWait: time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	_ = consumer.Start()
	defer consumer.Stop(context.Background())
	push := func(prefix string) {
		msgs := make([]delayq.Message, 20)
		for i := range msgs {
			msgs[i] = delayq.Message{Topic: "go-restart", Body: fmt.Sprintf("%s%d", prefix, i)}
		}
		if _, err := c.PushBatch(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	push("a")
	eventually(20*time.Second, func() bool { return count() >= 20 })
	s.stopNode()
	time.Sleep(time.Second)
	if err := s.startNode(); err != nil {
		t.Fatal(err)
	}
	push("b")
	eventually(30*time.Second, func() bool { return count() >= 40 })
	if err := consumer.Stop(testContext(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 40 {
		mu.Lock()
		var bodies []string
		for b := range got {
			bodies = append(bodies, b)
		}
		mu.Unlock()
		sort.Strings(bodies)
		t.Fatalf("%d of 40 delivered: %v", n, bodies)
	}
}

// certificates makes a CA and a server certificate it signs (for
// 127.0.0.1 and localhost) with openssl.
func certificates(t *testing.T) (ca, cert, key string) {
	t.Helper()
	dir := t.TempDir()
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	ext := filepath.Join(dir, "server.ext")
	if err := os.WriteFile(ext, []byte("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=delayq-go-test-ca",
			"-keyout", filepath.Join(dir, "ca.key"), "-out", ca},
		{"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=localhost",
			"-keyout", key, "-out", filepath.Join(dir, "server.csr")},
		{"x509", "-req", "-in", filepath.Join(dir, "server.csr"), "-CA", ca, "-CAkey", filepath.Join(dir, "ca.key"),
			"-CAcreateserial", "-days", "2", "-extfile", ext, "-out", cert},
	} {
		if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %v: %v\n%s", args, err, out)
		}
	}
	return ca, cert, key
}

func TestTLSWithAPrivateCA(t *testing.T) {
	ca, cert, key := certificates(t)
	s := startTestServer(t, cert, key, ca)
	ctx := testContext(t, 30*time.Second)
	if !strings.HasPrefix(s.url, "https://") {
		t.Fatal(s.url)
	}
	c := newClient(t, []string{s.url}, delayq.WithCAFile(ca), delayq.WithTimeout(5*time.Second))
	p, err := c.Push(ctx, delayq.Message{Topic: "go-tls", Body: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Poll(ctx, "go-tls", delayq.PollRequest{Wait: 5 * time.Second})
	if err != nil || len(r.Messages) != 1 || r.Messages[0].ID != p.ID || r.Messages[0].Body != "secret" {
		t.Fatalf("poll over https: %+v %v", r, err)
	}
	if _, err := c.Ack(ctx, r.Messages[0]); err != nil {
		t.Fatal(err)
	}

	// Without the CA the server's certificate is not trusted.
	untrusting := newClient(t, []string{s.url}, delayq.WithTimeout(5*time.Second))
	_, err = untrusting.Push(ctx, delayq.Message{Topic: "go-tls", Body: "x", BizKey: "k"})
	var te *delayq.TransportError
	if !errors.As(err, &te) {
		t.Fatalf("want a *TransportError, got %T %v", err, err)
	}
	t.Logf("without the CA: %v", err)

	// Plain HTTP to the HTTPS port is refused with its code.
	plain := newClient(t, []string{strings.Replace(s.url, "https://", "http://", 1)})
	_, err = plain.Topics(ctx)
	if e := apiError(t, err); e.Code != delayq.CodeHTTPSRequired {
		t.Fatalf("plain HTTP: %v", e)
	}
}

func TestOptionsAreChecked(t *testing.T) {
	for _, urls := range [][]string{nil, {"127.0.0.1:7070"}, {"ftp://x"}, {"http://"}} {
		if _, err := delayq.New(urls); err == nil {
			t.Errorf("%q accepted", urls)
		}
	}
	if _, err := delayq.New([]string{"http://x"}, delayq.WithCAFile("/nonexistent")); err == nil {
		t.Error("a missing CA file accepted")
	}
	c, _ := delayq.New([]string{"http://x"})
	if _, err := delayq.NewConsumer(c, "t", func(context.Context, delayq.Delivery) error { return nil }, delayq.ConsumerOptions{Batch: 101}); err == nil {
		t.Error("a batch of 101 accepted")
	}
	// A reply of either shape.
	var counts delayq.CancelReply
	if err := json.Unmarshal([]byte(`{"matched":2,"results":{"deleted":1,"in_flight":1}}`), &counts); err != nil || counts.Matched != 2 || counts.Counts["in_flight"] != 1 {
		t.Errorf("%+v %v", counts, err)
	}
}
