package ctxcache

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseTTL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"3600s", time.Hour, ""},
		{"1.5s", 1500 * time.Millisecond, ""},
		{"0.000000001s", 1, ""},
		{"31536000s", MaxTTL, ""},
		{"10", 0, "suffix"},
		{"1h", 0, "suffix"},
		{"s", 0, "suffix"},
		{"", 0, "suffix"},
		{"-5s", 0, "positive number"},
		{"+5s", 0, "positive number"},
		{"0s", 0, "must be positive"},
		{"0.0s", 0, "must be positive"},
		{"1.s", 0, "positive number"},
		{".5s", 0, "positive number"},
		{"1.0000000001s", 0, "positive number"},
		{"31536001s", 0, "maximum"},
		{"99999999999999999999s", 0, "maximum"},
		{"1e3s", 0, "positive number"},
		{" 5s", 0, "positive number"},
	} {
		got, err := ParseTTL(tc.in)
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("ParseTTL(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseTTL(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.err)
		}
	}
}

func TestExpiration(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, ttl, expire string
		want              time.Time
		field             string
	}{
		{"default", "", "", now.Add(DefaultTTL), ""},
		{"ttl", "60s", "", now.Add(time.Minute), ""},
		{"expireTime Z", "", "2026-03-01T13:00:00Z", now.Add(time.Hour), ""},
		{"expireTime offset", "", "2026-03-01T14:00:00+02:00", now, "expireTime"},
		{"expireTime nanos", "", "2026-03-01T12:00:00.5Z", now.Add(500 * time.Millisecond), ""},
		{"both", "60s", "2026-03-01T13:00:00Z", time.Time{}, "ttl"},
		{"bad ttl", "60", "", time.Time{}, "ttl"},
		{"past", "", "2026-03-01T11:59:59Z", time.Time{}, "expireTime"},
		{"now", "", "2026-03-01T12:00:00Z", time.Time{}, "expireTime"},
		{"too far", "", "2027-03-02T12:00:00Z", time.Time{}, "expireTime"},
		{"no zone", "", "2026-03-01T13:00:00", time.Time{}, "expireTime"},
		{"date only", "", "2026-03-02", time.Time{}, "expireTime"},
	} {
		got, err := Expiration(tc.ttl, tc.expire, now)
		if tc.field == "" {
			if err != nil || !got.Equal(tc.want) {
				t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, %v; want an invalid %s", tc.name, got, err, tc.field)
		}
	}
}

// FuzzExpiration checks that whatever a client sends, the parser either
// refuses it as an invalid field or returns an expiry in (now, now+MaxTTL].
func FuzzExpiration(f *testing.F) {
	for _, s := range []string{"3600s", "1.5s", "10", "-1s", "0s", "2026-03-01T13:00:00Z", "9999999999999s", "1.0000000001s", ""} {
		f.Add(s, "")
		f.Add("", s)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, ttl, expire string) {
		got, err := Expiration(ttl, expire, now)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || (fe.Field != "ttl" && fe.Field != "expireTime") {
				t.Fatalf("Expiration(%q, %q): error %v is not a field error", ttl, expire, err)
			}
			return
		}
		if !got.After(now) || got.Sub(now) > MaxTTL {
			t.Fatalf("Expiration(%q, %q) = %v: outside (now, now+MaxTTL]", ttl, expire, got)
		}
		if ttl != "" {
			d, err := ParseTTL(ttl)
			if err != nil || !now.Add(d).Equal(got) {
				t.Fatalf("ParseTTL(%q) = %v, %v disagrees with Expiration", ttl, d, err)
			}
		}
	})
}
