package diskstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

const blockLen = 1000

func hashOf(s string) Hash { return sha256.Sum256([]byte(s)) }

func data(seed byte) []byte {
	b := make([]byte, blockLen)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func open_(t *testing.T, cfg Config) *Store {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Budget == 0 {
		cfg.Budget = 1 << 20
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// flush waits until the writer has written everything queued.
func flush(t *testing.T, s *Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		n := len(s.queued)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("queue not written")
		}
		time.Sleep(time.Millisecond)
	}
}

// fetch loads a chain and waits for it.
func fetch(t *testing.T, s *Store, scope Hash, chain ...Hash) int {
	t.Helper()
	return fetchWith(t, s.Fetch, scope, chain)
}

// fetchWith loads a chain with f (Store.Fetch or FetchAhead) and waits for
// it.
func fetchWith(t *testing.T, f func(Hash, []Hash, func()) int, scope Hash, chain []Hash) int {
	t.Helper()
	done := make(chan struct{}, 1)
	n := f(scope, chain, func() { done <- struct{}{} })
	if n > 0 {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("fetch did not end")
		}
	}
	return n
}

func TestRoundTripAndRestart(t *testing.T) {
	dir := t.TempDir()
	scope := hashOf("tenant-a")
	a, b := hashOf("a"), hashOf("b")
	// The writer waits until the queued blocks have been taken.
	gate := make(chan struct{})
	s := open_(t, Config{Dir: dir, WriteFile: func(path string, data []byte) error {
		<-gate
		return writeAtomic(filepath.Join(dir, "tmp"), path, data)
	}})
	s.Put(Block{Hash: a, Scope: scope, Class: 3, Data: data(1)})
	s.Put(Block{Hash: b, Scope: scope, Class: 2, Data: data(2)})
	// Queued blocks are served from memory before they reach the disk.
	if got, c, ok := s.Take(scope, a); !ok || c != 3 || !bytes.Equal(got, data(1)) {
		t.Fatalf("take of a queued block: ok %v class %d", ok, c)
	}
	close(gate)
	flush(t, s)
	if st := s.Stats(); st.Blocks != 2 || st.Written != 2 {
		t.Fatalf("stats after writing: %+v", st)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	s2 := open_(t, Config{Dir: dir})
	if !s2.Has(a) || !s2.Has(b) {
		t.Fatal("a reopened store lost its blocks")
	}
	if n := fetch(t, s2, scope, a, b, hashOf("absent")); n != 2 {
		t.Fatalf("fetch started %d loads, want 2", n)
	}
	for i, h := range []Hash{a, b} {
		got, _, ok := s2.Take(scope, h)
		if !ok || !bytes.Equal(got, data(byte(i+1))) {
			t.Fatalf("block %d after restart: ok %v", i, ok)
		}
	}
	// Taken blocks leave staging; their files stay.
	if _, _, ok := s2.Take(scope, a); ok {
		t.Fatal("a block was taken twice from staging")
	}
	if !s2.Has(a) {
		t.Fatal("taking a block deleted its file")
	}
}

func TestScopesDoNotMix(t *testing.T) {
	s := open_(t, Config{})
	a := hashOf("a")
	s.Put(Block{Hash: a, Scope: hashOf("t1"), Class: 2, Data: data(1)})
	if _, _, ok := s.Take(hashOf("t2"), a); ok {
		t.Fatal("another scope took a queued block")
	}
	flush(t, s)
	if n := fetch(t, s, hashOf("t2"), a); n != 0 {
		t.Fatal("another scope loaded a block")
	}
	// A file of one scope renamed to another hash, or read for another
	// scope, fails authentication.
	aead, err := s.cipherFor(hashOf("t1"), false)
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(s.blockPath(a))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open(aead, file, hashOf("t1"), hashOf("b")); err == nil {
		t.Fatal("a block opened under another hash")
	}
	if _, err := open(aead, file, hashOf("t2"), a); err == nil {
		t.Fatal("a block opened under another scope")
	}
}

func TestCorruptFilesAreMisses(t *testing.T) {
	cases := []struct {
		name   string
		damage func(path string) error
	}{
		{"flipped byte in the contents", func(p string) error { return flipByte(p, headerSize+10) }},
		{"flipped byte in the header", func(p string) error { return flipByte(p, 5) }},
		{"flipped tag", func(p string) error { return flipByte(p, int(fileSize(blockLen))-1) }},
		{"cut short", func(p string) error { return os.Truncate(p, fileSize(blockLen)-5) }},
		{"cut to nothing", func(p string) error { return os.Truncate(p, 0) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, restart := range []bool{false, true} {
				dir := t.TempDir()
				scope, a, b := hashOf("t"), hashOf("a"), hashOf("b")
				s := open_(t, Config{Dir: dir})
				s.Put(Block{Hash: a, Scope: scope, Class: 2, Data: data(1)})
				s.Put(Block{Hash: b, Scope: scope, Class: 2, Data: data(2)})
				flush(t, s)
				if err := tc.damage(s.blockPath(a)); err != nil {
					t.Fatal(err)
				}
				if restart {
					s.Close(context.Background())
					s = open_(t, Config{Dir: dir})
				}
				fetch(t, s, scope, a, b)
				if _, _, ok := s.Take(scope, a); ok {
					t.Fatalf("restart %v: a damaged block was served", restart)
				}
				// The chain stops at the damaged block: b is not loaded.
				if _, _, ok := s.Take(scope, b); ok {
					t.Fatalf("restart %v: a block after a miss was loaded", restart)
				}
				if st := s.Stats(); st.Corrupt != 1 || st.Blocks != 1 {
					t.Fatalf("restart %v: stats %+v, want 1 corrupt, 1 block left", restart, st)
				}
				if _, err := os.Stat(s.blockPath(a)); !os.IsNotExist(err) {
					t.Fatalf("restart %v: the damaged file is still there", restart)
				}
				// The store keeps serving.
				if fetch(t, s, scope, b); !hasTake(s, scope, b) {
					t.Fatalf("restart %v: a sound block was not served after a corrupt one", restart)
				}
			}
		})
	}
}

func (s *Store) queueLen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

func hasTake(s *Store, scope, h Hash) bool { _, _, ok := s.Take(scope, h); return ok }

func flipByte(path string, off int) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	b[off] ^= 0x40
	return os.WriteFile(path, b, 0o600)
}

