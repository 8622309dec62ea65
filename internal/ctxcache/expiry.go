package ctxcache

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxTTL is the longest a cache may live from now: a year. A pin that
// outlives that is a leak in all but name, and a bound keeps the
// arithmetic of expiry times far from overflow.
const MaxTTL = 365 * 24 * time.Hour

// DefaultTTL is a cache's lifetime when the request gives neither ttl nor
// expireTime (Gemini's default).
const DefaultTTL = time.Hour

// ParseTTL parses a ttl in protobuf Duration's JSON form, as Gemini sends
// it: decimal seconds with an "s" suffix and at most nine fractional
// digits ("3600s", "1.5s"). A bare number ("10"), a Go duration ("1h"), a
// sign, or a value that is not in (0, MaxTTL] is refused: the client would
// otherwise get a lifetime it did not mean.
func ParseTTL(s string) (time.Duration, error) {
	num, ok := strings.CutSuffix(s, "s")
	if !ok || num == "" {
		return 0, fmt.Errorf("ttl %q: want seconds with an \"s\" suffix, such as \"3600s\"", s)
	}
	whole, frac, hasFrac := strings.Cut(num, ".")
	if whole == "" || !digits(whole) || (hasFrac && (frac == "" || !digits(frac) || len(frac) > 9)) {
		return 0, fmt.Errorf("ttl %q: want a positive number of seconds (at most 9 decimals) with an \"s\" suffix, such as \"3600s\"", s)
	}
	if len(whole) > 12 { // beyond any valid value, and beyond int64 nanoseconds
		return 0, fmt.Errorf("ttl %q: longer than the maximum of %s", s, secs(MaxTTL))
	}
	w, _ := strconv.ParseInt(whole, 10, 64)
	d := time.Duration(w) * time.Second
	if hasFrac {
		ns, _ := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
		d += time.Duration(ns)
	}
	switch {
	case d <= 0:
		return 0, fmt.Errorf("ttl %q: must be positive", s)
	case d > MaxTTL:
		return 0, fmt.Errorf("ttl %q: longer than the maximum of %s", s, secs(MaxTTL))
	}
	return d, nil
}

// ParseExpireTime parses an expireTime in protobuf Timestamp's JSON form:
// RFC 3339 with a "Z" or an offset and up to nine fractional digits.
func ParseExpireTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("expireTime %q: want an RFC 3339 time such as \"2026-01-02T15:04:05Z\"", s)
	}
	return t.UTC(), nil
}

// Expiration resolves a request's ttl and expireTime (each "" when absent)
// into the expiry time: at most one may be given; neither means
// DefaultTTL; the result must be after now and no later than now+MaxTTL.
// The error names the field at fault (see FieldError).
func Expiration(ttl, expireTime string, now time.Time) (time.Time, error) {
	switch {
	case ttl != "" && expireTime != "":
		return time.Time{}, &FieldError{Field: "ttl", Msg: "give ttl or expireTime, not both"}
	case ttl != "":
		d, err := ParseTTL(ttl)
		if err != nil {
			return time.Time{}, &FieldError{Field: "ttl", Msg: err.Error()}
		}
		return now.Add(d).UTC(), nil
	case expireTime != "":
		t, err := ParseExpireTime(expireTime)
		if err != nil {
			return time.Time{}, &FieldError{Field: "expireTime", Msg: err.Error()}
		}
		if !t.After(now) {
			return time.Time{}, &FieldError{Field: "expireTime", Msg: fmt.Sprintf("expireTime %q is not in the future", expireTime)}
		}
		if t.Sub(now) > MaxTTL {
			return time.Time{}, &FieldError{Field: "expireTime", Msg: fmt.Sprintf("expireTime %q is more than %s from now", expireTime, secs(MaxTTL))}
		}
		return t, nil
	}
	return now.Add(DefaultTTL).UTC(), nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// secs formats d as Gemini writes durations: "3600s".
func secs(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) + "s" }
