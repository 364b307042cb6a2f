// Package delayq is the Go client of delayq, the delayed-message queue:
// push, cancel, reschedule, look, and a Consumer that carries its acks in
// its next long poll. Standard library only.
//
//	client, err := delayq.New([]string{"http://127.0.0.1:7070"})
//	_, err = client.Push(ctx, delayq.Message{Topic: "sms", Body: "hello", Delay: 5 * time.Second})
//	consumer, err := delayq.NewConsumer(client, "sms", func(ctx context.Context, d delayq.Delivery) error {
//		fmt.Println(d.ID, d.Body)
//		return nil // an error nacks the message
//	}, delayq.ConsumerOptions{Loops: 4})
//	err = consumer.Run(ctx) // until ctx is done; then a graceful stop
//
// Every request is bounded by its own timeout. With several base URLs, a
// node that does not answer, or answers 502, 504 or 503 node_stalled or
// node_unavailable, is skipped for the next one; other error answers (a
// 400, a 404, a 409) are the cluster's word and are returned as
// *APIError. A push is sent to a second node only when its bizKey makes
// it idempotent.
package delayq

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultTimeout bounds every request of a client made without WithTimeout.
const DefaultTimeout = 10 * time.Second

// Options configure a Client. An Options value is itself an Option: its
// fields that are set override the defaults (and earlier options).
type Options struct {
	// Timeout bounds every request (per node tried), but long polls, which
	// wait their own timeout plus this. Default DefaultTimeout.
	Timeout time.Duration
	// AdminToken goes as "Authorization: Bearer" to the routes that change
	// what the cluster holds (pushes, cancels, reschedules, pauses,
	// requeues), and to the reads when ReadToken is not set.
	AdminToken string
	// ReadToken goes to the routes that show messages (Message, Search,
	// Dead, Topics).
	ReadToken string
	// CAFile is a PEM file of CA certificates trusted for https:// URLs,
	// besides the platform's.
	CAFile string
	// TLSConfig is the TLS configuration to start from (a client
	// certificate, say); CAFile adds to its RootCAs.
	TLSConfig *tls.Config
}

// Option configures a Client: an Options value, or one of the With... functions.
type Option interface{ apply(*Options) }

func (o Options) apply(to *Options) {
	if o.Timeout != 0 {
		to.Timeout = o.Timeout
	}
	if o.AdminToken != "" {
		to.AdminToken = o.AdminToken
	}
	if o.ReadToken != "" {
		to.ReadToken = o.ReadToken
	}
	if o.CAFile != "" {
		to.CAFile = o.CAFile
	}
	if o.TLSConfig != nil {
		to.TLSConfig = o.TLSConfig
	}
}

type optionFunc func(*Options)

func (f optionFunc) apply(o *Options) { f(o) }

// WithTimeout bounds every request (long polls: their wait plus this).
func WithTimeout(d time.Duration) Option { return optionFunc(func(o *Options) { o.Timeout = d }) }

// WithAdminToken sets the admin token (see Options.AdminToken).
func WithAdminToken(t string) Option { return optionFunc(func(o *Options) { o.AdminToken = t }) }

// WithReadToken sets the read token (see Options.ReadToken).
func WithReadToken(t string) Option { return optionFunc(func(o *Options) { o.ReadToken = t }) }

// WithCAFile trusts the CA certificates of a PEM file for https:// URLs.
func WithCAFile(path string) Option { return optionFunc(func(o *Options) { o.CAFile = path }) }

// WithTLSConfig sets the TLS configuration to start from.
func WithTLSConfig(c *tls.Config) Option { return optionFunc(func(o *Options) { o.TLSConfig = c }) }

// Client is a delayq cluster, reached at one or several base URLs (tried
// in turn, starting with the one that answered last). It is safe for
// concurrent use.
type Client struct {
	nodes      []string
	timeout    time.Duration
	adminToken string
	readToken  string
	hc         *http.Client
	first      atomic.Int32
}