func TestFullDisk(t *testing.T) {
	var mu sync.Mutex
	full := true
	dir := t.TempDir()
	s := open_(t, Config{Dir: dir, WriteFile: func(path string, b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if full {
			return syscall.ENOSPC
		}
		return writeAtomic(filepath.Join(dir, "tmp"), path, b)
	}})
	scope := hashOf("t")
	for i := range 5 {
		s.Put(Block{Hash: hashOf(string(rune('a' + i))), Scope: scope, Class: 2, Data: data(byte(i))})
	}
	flush(t, s)
	if st := s.Stats(); st.WriteErrors != 5 || st.Blocks != 0 || st.Bytes != 0 {
		t.Fatalf("full disk: %+v", st)
	}
	mu.Lock()
	full = false
	mu.Unlock()
	s.Put(Block{Hash: hashOf("z"), Scope: scope, Class: 2, Data: data(9)})
	flush(t, s)
	if fetch(t, s, scope, hashOf("z")); !hasTake(s, scope, hashOf("z")) {
		t.Fatal("the store did not recover when the disk had room again")
	}
}

func TestBudgetEvictsLowestClassThenLRU(t *testing.T) {
	size := fileSize(blockLen)
	s := open_(t, Config{Budget: 3 * size})
	scope := hashOf("t")
	put := func(name string, class uint8) {
		s.Put(Block{Hash: hashOf(name), Scope: scope, Class: class, Data: data(1)})
		flush(t, s)
	}
	put("p1", 3)
	put("s1", 2)
	put("s2", 2)
	put("s3", 2) // evicts s1, the oldest of the lowest class
	if s.Has(hashOf("s1")) || !s.Has(hashOf("s2")) || !s.Has(hashOf("p1")) {
		t.Fatal("eviction did not take the oldest session block")
	}
	s.Put(Block{Hash: hashOf("s2"), Scope: scope, Class: 2}) // already there: marked used
	put("p2", 3)                                             // evicts s3, now the oldest session block
	if s.Has(hashOf("s3")) || !s.Has(hashOf("s2")) {
		t.Fatal("a block marked used was evicted before an older one")
	}
	put("e1", 1) // lower than everything stored: not kept
	if s.Has(hashOf("e1")) {
		t.Fatal("a block worth less than every stored one displaced one")
	}
	if st := s.Stats(); st.Bytes > 3*size || st.Blocks != 3 {
		t.Fatalf("over budget: %+v", st)
	}
}

