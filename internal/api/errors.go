package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/kvserve/kvserve/internal/engine"
)

// Code classifies an API error. Every dialect maps a Code to its HTTP
// status and its own error type string through the one table below, so
// the same failure has the same status in every dialect.
type Code uint8

// The error codes.
const (
	// CodeInternal: a server fault (500).
	CodeInternal Code = iota
	// CodeInvalidRequest: bad JSON, a bad or conflicting field (400).
	CodeInvalidRequest
	// CodeUnauthorized: a missing or unknown API key (401).
	CodeUnauthorized
	// CodeForbidden: the key is valid but not allowed this (403).
	CodeForbidden
	// CodeNotFound: an unknown model, route or resource (404).
	CodeNotFound
	// CodeTooLarge: the prompt does not fit the context or the KV pool, or
	// the body exceeds the size limit (413).
	CodeTooLarge
	// CodeRateLimited: the engine's queue is full; retry after a while (429).
	CodeRateLimited
	// CodeUnavailable: the model is still loading or the server is shutting
	// down (503).
	CodeUnavailable
	// CodeConflict: the request contradicts a resource that exists (409): a
	// context cache created idempotently under a display name already taken
	// by other contents.
	CodeConflict
	numCodes
)

// ErrorKind is one row of the error table: the HTTP status of a Code and
// the error type each dialect reports for it.
type ErrorKind struct {
	Status int
	// OpenAIType and OpenAICode fill OpenAI's error.type and error.code.
	OpenAIType, OpenAICode string
	// AnthropicType fills Anthropic's error.type.
	AnthropicType string
	// GeminiStatus fills Gemini's (Google RPC) error.status.
	GeminiStatus string
}

// errorTable is the one source of error statuses and type strings.
var errorTable = [numCodes]ErrorKind{
	CodeInternal:       {http.StatusInternalServerError, "server_error", "internal_error", "api_error", "INTERNAL"},
	CodeInvalidRequest: {http.StatusBadRequest, "invalid_request_error", "", "invalid_request_error", "INVALID_ARGUMENT"},
	CodeUnauthorized:   {http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "authentication_error", "UNAUTHENTICATED"},
	CodeForbidden:      {http.StatusForbidden, "permission_error", "permission_denied", "permission_error", "PERMISSION_DENIED"},
	CodeNotFound:       {http.StatusNotFound, "invalid_request_error", "not_found", "not_found_error", "NOT_FOUND"},
	CodeTooLarge:       {http.StatusRequestEntityTooLarge, "invalid_request_error", "context_length_exceeded", "request_too_large", "INVALID_ARGUMENT"},
	CodeRateLimited:    {http.StatusTooManyRequests, "rate_limit_error", "rate_limit_exceeded", "rate_limit_error", "RESOURCE_EXHAUSTED"},
	CodeUnavailable:    {http.StatusServiceUnavailable, "server_error", "service_unavailable", "overloaded_error", "UNAVAILABLE"},
	CodeConflict:       {http.StatusConflict, "invalid_request_error", "conflict", "invalid_request_error", "ALREADY_EXISTS"},
}

// Kind returns the table row of c.
func (c Code) Kind() ErrorKind {
	if c >= numCodes {
		c = CodeInternal
	}
	return errorTable[c]
}

// Status returns the HTTP status of c.
func (c Code) Status() int { return c.Kind().Status }

// Error is an error with an API error code, the message shown to the
// client, and optionally the offending parameter and a retry delay.
type Error struct {
	Code    Code
	Message string
	// Param names the request field at fault ("messages[2].content"), or "".
	Param string
	// OpenAICode overrides the table's OpenAI error.code (e.g.
	// "model_not_found").
	OpenAICode string
	// RetryAfter, when positive, is sent as the Retry-After header.
	RetryAfter time.Duration
	// Err is the underlying error, if any (not shown beyond Message).
	Err error
}

func (e *Error) Error() string { return "api: " + e.Message }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Status returns the HTTP status of the error.
func (e *Error) Status() int { return e.Code.Status() }

// Errorf returns an Error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// InvalidParam returns a 400 error about one request field.
func InvalidParam(param, format string, args ...any) *Error {
	return &Error{Code: CodeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// AsError maps any error to an API Error: an *Error is returned as is;
// engine errors, body-size errors and cancellations get their codes; the
// rest is internal, with a generic message (details stay in the server).
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &mb):
		return &Error{Code: CodeTooLarge, Message: fmt.Sprintf("request body exceeds the limit of %d bytes", mb.Limit), Err: err}
	case errors.Is(err, engine.ErrTooLong):
		return &Error{Code: CodeTooLarge, Message: trimPrefix(err.Error()), Err: err}
	case errors.Is(err, engine.ErrPinQuota):
		return &Error{Code: CodeRateLimited, Message: trimPrefix(err.Error()), RetryAfter: time.Minute, Err: err}
	case errors.Is(err, engine.ErrQueueFull):
		return &Error{Code: CodeRateLimited, Message: "the server is busy: too many requests are queued; retry later", RetryAfter: time.Second, Err: err}
	case errors.Is(err, engine.ErrInvalid):
		return &Error{Code: CodeInvalidRequest, Message: trimPrefix(err.Error()), Err: err}
	case errors.Is(err, engine.ErrClosed):
		return &Error{Code: CodeUnavailable, Message: "the server is shutting down", Err: err}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeUnavailable, Message: "the request was cancelled", Err: err}
	}
	return &Error{Code: CodeInternal, Message: "internal server error", Err: err}
}

// trimPrefix drops the "engine: " package prefix from an engine error
// message shown to clients.
func trimPrefix(s string) string {
	const p = "engine: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// SetErrorHeaders sets the headers every dialect sends with an error
// (Retry-After) before writing the status.
func SetErrorHeaders(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		secs := int((e.RetryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
}
