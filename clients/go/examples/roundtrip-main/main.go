// Command roundtrip-main pushes 1,000 messages due in 1 to 3 s to the
// server at DELAYQ_URL (default http://127.0.0.1:7070), consumes and acks
// them with the default consumer (4 loops), and says what it saw:
// "1000 delivered, 0 early, 0 duplicates". It exits non-zero on any miss,
// or when they are not all in within 60 s. Run it as examples/roundtrip.
package main

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"sync"
	"time"

	delayq "github.com/delayq/delayq/clients/go"
)

const n = 1000

func main() {
	url := os.Getenv("DELAYQ_URL")
	if url == "" {
		url = "http://127.0.0.1:7070"
	}
	client, err := delayq.New([]string{url})
	if err != nil {
		fail(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	random := rand.New(rand.NewSource(time.Now().UnixNano()))
	topic := "roundtrip-go-" + strconv.FormatInt(random.Int63n(1<<30), 16)
	msgs := make([]delayq.Message, n)
	for i := range msgs {
		delay := time.Duration(1000+random.Intn(2001)) * time.Millisecond
		msgs[i] = delayq.Message{Topic: topic, Body: strconv.Itoa(i), Delay: delay}
	}
	now := time.Now()
	pushed, err := client.PushBatch(ctx, msgs)
	if err != nil {
		fail(err)
	}
	due := make(map[string]time.Time, n)
	for i, p := range pushed {
		due[p.ID] = now.Add(msgs[i].Delay)
	}

	var (
		mu           sync.Mutex
		seen         = make(map[string]bool, n)
		early, twice int
		all          = make(chan struct{})
	)
	consumer, err := delayq.NewConsumer(client, topic, func(_ context.Context, d delayq.Delivery) error {
		at := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if seen[d.ID] {
			twice++
		}
		if at.Before(due[d.ID]) {
			early++
		}
		seen[d.ID] = true
		if len(seen) == n && !isClosed(all) {
			close(all)
		}
		return nil
	}, delayq.ConsumerOptions{Loops: 4})
	if err != nil {
		fail(err)
	}
	if err := consumer.Start(); err != nil {
		fail(err)
	}
	select {
	case <-all:
	case <-ctx.Done():
	}
	stop, cancelStop := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelStop()
	if err := consumer.Stop(stop); err != nil {
		fmt.Fprintln(os.Stderr, "stop:", err)
	}

	mu.Lock()
	defer mu.Unlock()
	fmt.Printf("%d delivered, %d early, %d duplicates\n", len(seen), early, twice)
	if len(seen) != n || early != 0 || twice != 0 {
		os.Exit(1)
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "roundtrip:", err)
	os.Exit(1)
}