func TestFullQueueDropsLowestClass(t *testing.T) {
	release := make(chan struct{})
	dir := t.TempDir()
	s := open_(t, Config{Dir: dir, Queue: 2, WriteFile: func(path string, b []byte) error {
		<-release
		return writeAtomic(filepath.Join(dir, "tmp"), path, b)
	}})
	scope := hashOf("t")
	s.Put(Block{Hash: hashOf("first"), Scope: scope, Class: 2, Data: data(1)}) // taken by the writer, blocked
	deadline := time.Now().Add(5 * time.Second)
	for s.queueLen() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	s.Put(Block{Hash: hashOf("low"), Scope: scope, Class: 1, Data: data(2)})
	s.Put(Block{Hash: hashOf("mid"), Scope: scope, Class: 2, Data: data(3)})
	if !s.Put(Block{Hash: hashOf("high"), Scope: scope, Class: 3, Data: data(4)}) {
		t.Fatal("a higher-class block was refused by a queue holding a lower one")
	}
	if s.Put(Block{Hash: hashOf("low2"), Scope: scope, Class: 1, Data: data(5)}) {
		t.Fatal("a block lower than everything queued was taken")
	}
	if s.Has(hashOf("low")) || !s.Has(hashOf("mid")) {
		t.Fatal("the full queue did not drop its lowest-class block")
	}
	if st := s.Stats(); st.Dropped != 2 || st.QueueDepth != 3 {
		t.Fatalf("stats %+v", st)
	}
	close(release)
	flush(t, s)
	if st := s.Stats(); st.Blocks != 3 {
		t.Fatalf("written %d blocks, want 3", st.Blocks)
	}
}

func TestForgetScopeShredsKey(t *testing.T) {
	dir := t.TempDir()
	s := open_(t, Config{Dir: dir})
	t1, t2 := hashOf("t1"), hashOf("t2")
	a, b := hashOf("a"), hashOf("b")
	s.Put(Block{Hash: a, Scope: t1, Class: 2, Data: data(1)})
	s.Put(Block{Hash: b, Scope: t2, Class: 2, Data: data(2)})
	flush(t, s)
	stolen, err := os.ReadFile(s.blockPath(a))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetScope(t1); err != nil {
		t.Fatal(err)
	}
	if s.Has(a) || !s.Has(b) {
		t.Fatal("forgetting a scope removed the wrong blocks")
	}
	if _, err := os.Stat(s.blockPath(a)); !os.IsNotExist(err) {
		t.Fatal("a forgotten scope's file is still there")
	}
	// The same scope comes back with a new key: the old file is noise.
	s.Put(Block{Hash: hashOf("c"), Scope: t1, Class: 2, Data: data(3)})
	flush(t, s)
	aead, err := s.cipherFor(t1, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open(aead, stolen, t1, a); err == nil {
		t.Fatal("a file of a forgotten scope opened under the scope's new key")
	}
	// A surviving copy put back in place is dropped at the next start.
	os.WriteFile(s.blockPath(a), stolen, 0o600)
	s.Close(context.Background())
	s2 := open_(t, Config{Dir: dir})
	fetch(t, s2, t1, a)
	if hasTake(s2, t1, a) {
		t.Fatal("a shredded block was served")
	}

	// Shredding a closed store's scope: its files are gone at the next open.
	s2.Close(context.Background())
	if err := ShredScope(dir, t2); err != nil {
		t.Fatal(err)
	}
	s3 := open_(t, Config{Dir: dir})
	if s3.Has(b) || !s3.Has(hashOf("c")) {
		t.Fatal("a shredded scope's block survived the next open, or another's did not")
	}
}

func TestOneProcessPerDirectory(t *testing.T) {
	dir := t.TempDir()
	open_(t, Config{Dir: dir})
	if _, err := Open(Config{Dir: dir, Budget: 1 << 20}); err == nil {
		t.Fatal("a second store opened a directory in use")
	}
}

func TestMasterKeyOpenToOthersIsRefused(t *testing.T) {
	dir := t.TempDir()
	s := open_(t, Config{Dir: dir})
	s.Close(context.Background())
	if err := os.Chmod(filepath.Join(dir, "master.key"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: dir, Budget: 1 << 20}); err == nil {
		t.Fatal("a world-readable master key was used")
	}
}

func TestCloseWritesTheQueue(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir, Budget: 1 << 20, Queue: 100})
	if err != nil {
		t.Fatal(err)
	}
	scope := hashOf("t")
	for i := range 50 {
		s.Put(Block{Hash: hashOf(hex.EncodeToString([]byte{byte(i)})), Scope: scope, Class: 2, Data: data(byte(i))})
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2 := open_(t, Config{Dir: dir})
	if st := s2.Stats(); st.Blocks != 50 {
		t.Fatalf("%d blocks after close and reopen, want 50", st.Blocks)
	}
}

