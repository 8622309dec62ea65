package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxJSONDepth bounds the nesting of request bodies (objects and arrays).
// Tool schemas are the deepest legitimate bodies and stay far below it.
const MaxJSONDepth = 64

// DecodeJSON reads the request body (already limited by the server) and
// decodes it into v. Unknown fields are ignored; trailing data after the
// value, nesting deeper than MaxJSONDepth, and type mismatches are 400
// errors naming the field; a body over the limit is a 413.
func DecodeJSON(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return AsError(err)
		}
		return &Error{Code: CodeInvalidRequest, Message: "could not read the request body", Err: err}
	}
	return DecodeJSONBytes(body, v)
}

// DecodeJSONBytes decodes one JSON value from body into v, with DecodeJSON's
// checks.
func DecodeJSONBytes(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return Errorf(CodeInvalidRequest, "the request body is empty; expected a JSON object")
	}
	if err := checkDepth(body, MaxJSONDepth); err != nil {
		return &Error{Code: CodeInvalidRequest, Message: err.Error(), Err: err}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return jsonError(err)
	}
	return nil
}

// jsonError turns a decoding error into a 400 with a useful message.
func jsonError(err error) *Error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, se), Err: err}
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("invalid JSON: expected %s, got %s", te.Type, te.Value), Err: err}
		}
		return &Error{Code: CodeInvalidRequest, Param: field, Message: fmt.Sprintf("invalid type for %q: expected %s, got %s", field, te.Type, te.Value), Err: err}
	}
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	return &Error{Code: CodeInvalidRequest, Message: "invalid JSON: " + err.Error(), Err: err}
}

// checkDepth scans body and fails if arrays and objects nest deeper than
// max. It tracks strings so brackets inside them do not count; it does not
// validate anything else (json.Unmarshal does).
func checkDepth(body []byte, max int) error {
	depth := 0
	inString, escaped := false, false
	for _, c := range body {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > max {
				return fmt.Errorf("JSON nested deeper than %d levels", max)
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}

// WriteJSON writes v as a JSON response with status.
func WriteJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("api: encode response: %w", err)
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, err = w.Write(b)
	return err
}

// AppendJSONString appends s as a JSON string literal (quotes included),
// escaping as encoding/json does except that it leaves <, > and & alone.
// Invalid UTF-8 becomes U+FFFD. It takes a string or a byte slice and lets
// hot paths build JSON without reflection or allocation.
func AppendJSONString[T ~string | ~[]byte](dst []byte, s T) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := decodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\ufffd"...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Duration is a time span read from JSON as a Go duration string ("5m",
// "1h30m") or a number of seconds.
type Duration time.Duration

// UnmarshalJSON accepts "5m" or 300.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			if secs, err2 := strconv.ParseFloat(s, 64); err2 == nil {
				return d.setSeconds(secs)
			}
			return fmt.Errorf("invalid duration %q (want e.g. \"5m\" or a number of seconds)", s)
		}
		if v < 0 {
			return fmt.Errorf("negative duration %q", s)
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("invalid duration %s (want e.g. \"5m\" or a number of seconds)", b)
	}
	return d.setSeconds(secs)
}

func (d *Duration) setSeconds(secs float64) error {
	if secs < 0 || secs > 10*365*24*3600 {
		return fmt.Errorf("duration %v s out of range", secs)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// decodeRune decodes the first rune of a string or byte slice.
func decodeRune[T ~string | ~[]byte](s T) (rune, int) {
	switch v := any(s).(type) {
	case string:
		return utf8.DecodeRuneInString(v)
	case []byte:
		return utf8.DecodeRune(v)
	}
	return utf8.DecodeRuneInString(string(s))
}

// UnknownField decodes body into v again, refusing fields v does not
// have, and names the first unknown one ("" when there is none). Dialects
// that forbid unknown fields call it after DecodeJSONBytes and word the
// refusal their own way; any other decoding error is returned as err.
func UnknownField(body []byte, v any) (field string, err error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		const unknown = "json: unknown field "
		if msg := err.Error(); strings.HasPrefix(msg, unknown) {
			return strings.Trim(strings.TrimPrefix(msg, unknown), `"`), nil
		}
		return "", err
	}
	return "", nil
}
