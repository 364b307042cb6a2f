// Command bench-main runs the client's default consumer on delayq's
// benchmark scenarios (what scripts/bench-clients runs for every client),
// and prints one JSON line on stdout. Run it as examples/bench:
//
//	examples/bench spread|burst [--url=http://127.0.0.1:7070] [--count=20000] [--loops=4]
//
// spread: due uniformly 1-6 s after the push; burst: all due at one
// instant, 3 s + count/5 ms after the push starts. Pushed in batches of
// 500. Lateness = the handler's start minus the message's dueTime;
// last_handout_ms (burst) = the last handler's start minus the due
// instant; acked = messages the journal counts Consumed afterwards.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	delayq "github.com/delayq/delayq/clients/go"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "spread" && os.Args[1] != "burst") {
		usage()
	}
	scenario := os.Args[1]
	url, count, loops := "http://127.0.0.1:7070", 20000, 4
	for _, a := range os.Args[2:] {
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		var err error
		switch {
		case !ok:
			usage()
		case k == "url":
			url = v
		case k == "count":
			count, err = strconv.Atoi(v)
		case k == "loops":
			loops, err = strconv.Atoi(v)
		default:
			usage()
		}
		if err != nil {
			usage()
		}
	}
	client, err := delayq.New([]string{url})
	if err != nil {
		fail(err)
	}
	defer client.Close()
	ctx := context.Background()
	topic := fmt.Sprintf("bench-go-%s-%d", scenario, time.Now().UnixMilli())

	t0 := time.Now()
	instant := t0.Add(3*time.Second + time.Duration(count/5)*time.Millisecond)
	for i := 0; i < count; i += 500 {
		n := 500
		if count-i < n {
			n = count - i
		}
		batch := make([]delayq.Message, n)
		for k := range batch {
			batch[k] = delayq.Message{Topic: topic, Body: strconv.Itoa(i + k)}
			if scenario == "spread" {
				batch[k].Delay = time.Duration(1000+rand.Intn(5000)) * time.Millisecond
			} else {
				batch[k].DeliverAt = instant
			}
		}
		if _, err := client.PushBatch(ctx, batch); err != nil {
			fail(err)
		}
	}
	pushRate := float64(count) / time.Since(t0).Seconds()

	var (
		mu                sync.Mutex
		seen              = make(map[string]bool, count)
		late              = make([]int64, 0, count)
		early, duplicates int
		last              int64
		all               = make(chan struct{})
	)
	consumer, err := delayq.NewConsumer(client, topic, func(_ context.Context, d delayq.Delivery) error {
		at := time.Now().UnixMilli()
		mu.Lock()
		defer mu.Unlock()
		if seen[d.ID] {
			duplicates++
			return nil
		}
		seen[d.ID] = true
		if at < d.DueTime {
			early++
		}
		late = append(late, at-d.DueTime)
		if at > last {
			last = at
		}
		if len(seen) == count {
			close(all)
		}
		return nil
	}, delayq.ConsumerOptions{Loops: loops})
	if err != nil {
		fail(err)
	}
	if err := consumer.Start(); err != nil {
		fail(err)
	}
	select {
	case <-all:
	case <-time.After(66 * time.Second):
	}
	stop, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := consumer.Stop(stop); err != nil {
		fmt.Fprintln(os.Stderr, "stop:", err)
	}

	// Every ack carried: the journal counts them all Consumed (it lags a little).
	var acked int64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		list, err := client.Topics(ctx)
		if err != nil {
			continue
		}
		for _, t := range list.Topics {
			if t.Topic == topic {
				acked = t.Counts.Consumed
			}
		}
		if acked >= int64(count) {
			break
		}
	}

	mu.Lock()
	defer mu.Unlock()
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	q := func(p float64) any {
		if len(late) == 0 {
			return nil
		}
		i := int(p * float64(len(late)))
		if i >= len(late) {
			i = len(late) - 1
		}
		return late[i]
	}
	line := map[string]any{
		"client": "go", "scenario": scenario, "loops": loops, "count": count,
		"push_rate": int(pushRate + 0.5), "delivered": len(seen), "early": early,
		"duplicates": duplicates, "lateness_ms": map[string]any{"p50": q(0.5), "p99": q(0.99), "max": q(1)},
		"acked": acked,
	}
	if scenario == "burst" {
		line["last_handout_ms"] = last - instant.UnixMilli()
	}
	out, _ := json.Marshal(line)
	fmt.Println(string(out))
	if len(seen) != count || early != 0 || duplicates != 0 || acked != int64(count) {
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: bench spread|burst [--url=] [--count=] [--loops=]")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