// New makes a client of the nodes at these base URLs (http:// or https://).
func New(urls []string, opts ...Option) (*Client, error) {
	o := Options{Timeout: DefaultTimeout}
	for _, opt := range opts {
		opt.apply(&o)
	}
	if len(urls) == 0 {
		return nil, errors.New("delayq: give at least one base URL")
	}
	if o.Timeout <= 0 {
		return nil, errors.New("delayq: the timeout must be positive")
	}
	c := &Client{timeout: o.Timeout, adminToken: o.AdminToken, readToken: o.ReadToken}
	for _, raw := range urls {
		u, err := url.Parse(strings.TrimRight(raw, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
			return nil, fmt.Errorf("delayq: not an http(s) base URL: %q", raw)
		}
		c.nodes = append(c.nodes, u.String())
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.TLSConfig != nil {
		tlsConfig = o.TLSConfig.Clone()
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("delayq: reading the CA file: %w", err)
		}
		pool := tlsConfig.RootCAs
		if pool == nil {
			if pool, err = x509.SystemCertPool(); err != nil {
				pool = x509.NewCertPool()
			}
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("delayq: no PEM certificate in %s", o.CAFile)
		}
		tlsConfig.RootCAs = pool
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	transport.MaxIdleConnsPerHost = 64
	c.hc = &http.Client{Transport: transport}
	return c, nil
}

// Close closes the idle connections the client keeps.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// call is one request, as the nodes are tried with it.
type call struct {
	method string
	path   string // with its query
	body   any
	token  string
	// wait is the long poll's own timeout, added to the client's.
	wait time.Duration
	// idempotent: sent again to the next node when one does not answer.
	idempotent bool
}

func (c *Client) do(ctx context.Context, k call, out any) error {
	var payload []byte
	if k.body != nil {
		var err error
		if payload, err = json.Marshal(k.body); err != nil {
			return fmt.Errorf("delayq: encoding the request: %w", err)
		}
	}
	first := int(c.first.Load())
	var last error
	for n := range c.nodes {
		i := (first + n) % len(c.nodes)
		node := c.nodes[i]
		if err := ctx.Err(); err != nil {
			return &TransportError{Node: node, Err: err}
		}
		status, reply, err := c.send(ctx, node, k, payload)
		if err != nil {
			last = &TransportError{Node: node, Err: err}
			if !k.idempotent {
				return last
			}
			continue
		}
		if status < 400 {
			c.first.Store(int32(i))
			if out == nil || len(bytes.TrimSpace(reply)) == 0 {
				return nil
			}
			if err := json.Unmarshal(reply, out); err != nil {
				return fmt.Errorf("delayq: %s: reading the answer of %s %s: %w", node, k.method, k.path, err)
			}
			return nil
		}
		apiErr := errorOf(status, reply)
		if skip(apiErr, k.idempotent) {
			last = apiErr
			continue
		}
		return apiErr
	}
	return last
}

// skip says whether an error answer lets the request go to the next node:
// 503 node_stalled or node_unavailable (nothing was applied), and, for a
// request that may be sent twice, 502 and 504 (a proxy that got no answer).
func skip(e *APIError, idempotent bool) bool {
	if e.Code == CodeNodeStalled || e.Code == CodeNodeUnavailable {
		return true
	}
	return idempotent && (e.Status == http.StatusBadGateway || e.Status == http.StatusGatewayTimeout)
}

func errorOf(status int, reply []byte) *APIError {
	var doc struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(reply, &doc) == nil && doc.Error != "" {
		return &APIError{Status: status, Code: doc.Error, Message: doc.Message}
	}
	text := strings.TrimSpace(string(reply))
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	return &APIError{Status: status, Code: "http_" + strconv.Itoa(status), Message: text}
}

func (c *Client) send(ctx context.Context, node string, k call, payload []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout+k.wait)
	defer cancel()
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, k.method, node+k.path, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if k.token != "" {
		req.Header.Set("Authorization", "Bearer "+k.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, reply, nil
}

func (c *Client) reader() string {
	if c.readToken != "" {
		return c.readToken
	}
	return c.adminToken
}

func query(v url.Values) string {
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// -- producing ---------------------------------------------------------

// Push sends POST /push: answered once the message is durable.
//
// Without a bizKey a push is sent to one node only: when that node fails
// to answer, the message may or may not be accepted (*TransportError).
func (c *Client) Push(ctx context.Context, m Message) (Pushed, error) {
	var r Pushed
	err := c.do(ctx, call{method: "POST", path: "/push", body: m, token: c.adminToken, idempotent: m.BizKey != ""}, &r)
	return r, err
}

// PushBatch sends POST /push/batch (1 to 1000 messages): all durable, or
// none accepted. The answer has one Pushed per message, in order (a
// duplicate pushed with OnDuplicateReplace or OnDuplicateExtend carries
// its Result and DueTime). It is sent to a second node only when every
// message has a bizKey.
func (c *Client) PushBatch(ctx context.Context, msgs []Message) ([]Pushed, error) {
	idempotent := len(msgs) > 0
	for _, m := range msgs {
		if m.BizKey == "" {
			idempotent = false
		}
	}
	if msgs == nil {
		msgs = []Message{}
	}
	var r struct {
		IDs        []string `json:"ids"`
		Duplicates []int    `json:"duplicates"`
		Updates    []struct {
			Index   int    `json:"index"`
			Result  string `json:"result"`
			DueTime int64  `json:"dueTime"`
		} `json:"updates"`
	}
	body := struct {
		Messages []Message `json:"messages"`
	}{msgs}
	if err := c.do(ctx, call{method: "POST", path: "/push/batch", body: body, token: c.adminToken, idempotent: idempotent}, &r); err != nil {
		return nil, err
	}
	out := make([]Pushed, len(r.IDs))
	for i, id := range r.IDs {
		out[i].ID = id
	}
	for _, n := range r.Duplicates {
		if n >= 0 && n < len(out) {
			out[n].Duplicate = true
		}
	}
	for _, u := range r.Updates {
		if u.Index >= 0 && u.Index < len(out) {
			out[u.Index].Result = u.Result
			out[u.Index].DueTime = u.DueTime
		}
	}
	return out, nil
}

func (c *Client) cancel(ctx context.Context, body any) (*CancelReply, error) {
	var r CancelReply
	if err := c.do(ctx, call{method: "POST", path: "/cancel", body: body, token: c.adminToken, idempotent: true}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Cancel cancels one message (POST /cancel {"id"}); its result is
// Results[0].Result: "deleted", "in_flight", "already_consumed", "dead"
// or "not_found".
func (c *Client) Cancel(ctx context.Context, id string) (*CancelReply, error) {
	return c.cancel(ctx, map[string]string{"id": id})
}

// CancelIDs cancels 1 to 1000 messages, each named once.
func (c *Client) CancelIDs(ctx context.Context, ids []string) (*CancelReply, error) {
	return c.cancel(ctx, map[string][]string{"ids": ids})
}

// CancelBizKey cancels the live message of the topic holding the bizKey;
// an *APIError CodeNotFound when none does.
func (c *Client) CancelBizKey(ctx context.Context, topic, bizKey string) (*CancelReply, error) {
	return c.cancel(ctx, map[string]string{"topic": topic, "bizKey": bizKey})
}

// CancelPrefix cancels every live message of the topic whose bizKey
// starts with prefix: the answer has Matched and Counts.
func (c *Client) CancelPrefix(ctx context.Context, topic, prefix string) (*CancelReply, error) {
	return c.cancel(ctx, map[string]string{"topic": topic, "bizKeyPrefix": prefix})
}

// Reschedule sends POST /reschedule: messages not handed out yet move and
// keep their ids, bodies and attempts.
func (c *Client) Reschedule(ctx context.Context, r RescheduleRequest) (*RescheduleReply, error) {
	var out RescheduleReply
	if err := c.do(ctx, call{method: "POST", path: "/reschedule", body: r, token: c.adminToken, idempotent: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// -- looking -----------------------------------------------------------

// Message sends GET /messages/{id}: the message, its status and its history.
func (c *Client) Message(ctx context.Context, id string) (*MessageInfo, error) {
	var r MessageInfo
	if err := c.do(ctx, call{method: "GET", path: "/messages/" + url.PathEscape(id), token: c.reader(), idempotent: true}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Search sends GET /messages?topic=…: the live message holding a bizKey,
// those whose bizKey starts with a prefix, or the messages in a status.
func (c *Client) Search(ctx context.Context, topic string, o SearchOptions) (*MessagePage, error) {
	q := url.Values{"topic": {topic}}
	for k, v := range map[string]string{"bizKey": o.BizKey, "bizKeyPrefix": o.BizKeyPrefix, "status": o.Status, "after": o.After} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var r MessagePage
	if err := c.do(ctx, call{method: "GET", path: "/messages" + query(q), token: c.reader(), idempotent: true}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Topics sends GET /topics: every topic with its counts by status.
func (c *Client) Topics(ctx context.Context) (*TopicList, error) {
	var r TopicList
	if err := c.do(ctx, call{method: "GET", path: "/topics", token: c.reader(), idempotent: true}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Forecast reads GET /forecast (topic "": every topic) or GET
// /topics/{topic}/forecast: how many messages fall due per bucket (e.g.
// "1m") over the span (e.g. "24h") from now on; "" for either takes the
// server's default (1m, 24h).
func (c *Client) Forecast(ctx context.Context, topic, bucket, span string) (*Forecast, error) {
	path := "/forecast"
	if topic != "" {
		path = "/topics/" + url.PathEscape(topic) + "/forecast"
	}
	q := url.Values{}
	if bucket != "" {
		q.Set("bucket", bucket)
	}
	if span != "" {
		q.Set("span", span)
	}
	var r Forecast
	if err := c.do(ctx, call{method: "GET", path: path + query(q), token: c.reader(), idempotent: true}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (c *Client) pauseOrResume(ctx context.Context, topic, what string) (*PauseState, error) {
	var r PauseState
	path := "/topics/" + url.PathEscape(topic) + "/" + what
	if err := c.do(ctx, call{method: "POST", path: path, token: c.adminToken, idempotent: true}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Pause stops the topic's hand-outs on every node until Resume.
func (c *Client) Pause(ctx context.Context, topic string) (*PauseState, error) {
	return c.pauseOrResume(ctx, topic, "pause")
}

// Resume lets a paused topic be handed out again.
func (c *Client) Resume(ctx context.Context, topic string) (*PauseState, error) {
	return c.pauseOrResume(ctx, topic, "resume")
}

// Dead sends GET /dead/{topic}: a page of the topic's dead letters.
func (c *Client) Dead(ctx context.Context, topic string, o PageOptions) (*DeadPage, error) {
	q := url.Values{}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	var r DeadPage
	if err := c.do(ctx, call{method: "GET", path: "/dead/" + url.PathEscape(topic) + query(q), token: c.reader(), idempotent: true}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Requeue sends POST /dead/{target}/requeue: a dead message (by id) is
// live again, due at once; a topic's dead letters (up to 10 000) the same.
func (c *Client) Requeue(ctx context.Context, target string) (*RequeueReply, error) {
	var r RequeueReply
	if err := c.do(ctx, call{method: "POST", path: "/dead/" + url.PathEscape(target) + "/requeue", token: c.adminToken, idempotent: true}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// -- consuming ---------------------------------------------------------

type deliveryRef struct {
	ID      string `json:"id"`
	Receipt string `json:"receipt,omitempty"`
}

func refs(ds []Delivery) []deliveryRef {
	out := make([]deliveryRef, len(ds))
	for i, d := range ds {
		out[i] = deliveryRef{ID: d.ID, Receipt: d.Receipt}
	}
	return out
}

// Poll sends POST /get/{topic}: acks r.Ack (by their receipts), then
// waits up to r.Wait for messages, in one round trip. The request is
// bounded by r.Wait plus the client's timeout.
func (c *Client) Poll(ctx context.Context, topic string, r PollRequest) (*PollResult, error) {
	secs := int64(0)
	if r.Wait > 0 {
		secs = int64(math.Ceil(r.Wait.Seconds()))
	}
	body := struct {
		Ack   []deliveryRef `json:"ack"`
		Count int           `json:"count,omitempty"`
	}{refs(r.Ack), r.Count}
	// The timeout goes in the query, where a proxy sees it.
	path := "/get/" + url.PathEscape(topic) + "?timeout=" + strconv.FormatInt(secs, 10)
	var out PollResult
	wait := time.Duration(secs) * time.Second
	if err := c.do(ctx, call{method: "POST", path: path, body: body, wait: wait, idempotent: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func receiptQuery(d Delivery) url.Values {
	q := url.Values{}
	if d.Receipt != "" {
		q.Set("receipt", d.Receipt)
	}
	return q
}

// Ack sends POST /ack/{id}?receipt=: 409 CodeStaleDelivery when another
// delivery holds the message now. Acking twice is fine.
func (c *Client) Ack(ctx context.Context, d Delivery) (*AckReply, error) {
	var r AckReply
	if err := c.do(ctx, call{method: "POST", path: "/ack/" + url.PathEscape(d.ID) + query(receiptQuery(d)), idempotent: true}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// AckBatch sends POST /ack: 1 to 100 deliveries, each message once, in
// one journal commit, with a result per delivery.
func (c *Client) AckBatch(ctx context.Context, ds []Delivery) (*AckBatchReply, error) {
	var r AckBatchReply
	body := struct {
		IDs []deliveryRef `json:"ids"`
	}{refs(ds)}
	if err := c.do(ctx, call{method: "POST", path: "/ack", body: body, idempotent: true}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Nack sends POST /nack/{id}?receipt=&delay=: the message could not be
// handled. It is delivered again after delay, or, when delay is 0, after
// the wait of its retry policy (none without one); on its last attempt it
// is Dead. Give a delay of time.Millisecond for "again at once".
func (c *Client) Nack(ctx context.Context, d Delivery, delay time.Duration) (*NackReply, error) {
	q := receiptQuery(d)
	if delay > 0 {
		q.Set("delay", strconv.FormatInt(*msOf(delay), 10))
	}
	var r NackReply
	if err := c.do(ctx, call{method: "POST", path: "/nack/" + url.PathEscape(d.ID) + query(q), idempotent: true}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
