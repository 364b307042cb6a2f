package delayq

import (
	"bytes"
	"encoding/json"
	"time"
)

// Message is a message to push. Topic and Body are required; a field
// left at its zero value is not sent, and the server's default applies
// (delivered now, priority 0, ttl 30 s, 16 attempts, no retry wait).
type Message struct {
	Topic string
	// Body is the payload (JSON text welcome), at most the server's
	// --max-body-bytes (1 MiB by default).
	Body string
	// Delay delivers the message this long from now (sent in whole
	// milliseconds; 0 … 10 years). Not with DeliverAt.
	Delay time.Duration
	// DeliverAt delivers the message at this time (in the past means now).
	DeliverAt time.Time
	// DeliverAtLocal delivers the message at a wall-clock time,
	// "YYYY-MM-DDTHH:MM[:SS[.fff]]" with no offset (e.g.
	// "2027-03-28T09:00:00"), read by the server in the IANA zone TZ. Not
	// with Delay or DeliverAt.
	DeliverAtLocal string
	// TZ is the IANA zone of DeliverAtLocal (e.g. "Europe/Berlin"); only
	// with it. A recurring message's own zone is Repeat.TZ.
	TZ string
	// DST says which instant DeliverAtLocal means when the zone's clock
	// jumps over it or passes it twice: DSTReject (the default when
	// empty), DSTEarlier or DSTLater. Only with DeliverAtLocal.
	DST string
	// BizKey is the producer's business key: unique per topic among live
	// messages. Pushing it again answers the live message's id with
	// Pushed.Duplicate set, which makes the push idempotent: the client
	// sends a push to a second node only when every message has one.
	BizKey string
	// Priority, 0 … 255: higher first among messages due at the same instant.
	Priority int
	// TTL is how long a consumer has to ack (100 ms … 1 day; default 30 s).
	TTL time.Duration
	// MaxAttempts is the number of deliveries before the message is Dead
	// (1 … 1000; default 16).
	MaxAttempts int
	// Retry is the wait before a delivery after a failed one; none: ready
	// again at once.
	Retry *Retry
	// Repeat makes the message recurring.
	Repeat *Repeat
	// OnDuplicate says what the push does to a live message of the topic
	// holding BizKey: OnDuplicateKeep (the default when empty: nothing),
	// OnDuplicateReplace or OnDuplicateExtend; Pushed.Result says what it
	// did. Only with BizKey (400 invalid_field otherwise).
	OnDuplicate string
	// Group puts the message in an ordered group of its topic (1 … 256
	// characters): one message of the group is handed out at a time (the
	// next once it is acked, dead or cancelled), in due order.
	Group string
}

// MarshalJSON writes the message as POST /push takes it, leaving out the
// fields not set.
func (m Message) MarshalJSON() ([]byte, error) {
	type wire struct {
		Topic          string  `json:"topic"`
		BizKey         string  `json:"bizKey,omitempty"`
		Body           string  `json:"body"`
		Delay          *int64  `json:"delay,omitempty"`
		DeliverAt      *int64  `json:"deliverAt,omitempty"`
		DeliverAtLocal string  `json:"deliverAtLocal,omitempty"`
		TZ             string  `json:"tz,omitempty"`
		DST            string  `json:"dst,omitempty"`
		Priority       *int    `json:"priority,omitempty"`
		TTL            *int64  `json:"ttl,omitempty"`
		MaxAttempts    *int    `json:"maxAttempts,omitempty"`
		Retry          *Retry  `json:"retry,omitempty"`
		Repeat         *Repeat `json:"repeat,omitempty"`
		OnDuplicate    string  `json:"onDuplicate,omitempty"`
		Group          string  `json:"group,omitempty"`
	}
	w := wire{Topic: m.Topic, BizKey: m.BizKey, Body: m.Body, DeliverAtLocal: m.DeliverAtLocal, TZ: m.TZ, DST: m.DST,
		Retry: m.Retry, Repeat: m.Repeat, OnDuplicate: m.OnDuplicate, Group: m.Group}
	if m.Delay != 0 {
		w.Delay = msOf(m.Delay)
	}
	if !m.DeliverAt.IsZero() {
		at := m.DeliverAt.UnixMilli()
		w.DeliverAt = &at
	}
	if m.Priority != 0 {
		w.Priority = &m.Priority
	}
	if m.TTL != 0 {
		w.TTL = msOf(m.TTL)
	}
	if m.MaxAttempts != 0 {
		w.MaxAttempts = &m.MaxAttempts
	}
	return json.Marshal(w)
}

