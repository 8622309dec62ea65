package billing

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/ledger"
	"github.com/kvserve/kvserve/internal/pricing"
)

// Service serves the ledger over HTTP: GET /v1/usage (a summary) and GET
// /v1/usage/records (the records). A key with usage.read sees its own
// tenant's usage; an admin key every tenant's, or one tenant's with
// ?tenant=.
type Service struct {
	mu   sync.Mutex // guards recs
	recs Records
	live LiveCaches
	book *pricing.Book
	now  func() time.Time
}

// NewService returns the service over recs (nil: metering is off, and the
// endpoints say so) priced by book; live, when set, adds live caches'
// storage.
func NewService(recs Records, book *pricing.Book, live LiveCaches) *Service {
	return &Service{recs: recs, live: live, book: book, now: time.Now}
}

// Book returns the price book.
func (s *Service) Book() *pricing.Book { return s.book }

// ErrOff: the server runs unmetered.
var ErrOff = &api.Error{Code: api.CodeNotFound, Message: "usage metering is off on this server (--usage-ledger off)"}

// Metered reports whether there is a ledger to read.
func (s *Service) Metered() bool { return s.records() != nil }

// UseRecords makes the service read recs from now on (a gateway's switch
// from its own ledger to the cluster's stream).
func (s *Service) UseRecords(recs Records) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = recs
}

func (s *Service) records() Records {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recs
}

// Summarize answers q now (ErrOff without a ledger).
func (s *Service) Summarize(ctx context.Context, q Query) (Summary, error) {
	recs := s.records()
	if recs == nil {
		return Summary{}, ErrOff
	}
	return Summarize(ctx, recs, s.live, s.book, q, s.now())
}

// query reads the common parameters: tenant, from, to; it enforces who may
// see what.
func (s *Service) query(r *http.Request) (Query, *api.Error) {
	id, ok := api.IdentityFrom(r.Context())
	if !ok {
		return Query{}, api.Errorf(api.CodeInternal, "billing: the usage endpoint is not behind HandleKeyed")
	}
	if !id.Has(api.PermissionUsageRead) && !id.Has(api.PermissionAdmin) {
		return Query{}, api.Errorf(api.CodeForbidden, "this API key's role %q may not read usage (it lacks usage.read)", id.Role)
	}
	v := r.URL.Query()
	var q Query
	q.Tenant = v.Get("tenant")
	if !id.Has(api.PermissionAdmin) {
		if q.Tenant != "" && q.Tenant != id.Tenant {
			return Query{}, api.Errorf(api.CodeForbidden, "this API key may read only its own tenant's usage")
		}
		q.Tenant = id.Tenant
	}
	var err error
	if q.From, err = parseTime(v.Get("from"), false); err != nil {
		return Query{}, api.InvalidParam("from", "%v", err)
	}
	if q.To, err = parseTime(v.Get("to"), true); err != nil {
		return Query{}, api.InvalidParam("to", "%v", err)
	}
	if !q.From.IsZero() && !q.To.IsZero() && !q.From.Before(q.To) {
		return Query{}, api.InvalidParam("to", "to must be after from")
	}
	return q, nil
}

// parseTime reads a date (YYYY-MM-DD, UTC; as an end, the day is
// included) or an RFC 3339 time; "" is unbounded.
func parseTime(s string, end bool) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.Parse(time.DateOnly, s); err == nil {
		if end {
			d = d.AddDate(0, 0, 1)
		}
		return d, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, &api.Error{Code: api.CodeInvalidRequest, Message: strconv.Quote(s) + " is neither a date (2026-12-02) nor an RFC 3339 time"}
	}
	return t, nil
}

// Summary serves GET /v1/usage?from=&to=&tenant=&group_by=day,model,key.
func (s *Service) Summary(w http.ResponseWriter, r *http.Request) {
	q, e := s.query(r)
	if e != nil {
		api.WriteOperatorError(w, e)
		return
	}
	by, err := ParseGroupBy(r.URL.Query().Get("group_by"))
	if err != nil {
		api.WriteOperatorError(w, api.InvalidParam("group_by", "%v", err))
		return
	}
	q.GroupBy = by
	sum, err := s.Summarize(r.Context(), q)
	if err != nil {
		api.WriteOperatorError(w, api.AsError(err))
		return
	}
	_ = api.WriteJSON(w, http.StatusOK, sum)
}

// Records serves GET /v1/usage/records?from=&to=&tenant=&format=jsonl|csv:
// the ledger's records in order of start, streamed.
func (s *Service) Records(w http.ResponseWriter, r *http.Request) {
	q, e := s.query(r)
	if e != nil {
		api.WriteOperatorError(w, e)
		return
	}
	recs := s.records()
	if recs == nil {
		api.WriteOperatorError(w, ErrOff)
		return
	}
	format := r.URL.Query().Get("format")
	var write func(ledger.Record) error
	var flush func() error
	switch format {
	case "", "jsonl":
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		write, flush = func(rec ledger.Record) error { return enc.Encode(rec) }, func() error { return nil }
	case "csv":
		w.Header().Set("Content-Type", "text/csv")
		cw := csv.NewWriter(w)
		if err := cw.Write(CSVHeader); err != nil {
			return
		}
		write = func(rec ledger.Record) error { return cw.Write(CSVRow(rec)) }
		flush = func() error { cw.Flush(); return cw.Error() }
	default:
		api.WriteOperatorError(w, api.InvalidParam("format", "format %q is not jsonl or csv", format))
		return
	}
	err := recs.Records(r.Context(), ledger.Filter{Tenant: q.Tenant, From: q.From, To: q.To}, write)
	if err == nil {
		err = flush()
	}
	if err != nil {
		// The status is sent: the body ends short, which a reader of
		// JSON lines or CSV sees as a cut last line.
		panic(http.ErrAbortHandler)
	}
}
