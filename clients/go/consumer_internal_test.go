package delayq

import (
	"testing"
	"time"
)

func TestNextBatchFitsTheTTL(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		want, got   int
		spent, ttl  time.Duration
		most, count int
	}{
		{10, 10, 10 * ms, 1000 * ms, 100, 20},  // full and under an eighth: twice
		{80, 80, 10 * ms, 1000 * ms, 100, 100}, // … up to the most
		{10, 9, 10 * ms, 1000 * ms, 100, 10},   // not full: the same
		{10, 10, 200 * ms, 1000 * ms, 100, 10}, // between an eighth and a quarter: the same
		{10, 10, 600 * ms, 1000 * ms, 100, 4},  // past a quarter: what fits a quarter (10*250/600)
		{10, 3, 600 * ms, 1000 * ms, 100, 1},   // … at least 1 (3*250/600 = 1.25)
		{4, 4, 260 * ms, 1000 * ms, 100, 3},    // … rounded down (4*250/260 = 3.8)
		{1, 1, 5000 * ms, 1000 * ms, 100, 1},   // never 0
		{10, 10, 1 * ms, 30000 * ms, 10, 10},   // Batch 10 stays 10
	} {
		if n := nextBatch(c.want, c.got, c.spent, c.ttl, c.most); n != c.count {
			t.Errorf("nextBatch(%d, %d, %v, %v, %d) = %d, want %d", c.want, c.got, c.spent, c.ttl, c.most, n, c.count)
		}
	}
}