// DST values of Message.DST and RescheduleRequest.DST: which instant a
// local time means when its zone's clock jumps over it (a gap) or passes
// it twice (a fold).
const (
	// DSTReject refuses such a time with 400 invalid_delay (the default).
	DSTReject = "reject"
	// DSTEarlier is a fold's first pass, or a gap time read with the offset
	// after the jump (Berlin's 02:30 on its spring day is 01:30 +01:00).
	DSTEarlier = "earlier"
	// DSTLater is a fold's second pass, or a gap time read with the offset
	// before the jump (03:30 +02:00).
	DSTLater = "later"
)

// OnDuplicate values of Message.OnDuplicate: what a push does to the live
// message of its topic holding its bizKey.
const (
	// OnDuplicateKeep leaves it as it is and answers its id (the default).
	OnDuplicateKeep = "keep"
	// OnDuplicateReplace (debounce) gives it the push's body, due time and
	// priority; it keeps its id. One handed to a consumer is left alone.
	OnDuplicateReplace = "replace"
	// OnDuplicateExtend moves only its due time, and only later.
	OnDuplicateExtend = "extend"
)

// Pushed.Result values: what a push with OnDuplicateReplace or
// OnDuplicateExtend did to the live message holding its bizKey.
const (
	// DuplicateReplaced: it took the push's body, due time and priority.
	DuplicateReplaced = "replaced"
	// DuplicateExtended: its due time moved later.
	DuplicateExtended = "extended"
	// DuplicateNotLater: the push's time was not later than its own; it
	// was left as it was.
	DuplicateNotLater = "not_later"
	// DuplicateInFlight: it was handed to a consumer and left alone.
	DuplicateInFlight = "in_flight"
)

// Backoff values of Retry.
const (
	BackoffFixed       = "fixed"
	BackoffExponential = "exponential"
)

// Retry is a message's retry policy: the wait before the next delivery
// after a nack without a delay, or after an ack deadline passed.
type Retry struct {
	// Backoff is BackoffFixed or BackoffExponential (the default when
	// empty): exponential doubles Delay per failed delivery up to Max.
	Backoff string
	// Delay is the wait after the first failure (always sent; at most a day).
	Delay time.Duration
	// Max is the longest wait; 0 leaves it to the server (1 hour, or Delay
	// when longer).
	Max time.Duration
}

