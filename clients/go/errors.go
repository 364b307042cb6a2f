package delayq

import (
	"errors"
	"fmt"
)

// APIError is an error answer of the server: the document
// {"error": code, "message": text} with its HTTP status.
//
// Code is the stable code to branch on (CodeNotFound, CodeStaleDelivery,
// CodeInvalidDelay, ...); Message is a sentence for people. An answer
// that is not such a document (a proxy's HTML page, say) has the code
// "http_" followed by its status.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("delayq: %d %s: %s", e.Status, e.Code, e.Message)
}

// Retryable says whether the same request may succeed later: an outage
// (502, 503, 504), not bad input.
func (e *APIError) Retryable() bool {
	return e.Status == 502 || e.Status == 503 || e.Status == 504
}

// TransportError says no node answered: the connection was refused or
// broken, the request timed out, TLS refused the server's certificate,
// or the context ended first.
//
// For a push without a bizKey the message may or may not have been
// accepted: the client does not send it again on its own.
type TransportError struct {
	// Node is the base URL the last attempt went to.
	Node string
	// Err is the failure (a *url.Error, context.DeadlineExceeded, ...).
	Err error
}

func (e *TransportError) Error() string {
	if e.Node == "" {
		return fmt.Sprintf("delayq: %v", e.Err)
	}
	return fmt.Sprintf("delayq: %s: %v", e.Node, e.Err)
}

func (e *TransportError) Unwrap() error { return e.Err }

// IsCode reports whether err is (or wraps) an *APIError with this code.
func IsCode(err error, code string) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == code
}