func FuzzParseHeader(f *testing.F) {
	h := header{class: 2, scope: hashOf("s"), hash: hashOf("h"), length: 100}
	f.Add(h.marshal(nil))
	f.Add([]byte("KVG3"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHeader(b)
		if err != nil {
			return
		}
		if h.length > maxBlockBytes {
			t.Fatalf("accepted a length of %d", h.length)
		}
		if again, err := parseHeader(h.marshal(nil)); err != nil || again != h {
			t.Fatalf("header %+v does not round-trip: %+v, %v", h, again, err)
		}
	})
}

// BenchmarkFetch reads a chain of 64 blocks of a small model's size back
// from files the page cache holds: the cost G3 adds to a hit.
func BenchmarkFetch(b *testing.B) {
	const n, size = 64, 368640
	s, err := Open(Config{Dir: b.TempDir(), Budget: 1 << 30, Staging: 1 << 30, Queue: n})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	scope := hashOf("t")
	chain := make([]Hash, n)
	for i := range chain {
		chain[i] = hashOf(hex.EncodeToString([]byte{byte(i)}))
		s.Put(Block{Hash: chain[i], Scope: scope, Class: 2, Data: make([]byte, size)})
	}
	for s.Stats().QueueDepth > 0 {
		time.Sleep(time.Millisecond)
	}
	b.SetBytes(n * size)
	done := make(chan struct{}, 1)
	for b.Loop() {
		if s.Fetch(scope, chain, func() { done <- struct{}{} }) > 0 {
			<-done
		}
		for _, h := range chain {
			s.Take(scope, h)
		}
	}
}