// MarshalJSON writes the policy as a push takes it (milliseconds).
func (r Retry) MarshalJSON() ([]byte, error) {
	type wire struct {
		Backoff string `json:"backoff,omitempty"`
		Delay   *int64 `json:"delay"`
		Max     *int64 `json:"max,omitempty"`
	}
	w := wire{Backoff: r.Backoff, Delay: msOf(r.Delay)}
	if r.Max != 0 {
		w.Max = msOf(r.Max)
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the policy as the server shows it.
func (r *Retry) UnmarshalJSON(b []byte) error {
	var w struct {
		Backoff string `json:"backoff"`
		Delay   int64  `json:"delay"`
		Max     int64  `json:"max"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = Retry{Backoff: w.Backoff, Delay: time.Duration(w.Delay) * time.Millisecond, Max: time.Duration(w.Max) * time.Millisecond}
	return nil
}

// Misfire values of Repeat: what occurrences missed while a series fell
// behind come to.
const (
	MisfireOne  = "one"
	MisfireAll  = "all"
	MisfireSkip = "skip"
)

// Repeat makes a message recurring: Every or Cron (one of them), with
// Times or Until optional. Fields left at their zero value are not sent.
type Repeat struct {
	// Every is the interval between occurrences (100 ms … 10 years);
	// without Delay or DeliverAt the first is one interval after the push.
	Every time.Duration
	// Cron has 5 fields (minute hour day month weekday) or 6 (seconds first).
	Cron string
	// TZ is the IANA time zone of Cron (UTC by default).
	TZ string
	// Times is the number of occurrences in all.
	Times int64
	// Until: no occurrence after it.
	Until time.Time
	// Misfire is MisfireOne (the default when empty), MisfireAll or MisfireSkip.
	Misfire string
}

type repeatWire struct {
	Every   *int64 `json:"every,omitempty"`
	Cron    string `json:"cron,omitempty"`
	TZ      string `json:"tz,omitempty"`
	Times   int64  `json:"times,omitempty"`
	Until   *int64 `json:"until,omitempty"`
	Misfire string `json:"misfire,omitempty"`
}

// MarshalJSON writes the series as a push takes it (milliseconds).
func (r Repeat) MarshalJSON() ([]byte, error) {
	w := repeatWire{Cron: r.Cron, TZ: r.TZ, Times: r.Times, Misfire: r.Misfire}
	if r.Every != 0 {
		w.Every = msOf(r.Every)
	}
	if !r.Until.IsZero() {
		u := r.Until.UnixMilli()
		w.Until = &u
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the series as the server shows it.
func (r *Repeat) UnmarshalJSON(b []byte) error {
	var w repeatWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = Repeat{Cron: w.Cron, TZ: w.TZ, Times: w.Times, Misfire: w.Misfire}
	if w.Every != nil {
		r.Every = time.Duration(*w.Every) * time.Millisecond
	}
	if w.Until != nil {
		r.Until = time.UnixMilli(*w.Until)
	}
	return nil
}

func msOf(d time.Duration) *int64 {
	ms := d.Milliseconds()
	return &ms
}

// Ptr returns a pointer to v: for the optional fields that zero is a
// value of (RescheduleRequest.Priority).
func Ptr[T any](v T) *T { return &v }

// Message statuses.
const (
	StatusWaitPut   = "WaitPut"
	StatusDelaying  = "Delaying"
	StatusReady     = "Ready"
	StatusConsuming = "Consuming"
	StatusConsumed  = "Consumed"
	StatusDeleted   = "Deleted"
	StatusDead      = "Dead"
)

// Pushed is the answer to one pushed message.
type Pushed struct {
	ID string `json:"id"`
	// Duplicate: a live message of the topic held the bizKey; ID is that
	// message's, and nothing was pushed.
	Duplicate bool `json:"duplicate"`
	// Result, for a duplicate pushed with OnDuplicateReplace or
	// OnDuplicateExtend, is what it did to the live message:
	// DuplicateReplaced, DuplicateExtended, DuplicateNotLater or
	// DuplicateInFlight; empty otherwise.
	Result string `json:"result"`
	// DueTime, with Result, is the live message's due time now (Unix ms);
	// 0 when it is in flight, or without Result.
	DueTime int64 `json:"dueTime"`
}

// Occurrence says which occurrence of its series a recurring message is at.
type Occurrence struct {
	Number  int   `json:"number"`
	DueTime int64 `json:"dueTime"`
}

// Delivery is a message handed to this consumer, with the receipt that
// names this delivery. Times are epoch milliseconds, durations
// milliseconds, as the server sends them.
type Delivery struct {
	ID      string `json:"id"`
	Topic   string `json:"topic"`
	Body    string `json:"body"`
	Receipt string `json:"receipt"`
	// Attempts counts the deliveries so far, this one included.
	Attempts    int         `json:"attempts"`
	DueTime     int64       `json:"dueTime"`
	BizKey      string      `json:"bizKey"`
	Group       string      `json:"group"`
	Priority    int         `json:"priority"`
	TTL         int64       `json:"ttl"`
	MaxAttempts int         `json:"maxAttempts"`
	CreateTime  int64       `json:"createTime"`
	Occurrence  *Occurrence `json:"occurrence"`
}

// MessageView is a message as the server shows it, with its status.
// Times are epoch milliseconds; TTL and Delay milliseconds.
type MessageView struct {
	ID          string      `json:"id"`
	Topic       string      `json:"topic"`
	BizKey      string      `json:"bizKey"`
	Group       string      `json:"group"`
	Body        string      `json:"body"`
	Priority    int         `json:"priority"`
	TTL         int64       `json:"ttl"`
	Delay       int64       `json:"delay"`
	CreateTime  int64       `json:"createTime"`
	DueTime     int64       `json:"dueTime"`
	MaxAttempts int         `json:"maxAttempts"`
	Retry       *Retry      `json:"retry"`
	Repeat      *Repeat     `json:"repeat"`
	Occurrence  *Occurrence `json:"occurrence"`
	Status      string      `json:"status"`
	Attempts    int         `json:"attempts"`
	Receipt     string      `json:"receipt"`
}

// FlowRow is one status change of a message's history.
type FlowRow struct {
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
	Time     int64  `json:"time"`
	Shard    string `json:"shard"`
	NodeID   string `json:"nodeId"`
	Host     string `json:"host"`
	// DueTime is the due time this change set (a reschedule, a retry's
	// wait, a next occurrence); 0 for other changes.
	DueTime int64 `json:"dueTime"`
}

// MessageInfo is the answer of GET /messages/{id}.
type MessageInfo struct {
	// Message carries the status and attempts Redis already applied when
	// the journal has not written them yet.
	Message     MessageView `json:"message"`
	UpdatedTime int64       `json:"updatedTime"`
	// StatusFrom is "redis" or "journal".
	StatusFrom string `json:"statusFrom"`
	// History is the journal's, oldest first.
	History []FlowRow `json:"history"`
}

// SearchOptions narrow GET /messages?topic=…: give BizKey, BizKeyPrefix
// or Status (the server wants at least one).
type SearchOptions struct {
	BizKey       string
	BizKeyPrefix string
	// Status is one live status with a key or prefix; alone, any status.
	Status string
	// Limit is 1 … 1000 (0: the server's 100).
	Limit int
	// After is the Next of the previous page.
	After string
}

// MessagePage is a page of messages in id order.
type MessagePage struct {
	Messages []MessageView `json:"messages"`
	// Next is the After of the next page; empty on the last.
	Next string `json:"next"`
}

// PageOptions page through dead letters.
type PageOptions struct {
	// Limit is 1 … 1000 (0: the server's 100).
	Limit int
	// After is the Next of the previous page.
	After string
}

// DeadMessage is a dead letter with its history.
type DeadMessage struct {
	MessageView
	History []FlowRow `json:"history"`
}

// DeadPage is a page of a topic's dead letters in id order.
type DeadPage struct {
	Messages []DeadMessage `json:"messages"`
	// Next is the After of the next page; empty on the last.
	Next string `json:"next"`
}

// TopicCounts are a topic's messages by status, from the journal.
type TopicCounts struct {
	Waiting  int64 `json:"waiting"`
	Delaying int64 `json:"delaying"`
	Ready    int64 `json:"ready"`
	InFlight int64 `json:"inFlight"`
	Dead     int64 `json:"dead"`
	Consumed int64 `json:"consumed"`
	Deleted  int64 `json:"deleted"`
}

// Topic is one topic of GET /topics.
type Topic struct {
	Topic    string      `json:"topic"`
	Counts   TopicCounts `json:"counts"`
	Paused   bool        `json:"paused"`
	PausedAt int64       `json:"pausedAt"`
	// LimitPerSecond and LimitConcurrency are the topic's --topic-limit (0: none).
	LimitPerSecond     int   `json:"limitPerSecond"`
	LimitConcurrency   int   `json:"limitConcurrency"`
	OldestReadyDueTime int64 `json:"oldestReadyDueTime"`
	OverdueMs          int64 `json:"overdueMs"`
	// Groups counts its ordered groups (nil: none due or handed out).
	Groups *GroupCounts `json:"groups"`
}

// GroupCounts are a topic's ordered groups as Redis holds them now.
type GroupCounts struct {
	// Active groups hold their turn: a message ready, handed out or
	// waiting to retry.
	Active int64 `json:"active"`
	// Waiting counts those with due messages waiting behind it.
	Waiting int64 `json:"waiting"`
	// Held counts the due messages waiting behind their group's.
	Held int64 `json:"held"`
}

// TopicList is the answer of GET /topics.
type TopicList struct {
	Topics []Topic `json:"topics"`
	// Cut: the journal's counts were cut at their limit; some topics may
	// be missing.
	Cut bool `json:"cut"`
}

// ForecastBucket is one bucket of a forecast: Count messages fall due in
// [At, At+bucket). Low and High are set where Count is an estimate (a
// topic's bucket too large to read whole): its 95 % interval.
type ForecastBucket struct {
	At    int64   `json:"at"`
	Count uint64  `json:"count"`
	Low   *uint64 `json:"low,omitempty"`
	High  *uint64 `json:"high,omitempty"`
}

// Forecast is the answer of GET /forecast and GET /topics/{topic}/forecast.
type Forecast struct {
	// Topic is empty for every topic.
	Topic   *string          `json:"topic"`
	Now     int64            `json:"now"`
	From    int64            `json:"from"`
	Bucket  int64            `json:"bucket"`
	Span    int64            `json:"span"`
	Overdue ForecastBucket   `json:"overdue"`
	Buckets []ForecastBucket `json:"buckets"`
	Total   uint64           `json:"total"`
	Exact   bool             `json:"exact"`
	// JournalCountedUntil: the journal's waiting messages were counted up
	// to this due time only (its row budget ran out); nil when all were.
	JournalCountedUntil *int64 `json:"journalCountedUntil"`
	Sampled             uint64 `json:"sampled"`
	JournalRows         uint64 `json:"journalRows"`
}

// PauseState is the answer of a pause or a resume.
type PauseState struct {
	Topic    string `json:"topic"`
	Paused   bool   `json:"paused"`
	PausedAt int64  `json:"pausedAt"`
	// Changed is false when the topic was in that state already.
	Changed bool `json:"changed"`
	// Known is false for a topic the server has never seen (a typo?).
	Known bool `json:"known"`
}

// CancelResult is one message's cancel: Result is "deleted", "in_flight",
// "already_consumed", "dead" or "not_found".
type CancelResult struct {
	ID     string `json:"id"`
	Result string `json:"result"`
}

// CancelReply is the answer of POST /cancel: Deleted and Results by ids
// or bizKey; Matched and Counts (messages per outcome) by prefix.
type CancelReply struct {
	Deleted int
	Results []CancelResult
	Matched int64
	Counts  map[string]int64
}

// UnmarshalJSON reads either shape of the answer.
func (r *CancelReply) UnmarshalJSON(b []byte) error {
	var w struct {
		Deleted int             `json:"deleted"`
		Matched int64           `json:"matched"`
		Results json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = CancelReply{Deleted: w.Deleted, Matched: w.Matched}
	return unmarshalResults(w.Results, &r.Results, &r.Counts)
}

// RescheduleRequest says which messages move (IDs, or Topic with BizKey
// or BizKeyPrefix) and where to (Delay, DeliverAt or DeliverAtLocal, and/or
// Priority). Messages not handed out yet move and keep their ids.
type RescheduleRequest struct {
	IDs          []string
	Topic        string
	BizKey       string
	BizKeyPrefix string
	// Delay moves them this long from now (0: not sent; to move them to
	// now, give DeliverAt: time.Now()).
	Delay time.Duration
	// DeliverAt moves them to this time (in the past means now).
	DeliverAt time.Time
	// DeliverAtLocal moves them to a wall-clock time in the zone TZ, with
	// DST for a time the clock jumps over or passes twice, as
	// Message.DeliverAtLocal.
	DeliverAtLocal string
	TZ             string
	DST            string
	// Priority re-ranks them (nil: unchanged).
	Priority *int
	// Series moves a recurring message's whole series (with Delay, DeliverAt or
	// DeliverAtLocal).
	Series bool
}

// MarshalJSON writes the request as POST /reschedule takes it.
func (r RescheduleRequest) MarshalJSON() ([]byte, error) {
	type wire struct {
		IDs            []string `json:"ids,omitempty"`
		Topic          string   `json:"topic,omitempty"`
		BizKey         string   `json:"bizKey,omitempty"`
		BizKeyPrefix   string   `json:"bizKeyPrefix,omitempty"`
		Delay          *int64   `json:"delay,omitempty"`
		DeliverAt      *int64   `json:"deliverAt,omitempty"`
		DeliverAtLocal string   `json:"deliverAtLocal,omitempty"`
		TZ             string   `json:"tz,omitempty"`
		DST            string   `json:"dst,omitempty"`
		Priority       *int     `json:"priority,omitempty"`
		Series         bool     `json:"series,omitempty"`
	}
	w := wire{IDs: r.IDs, Topic: r.Topic, BizKey: r.BizKey, BizKeyPrefix: r.BizKeyPrefix,
		DeliverAtLocal: r.DeliverAtLocal, TZ: r.TZ, DST: r.DST, Priority: r.Priority, Series: r.Series}
	if r.Delay != 0 {
		w.Delay = msOf(r.Delay)
	}
	if !r.DeliverAt.IsZero() {
		at := r.DeliverAt.UnixMilli()
		w.DeliverAt = &at
	}
	return json.Marshal(w)
}

// RescheduleResult is one message's reschedule: Result is "rescheduled"
// (with the new DueTime and Priority), "in_flight", "already_consumed",
// "deleted", "dead" or "not_found".
type RescheduleResult struct {
	ID       string `json:"id"`
	Result   string `json:"result"`
	DueTime  int64  `json:"dueTime"`
	Priority int    `json:"priority"`
}

// RescheduleReply is the answer of POST /reschedule: Rescheduled and
// Results by ids or bizKey; Matched and Counts by prefix.
type RescheduleReply struct {
	Rescheduled int
	Results     []RescheduleResult
	Matched     int64
	Counts      map[string]int64
}

// UnmarshalJSON reads either shape of the answer.
func (r *RescheduleReply) UnmarshalJSON(b []byte) error {
	var w struct {
		Rescheduled int             `json:"rescheduled"`
		Matched     int64           `json:"matched"`
		Results     json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = RescheduleReply{Rescheduled: w.Rescheduled, Matched: w.Matched}
	return unmarshalResults(w.Results, &r.Results, &r.Counts)
}

// unmarshalResults reads "results": a list per message, or counts per
// outcome (an object).
func unmarshalResults[T any](raw json.RawMessage, list *[]T, counts *map[string]int64) error {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		return nil
	case raw[0] == '{':
		return json.Unmarshal(raw, counts)
	default:
		return json.Unmarshal(raw, list)
	}
}

// RequeueReply is the answer of POST /dead/{target}/requeue: for one
// message ID, Result ("requeued", "not_dead", "not_found",
// "biz_key_taken"), Status and Holder; for a topic Topic, Requeued,
// Skipped and More.
type RequeueReply struct {
	ID       string         `json:"id"`
	Result   string         `json:"result"`
	Status   string         `json:"status"`
	Holder   string         `json:"holder"`
	Topic    string         `json:"topic"`
	Requeued int            `json:"requeued"`
	Skipped  []RequeueReply `json:"skipped"`
	More     bool           `json:"more"`
}

// PollRequest is a long poll of POST /get/{topic}.
type PollRequest struct {
	// Count is the most messages to hand out, 1 … 100 (0: 1).
	Count int
	// Wait is how long the poll waits for a message, in whole seconds
	// (rounded up; at most 300 s). 0 answers at once.
	Wait time.Duration
	// Ack lists deliveries to ack (by their receipts) before polling.
	Ack []Delivery
}

// AckResult is one carried ack's outcome: Result is "consumed",
// "not_in_flight", "stale_delivery" or "not_found".
type AckResult struct {
	ID             string      `json:"id"`
	Result         string      `json:"result"`
	Status         string      `json:"status"`
	NextOccurrence *Occurrence `json:"nextOccurrence"`
}

// PollResult is the answer of a poll: the carried acks' results, then
// the messages handed out (each now Consuming).
type PollResult struct {
	Acked    int         `json:"acked"`
	Results  []AckResult `json:"results"`
	Messages []Delivery  `json:"messages"`
}

// AckReply is the answer of POST /ack/{id}: Status Consumed, or Delaying
// with NextOccurrence for a recurring message with occurrences to come.
type AckReply struct {
	ID             string      `json:"id"`
	Status         string      `json:"status"`
	NextOccurrence *Occurrence `json:"nextOccurrence"`
}

// AckBatchReply is the answer of POST /ack.
type AckBatchReply struct {
	Acked   int         `json:"acked"`
	Results []AckResult `json:"results"`
}

// NackReply is the answer of POST /nack/{id}: Result "delaying" (with
// DueTime), "ready" or "dead".
type NackReply struct {
	ID       string `json:"id"`
	Result   string `json:"result"`
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
	DueTime  int64  `json:"dueTime"`
}
