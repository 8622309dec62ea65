package grammar

import (
	"math/big"
	"strconv"
	"strings"
)

// maxMagnitude is the largest integer part a generated number has
// (maxIntDigits nines).
const maxMagnitude = int64(9999999999999999)

// bound is one end of a numeric range over integers: value v, open (v
// itself excluded) or closed, or absent.
type bound struct {
	set  bool
	v    int64
	open bool
}

// bounds is the range a number or integer schema allows, rounded inward
// to integer end points.
type bounds struct {
	lo, hi bound
}

func (b *bounds) any() bool { return b.lo.set || b.hi.set }

// read collects minimum, maximum, exclusiveMinimum and exclusiveMaximum
// (the draft 4 boolean forms too).
func (b *bounds) read(s *jnode, path string, c *schemaCompiler) error {
	num := func(k string) (*big.Rat, bool, error) {
		v := s.get(k)
		if v == nil || v.kind == 'b' {
			return nil, false, nil
		}
		if v.kind != 'n' {
			return nil, false, c.errf(path, "%s must be a number", k)
		}
		r, ok := parseRat(v.str)
		if !ok {
			return nil, false, c.errf(path, "%s %s is out of range", k, v.str)
		}
		return r, true, nil
	}
	flag := func(k string) bool {
		v := s.get(k)
		return v != nil && v.kind == 'b' && v.b
	}
	type lim struct {
		key  string
		open bool
	}
	for _, l := range []lim{{"minimum", flag("exclusiveMinimum")}, {"exclusiveMinimum", true}} {
		r, ok, err := num(l.key)
		if err != nil {
			return err
		}
		if ok {
			b.lo = tighterLow(b.lo, lowBound(r, l.open))
		}
	}
	for _, l := range []lim{{"maximum", flag("exclusiveMaximum")}, {"exclusiveMaximum", true}} {
		r, ok, err := num(l.key)
		if err != nil {
			return err
		}
		if ok {
			b.hi = tighterHigh(b.hi, highBound(r, l.open))
		}
	}
	return nil
}

