// Package client is the Go client of the wts API: sessions, a training
// client whose calls return futures, a sampling client, and the reads a
// caller needs (models, operations, metrics, cost).
//
// It does what a caller would otherwise do by hand: seq_ids in order,
// idempotency keys, request hashes (RFC 8785), polling, and retries. A
// retry is safe because it resends the same request: the same request_id
// for a creation, the same idempotency_key and request_hash for an
// operation, so the service returns what the first attempt made if that
// attempt got through.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Client talks to one wts service with one API key. It is safe for
// concurrent use.
type Client struct {
	base  string
	key   string
	hc    *http.Client
	retry Retry
	poll  [2]time.Duration // Wait's first and longest interval
}

// Retry says how a request that failed in a way that may pass is tried
// again: a 429 (after its Retry-After), a 502, 503 or 504, or a lost
// connection. Attempts counts the first; the waits between double from
// Initial up to Max, with jitter.
type Retry struct {
	Attempts int
	Initial  time.Duration
	Max      time.Duration
}

// DefaultRetry rides out a node's restart (a few seconds) and a full
// queue.
var DefaultRetry = Retry{Attempts: 10, Initial: 100 * time.Millisecond, Max: 5 * time.Second}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends the requests with hc.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithRetry replaces DefaultRetry.
func WithRetry(r Retry) Option { return func(c *Client) { c.retry = r } }

// WithPolling sets how often a future polls its operation: first after
// first, then half again as long each time, up to longest (10 ms and 1 s
// by default). A benchmark that times operations polls at a fixed short
// interval (first = longest).
func WithPolling(first, longest time.Duration) Option {
	return func(c *Client) { c.poll = [2]time.Duration{first, max(first, longest)} }
}

// New is a client of the service at baseURL (such as http://127.0.0.1:8080)
// with API key apiKey.
func New(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), key: apiKey, hc: &http.Client{Timeout: 60 * time.Second}, retry: DefaultRetry,
		poll: [2]time.Duration{10 * time.Millisecond, time.Second}}
	for _, o := range opts {
		o(c)
	}
	if c.retry.Attempts < 1 {
		c.retry.Attempts = 1
	}
	return c
}

// FromEnv is a client of EnvURL with the key in $WTS_API_KEY.
func FromEnv(opts ...Option) *Client {
	return New(EnvURL(), os.Getenv("WTS_API_KEY"), opts...)
}

// EnvURL is $WTS_URL, or the address `wts serve` listens on by default.
func EnvURL() string {
	if url := os.Getenv("WTS_URL"); url != "" {
		return url
	}
	return "http://127.0.0.1:8080"
}

// Error is the service's error envelope: Code is the stable code
// (docs/errors.md), Status the HTTP status.
type Error struct {
	Status     int
	Code       string
	Message    string
	RequestID  string
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("wts: %d %s: %s (request %s)", e.Status, e.Code, e.Message, e.RequestID)
}

// IsCode reports whether err is the service's error with code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// retryable reports whether a request that ended with status (0: no
// answer) may pass if sent again.
func retryable(status int) bool {
	switch status {
	case 0, http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// do sends a request (body encoded as JSON when not nil), retrying as
// c.retry says, and decodes the answer into out when not nil.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
	}
	wait := c.retry.Initial
	for attempt := 1; ; attempt++ {
		status, err := c.once(ctx, method, path, raw, out)
		if err == nil || !retryable(status) || attempt >= c.retry.Attempts || ctx.Err() != nil {
			return err
		}
		pause := wait/2 + rand.N(wait/2+1)
		var e *Error
		if errors.As(err, &e) && e.RetryAfter > 0 {
			pause = e.RetryAfter
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(pause):
		}
		wait = min(2*wait, c.retry.Max)
	}
}

// once sends a request once: the answer's status (0 when none came) and
// its error.
func (c *Client) once(ctx context.Context, method, path string, raw []byte, out any) (int, error) {
	var rd io.Reader
	if raw != nil {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return -1, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, envelope(resp, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// envelope is the error an answer with a failing status carries.
func envelope(resp *http.Response, data []byte) *Error {
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		RequestID string `json:"request_id"`
	}
	e := &Error{Status: resp.StatusCode}
	if json.Unmarshal(data, &env) == nil && env.Error.Code != "" {
		e.Code, e.Message, e.RequestID = env.Error.Code, env.Error.Message, env.RequestID
	} else {
		e.Code, e.Message = "http_"+strconv.Itoa(resp.StatusCode), strings.TrimSpace(string(data))
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}