// TestIndexOnly: the simulator's store keeps the bookkeeping — budget,
// classes, scopes — and touches no file.
func TestIndexOnly(t *testing.T) {
	s, err := Open(Config{IndexOnly: true, BlockBytes: 100, Budget: 250})
	if err != nil {
		t.Fatal(err)
	}
	scope := hashOf("t")
	s.Put(Block{Hash: hashOf("a"), Scope: scope, Class: 2})
	s.Put(Block{Hash: hashOf("b"), Scope: scope, Class: 3})
	s.Put(Block{Hash: hashOf("c"), Scope: scope, Class: 2}) // evicts a
	if s.Has(hashOf("a")) || !s.Has(hashOf("b")) || !s.Has(hashOf("c")) {
		t.Fatal("index-only eviction")
	}
	if s.Fetch(scope, []Hash{hashOf("b")}, func() { t.Error("done called") }) != 0 {
		t.Fatal("an index-only fetch has something to wait for")
	}
	if data, c, ok := s.Take(scope, hashOf("b")); !ok || data != nil || c != 3 {
		t.Fatalf("take: %v %d %v", data, c, ok)
	}
	if _, _, ok := s.Take(hashOf("other"), hashOf("b")); ok {
		t.Fatal("another scope took a block")
	}
	if err := s.ForgetScope(scope); err != nil || s.Has(hashOf("b")) {
		t.Fatalf("forget: %v", err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestCrashLeftovers: what a kill -9 in the middle of writing leaves — a
// temporary file, a block file cut short — is cleaned up at the next open;
// the blocks written whole are kept.
func TestCrashLeftovers(t *testing.T) {
	dir := t.TempDir()
	s := open_(t, Config{Dir: dir})
	scope := hashOf("t")
	for _, name := range []string{"a", "b", "c"} {
		s.Put(Block{Hash: hashOf(name), Scope: scope, Class: 2, Data: data(1)})
	}
	flush(t, s)
	s.Close(context.Background())
	if err := os.WriteFile(filepath.Join(dir, "tmp", "w-123"), []byte("half a block"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(s.blockPath(hashOf("b")), headerSize+7); err != nil {
		t.Fatal(err)
	}
	s2 := open_(t, Config{Dir: dir})
	if tmps, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(tmps) != 0 {
		t.Fatalf("%d temporary files left", len(tmps))
	}
	if st := s2.Stats(); st.Blocks != 2 || st.Corrupt != 1 || !s2.Has(hashOf("a")) || s2.Has(hashOf("b")) {
		t.Fatalf("after the crash: %+v", st)
	}
	fetch(t, s2, scope, hashOf("a"))
	if !hasTake(s2, scope, hashOf("a")) {
		t.Fatal("a block written whole was lost")
	}
}

// TestStagedBlocksExpire: a loaded block nobody takes is dropped after
// stageTTL rather than held until the staging budget pushes it out.
func TestStagedBlocksExpire(t *testing.T) {
	s := open_(t, Config{})
	scope, a, b := hashOf("t"), hashOf("a"), hashOf("b")
	s.Put(Block{Hash: a, Scope: scope, Class: 2, Data: data(1)})
	s.Put(Block{Hash: b, Scope: scope, Class: 2, Data: data(2)})
	flush(t, s)
	fetch(t, s, scope, a)
	s.mu.Lock()
	s.stage[a].at = time.Now().Add(-2 * stageTTL)
	s.mu.Unlock()
	fetch(t, s, scope, b) // prunes on the way
	if st := s.Stats(); st.Staged != 1 || hasTake(s, scope, a) || !hasTake(s, scope, b) {
		t.Fatalf("staging after expiry: %+v", st)
	}
}

// TestFetchAhead: blocks fetched on a guess fill at most half of the
// staging area and are the first to go when a request's blocks need the
// room; a guessed block a request then asks for is the request's.
func TestFetchAhead(t *testing.T) {
	s := open_(t, Config{Staging: 4 * blockLen})
	scope := hashOf("t")
	chain := func(name string) []Hash {
		c := make([]Hash, 4)
		for i := range c {
			c[i] = hashOf(fmt.Sprintf("%s%d", name, i))
			s.Put(Block{Hash: c[i], Scope: scope, Class: 2, Data: data(byte(i))})
		}
		return c
	}
	x, y := chain("x"), chain("y")
	flush(t, s)
	fetchWait := func(ahead bool, c []Hash) int {
		t.Helper()
		if ahead {
			return fetchWith(t, s.FetchAhead, scope, c)
		}
		return fetchWith(t, s.Fetch, scope, c)
	}
	staged := func(want ...Hash) {
		t.Helper()
		if st := s.Stats(); st.Staged != len(want) {
			t.Fatalf("%d blocks staged, want %d", st.Staged, len(want))
		}
		for _, h := range want {
			s.mu.Lock()
			_, ok := s.stage[h]
			s.mu.Unlock()
			if !ok {
				t.Fatalf("block %x not staged", h[:2])
			}
		}
	}
	if n := fetchWait(true, x); n != 2 {
		t.Fatalf("a guess started %d loads, want 2 (half of a staging area of 4)", n)
	}
	staged(x[0], x[1])
	if n := fetchWait(true, x); n != 0 {
		t.Fatalf("a guess with half the staging full started %d loads", n)
	}
	if n := fetchWait(false, y); n != 4 {
		t.Fatalf("a request's fetch started %d loads, want 4 (the guesses' room too)", n)
	}
	staged(y...)
	for _, h := range y {
		if !hasTake(s, scope, h) {
			t.Fatal("a request's block was not there to take")
		}
	}
	staged()

	fetchWait(true, x)
	staged(x[0], x[1])
	if n := fetchWait(false, x[:1]); n != 0 { // asked for: no longer a guess
		t.Fatalf("a staged guess asked for started %d loads", n)
	}
	if n := fetchWait(false, y[:3]); n != 3 {
		t.Fatalf("a request's fetch started %d loads, want 3", n)
	}
	staged(x[0], y[0], y[1], y[2])
}

// TestPutCopy: a block put with PutCopy is written as it was when put,
// whatever its caller does with the buffer afterwards, and a block the full
// queue drops costs no copy.
func TestPutCopy(t *testing.T) {
	s := open_(t, Config{Queue: 2})
	scope := hashOf("t")
	buf := data(1)
	s.writeMu.Lock() // the writer waits, so the queue fills
	for _, name := range []string{"a", "b"} {
		if !s.PutCopy(Block{Hash: hashOf(name), Scope: scope, Class: 2, Data: buf}) {
			s.writeMu.Unlock()
			t.Fatalf("block %s not taken", name)
		}
	}
	dropped := Block{Hash: hashOf("c"), Scope: scope, Class: 2, Data: buf}
	allocs := testing.AllocsPerRun(10, func() { s.PutCopy(dropped) })
	clear(buf)
	s.writeMu.Unlock()
	if allocs != 0 || s.Stats().Dropped == 0 {
		t.Fatalf("a block the full queue drops: %v allocations, %d dropped", allocs, s.Stats().Dropped)
	}
	flush(t, s)
	fetch(t, s, scope, hashOf("a"))
	if got, _, ok := s.Take(scope, hashOf("a")); !ok || !bytes.Equal(got, data(1)) {
		t.Fatal("the block written is not the data as it was when put")
	}
}