// parseRat parses a JSON number exactly, clamping magnitudes far beyond
// what is generated (so a hostile exponent costs nothing).
func parseRat(s string) (*big.Rat, bool) {
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil || e > 40 || e < -40 {
			mant, ok := new(big.Rat).SetString(s[:i])
			if !ok {
				return nil, false
			}
			switch {
			case mant.Sign() == 0:
				return mant, true
			case strings.HasPrefix(s[i+1:], "-"):
				// A tiny magnitude: as good as zero for integer end points,
				// but keep its sign so that x > -tiny still allows 0.
				return new(big.Rat).SetFrac64(int64(mant.Sign()), 1<<62), true
			}
			return new(big.Rat).SetInt64(int64(mant.Sign()) * (maxMagnitude + 10)), true
		}
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

// lowBound turns x ≥ r (or x > r when open) into an integer bound: exact
// for integer r, rounded up to the next integer otherwise.
func lowBound(r *big.Rat, open bool) bound {
	if r.IsInt() {
		return bound{set: true, v: clampInt(r.Num()), open: open}
	}
	f := new(big.Int).Div(r.Num(), r.Denom()) // floor (Div rounds toward -inf for positive denominators)
	return bound{set: true, v: clampInt(f.Add(f, big.NewInt(1)))}
}

// highBound turns x ≤ r (or x < r when open) into an integer bound.
func highBound(r *big.Rat, open bool) bound {
	if r.IsInt() {
		return bound{set: true, v: clampInt(r.Num()), open: open}
	}
	f := new(big.Int).Div(r.Num(), r.Denom())
	return bound{set: true, v: clampInt(f)}
}

func clampInt(x *big.Int) int64 {
	lim := big.NewInt(maxMagnitude + 1)
	switch {
	case x.Cmp(lim) > 0:
		return maxMagnitude + 1
	case x.Cmp(new(big.Int).Neg(lim)) < 0:
		return -maxMagnitude - 1
	}
	return x.Int64()
}

func tighterLow(a, b bound) bound {
	switch {
	case !a.set:
		return b
	case b.v > a.v || b.v == a.v && b.open:
		return b
	}
	return a
}

func tighterHigh(a, b bound) bound {
	switch {
	case !a.set:
		return b
	case b.v < a.v || b.v == a.v && b.open:
		return b
	}
	return a
}

// node returns the numerals in the range: integers, or numbers with an
// optional fraction (no exponent).
func (b *bounds) node(integer bool) *node {
	lo, hi := b.lo, b.hi
	if !lo.set {
		lo = bound{set: true, v: -maxMagnitude}
	}
	if !hi.set {
		hi = bound{set: true, v: maxMagnitude}
	}
	if integer {
		l, h := lo.v, hi.v
		if lo.open {
			l++
		}
		if hi.open {
			h--
		}
		l, h = max(l, -maxMagnitude), min(h, maxMagnitude)
		var alts []*node
		if h >= 0 && max(l, 0) <= h {
			alts = append(alts, uintRange(max(l, 0), h))
		}
		if l < 0 {
			alts = append(alts, seq(lit("-"), uintRange(max(1, -h), -l)))
		}
		return alt(alts...)
	}
	unboundedHigh := !b.hi.set || hi.v > maxMagnitude
	unboundedLow := !b.lo.set || lo.v < -maxMagnitude
	var alts []*node
	// x ≥ 0 part.
	if hi.v > 0 || hi.v == 0 && !hi.open {
		a, aOpen := int64(0), false
		if lo.v >= 0 {
			a, aOpen = lo.v, lo.open
		}
		alts = append(alts, magnitudes(a, aOpen, min(hi.v, maxMagnitude), hi.open, unboundedHigh))
	}
	// x < 0 part, as "-" and a magnitude.
	if lo.v < 0 {
		a, aOpen := int64(0), true
		if hi.v < 0 {
			a, aOpen = -hi.v, hi.open
		}
		alts = append(alts, seq(lit("-"), magnitudes(a, aOpen, min(-lo.v, maxMagnitude), lo.open, unboundedLow)))
	}
	return alt(alts...)
}

// magnitudes matches numerals I or I.F (no sign) with value in the range
// from a (excluded when aOpen) to b (excluded when bOpen); unbounded means
// b is only the largest integer part generated.
func magnitudes(a int64, aOpen bool, b int64, bOpen, unbounded bool) *node {
	digit := class(rangeSet('0', '9'))
	fracAny := opt(seq(lit("."), repeat(digit, 1, maxFracDigits)))
	fracNonZero := seq(lit("."), repeat(digit, 0, maxFracDigits-1), class(rangeSet('1', '9')))
	if a > b || a == b && (aOpen || bOpen) && !unbounded {
		return neverNode
	}
	var alts []*node
	// Integer part a.
	if aOpen {
		alts = append(alts, seq(lit(strconv.FormatInt(a, 10)), fracNonZero))
	} else if a < b || unbounded {
		alts = append(alts, seq(lit(strconv.FormatInt(a, 10)), fracAny))
	} else {
		alts = append(alts, lit(strconv.FormatInt(a, 10)))
	}
	// Integer parts strictly between, any fraction.
	top := b - 1
	if unbounded {
		top = b
	}
	if a+1 <= top {
		alts = append(alts, seq(uintRange(a+1, top), fracAny))
	}
	// Integer part b: only exactly b.
	if !unbounded && b > a && !bOpen {
		alts = append(alts, lit(strconv.FormatInt(b, 10)))
	}
	return alt(alts...)
}

// uintRange matches the decimal numerals (no leading zeros) of the
// integers in [a, b], 0 ≤ a ≤ b.
func uintRange(a, b int64) *node {
	if a > b {
		return neverNode
	}
	var alts []*node
	la, lb := len(strconv.FormatInt(a, 10)), len(strconv.FormatInt(b, 10))
	p := int64(1)
	for i := 1; i < la; i++ {
		p *= 10
	}
	for n := la; n <= lb; n++ {
		lo, hi := max(a, p), min(b, p*10-1)
		if n == 1 {
			lo = a
		}
		alts = append(alts, sameLength(strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10)))
		p *= 10
	}
	return alt(alts...)
}

// sameLength matches the numerals of the same length from lo to hi.
func sameLength(lo, hi string) *node {
	if lo == hi {
		return lit(lo)
	}
	if lo[0] == hi[0] {
		return seq(lit(lo[:1]), sameLength(lo[1:], hi[1:]))
	}
	rest := len(lo) - 1
	digit := class(rangeSet('0', '9'))
	first, last := lo[0], hi[0]
	var alts []*node
	if strings.Trim(lo[1:], "0") != "" {
		alts = append(alts, seq(lit(lo[:1]), sameLength(lo[1:], strings.Repeat("9", rest))))
		first++
	}
	var tail *node
	if strings.Trim(hi[1:], "9") != "" {
		tail = seq(lit(hi[:1]), sameLength(strings.Repeat("0", rest), hi[1:]))
		last--
	}
	if first <= last {
		alts = append(alts, seq(class(rangeSet(first, last)), repeat(digit, rest, rest)))
	}
	if tail != nil {
		alts = append(alts, tail)
	}
	return alt(alts...)
}
