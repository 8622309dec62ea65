// Package diskstore is the KV cache's disk tier (G3): blocks evicted from
// memory are written to files under a directory of their own, encrypted
// with a key per scope (tenant), and found again by hash — also by the next
// process that opens the directory, so a restarted server still has them.
//
// Writes are asynchronous: Put queues a block and returns; one writer
// goroutine seals and writes the queue in order. The queue is bounded:
// when it is full the lowest-class block waiting is dropped, never the
// caller blocked. Reads are asynchronous too: Fetch starts loading a chain
// of blocks into memory (staging) and calls back when they are there; Take
// then hands a staged (or still queued) block over at memory speed.
//
// Keys. A 32-byte master key lives in the directory (0600). Each scope
// gets a random salt of its own; its AES-256-GCM key is HKDF-SHA256(master,
// salt). ForgetScope deletes the salt and the scope's files: the key cannot
// be derived again, so any copy of those files that survives is noise
// (crypto-shredding). Every file authenticates its header (scope, hash,
// class, length) with its contents; a file that fails is a miss, counted
// and deleted, never served.
//
// Durability. Files are written to a temporary name and renamed into
// place, without fsync: a crash can lose or truncate recent blocks, which
// then fail authentication and are recomputed. It is a cache.
package diskstore

import (
	"bytes"
	"container/list"
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// ErrInUse means another process holds the store's directory.
var ErrInUse = errors.New("diskstore: the directory is in use by another process")

// Hash is a block hash or a scope salt (kv.Hash).
type Hash = [32]byte

// NumClasses bounds the retention classes (kv.NumClasses).
const NumClasses = 8

// Block is a block to store: its chained hash, the scope it belongs to,
// its retention class and its contents.
type Block struct {
	Hash, Scope Hash
	Class       uint8
	Data        []byte
}

// Config configures a Store.
type Config struct {
	// Dir is the store's directory (created 0700).
	Dir string
	// Budget is the most bytes of block files kept; the lowest class,
	// then the least recently used, go first.
	Budget int64
	// Queue bounds the blocks waiting to be written (default 64).
	Queue int
	// Staging bounds the bytes of loaded blocks held for Take (default:
	// 64 blocks of the first block's size).
	Staging int64
	// Logger receives failures (default: discard).
	Logger *slog.Logger
	// Events, when set, is told of blocks that became findable on disk
	// (stored) and stopped being (removed). It is called without the
	// store's locks held, from the store's goroutines or the caller's.
	Events func(stored bool, class uint8, hashes []Hash)
	// WriteFile writes a file image atomically (default: a temporary file
	// renamed into place). Tests replace it to act as a full disk.
	WriteFile func(path string, data []byte) error
	// IndexOnly keeps the bookkeeping without the data or any file (for
	// the simulator, whose blocks hold nothing): a block put is indexed at
	// once as BlockBytes large, and one indexed is at hand at once. Dir,
	// keys and the writer are not used.
	IndexOnly  bool
	BlockBytes int64
}

// Stats counts the store's contents and traffic.
type Stats struct {
	Blocks int
	Bytes  int64
	// QueueDepth counts the blocks waiting to be written or being written.
	QueueDepth int
	Staged     int
	// Written blocks; WriteErrors failed writes (the block dropped);
	// Dropped blocks refused or pushed out of a full queue; Evicted files
	// deleted for room.
	Written, WriteErrors, Dropped, Evicted int64
	// Loaded blocks read back; Corrupt files that failed to open (deleted);
	// Hits blocks handed to Take; LoadNanos the time spent loading.
	Loaded, Corrupt, Hits, LoadNanos int64
	// ByClass counts the blocks on disk by retention class.
	ByClass [NumClasses]int
}

type entry struct {
	hash, scope Hash
	class       uint8
	size        int64
}

type staged struct {
	scope Hash
	class uint8
	data  []byte
	at    time.Time     // when it was loaded
	guess bool          // loaded by FetchAhead and not asked for since
	el    *list.Element // in Store.stageOrder, or guessOrder for a guess
}

// stageTTL bounds how long a loaded block waits to be taken: one that its
// request no longer wants (cancelled, or served from elsewhere) does not
// hold memory until the staging budget pushes it out.
const stageTTL = 30 * time.Second

// Store is a disk tier. It is safe for concurrent use.
type Store struct {
	cfg    Config
	master []byte
	unlock func()

	// writeMu is held for a whole write (and by ForgetScope), so a scope
	// forgotten cannot get a file back from a write in flight.
	writeMu sync.Mutex

	mu         sync.Mutex
	entries    map[Hash]*list.Element
	lists      [NumClasses]*list.List // per class; front = least recently used
	used       int64
	queue      []*Block
	queued     map[Hash]*Block // waiting or being written
	stage      map[Hash]*staged
	stageOrder *list.List // front = oldest
	guessOrder *list.List // the staged guesses, front = oldest
	stageBytes int64
	guessBytes int64 // of stageBytes, the staged guesses'
	loading    map[Hash]bool
	guessed    map[Hash]bool // loading for FetchAhead only
	aeads      map[Hash]cipher.AEAD
	stats      Stats
	closing    bool
	abort      bool

	wake    chan struct{}
	written chan struct{} // closed when the writer has ended
	loaders sync.WaitGroup
}

// Open opens (creating if needed) the store in cfg.Dir, indexes the blocks
// it holds, and starts its writer. Only one process may have a directory
// open at a time.
func Open(cfg Config) (*Store, error) {
	if cfg.IndexOnly {
		return openIndexOnly(cfg)
	}
	if cfg.Dir == "" {
		return nil, errors.New("diskstore: no directory")
	}
	if cfg.Budget <= 0 {
		return nil, fmt.Errorf("diskstore: budget %d bytes", cfg.Budget)
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.WriteFile == nil {
		tmp := filepath.Join(cfg.Dir, "tmp")
		cfg.WriteFile = func(path string, data []byte) error { return writeAtomic(tmp, path, data) }
	}
	for _, d := range []string{cfg.Dir, filepath.Join(cfg.Dir, "blocks"), filepath.Join(cfg.Dir, "keys"), filepath.Join(cfg.Dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("diskstore: %w", err)
		}
	}
	unlock, err := lockDir(filepath.Join(cfg.Dir, "lock"))
	if err != nil {
		return nil, err
	}
	master, err := loadMaster(filepath.Join(cfg.Dir, "master.key"))
	if err != nil {
		unlock()
		return nil, err
	}
	s := &Store{
		cfg: cfg, master: master, unlock: unlock,
		entries: map[Hash]*list.Element{}, queued: map[Hash]*Block{},
		stage: map[Hash]*staged{}, stageOrder: list.New(), guessOrder: list.New(), loading: map[Hash]bool{}, guessed: map[Hash]bool{},
		aeads: map[Hash]cipher.AEAD{}, wake: make(chan struct{}, 1), written: make(chan struct{}),
	}
	for c := range s.lists {
		s.lists[c] = list.New()
	}
	// Temporary files are writes a crash interrupted.
	if tmps, err := os.ReadDir(filepath.Join(cfg.Dir, "tmp")); err == nil {
		for _, t := range tmps {
			os.Remove(filepath.Join(cfg.Dir, "tmp", t.Name()))
		}
	}
	if err := s.scan(); err != nil {
		unlock()
		return nil, err
	}
	go s.writer()
	return s, nil
}

// loadMaster reads the master key, creating it on first use. A key that
// others can read is refused rather than used.
func loadMaster(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key := make([]byte, 32)
		rand.Read(key)
		if err := os.WriteFile(path+".new", key, 0o600); err != nil {
			return nil, fmt.Errorf("diskstore: master key: %w", err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			return nil, fmt.Errorf("diskstore: master key: %w", err)
		}
		return key, nil
	}
	if err != nil {
		return nil, fmt.Errorf("diskstore: master key: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("diskstore: master key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("diskstore: master key %s is open to others (mode %o): chmod 600 it", path, fi.Mode().Perm())
	}
	if len(b) != 32 {
		return nil, fmt.Errorf("diskstore: master key %s has %d bytes, want 32", path, len(b))
	}
	return b, nil
}

// scan indexes the block files, oldest use first, deleting any that are
// not well-framed blocks or whose scope's key was destroyed.
func (s *Store) scan() error {
	type found struct {
		e     entry
		mtime time.Time
	}
	var all []found
	root := filepath.Join(s.cfg.Dir, "blocks")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		e, mtime, err := s.readEntry(path, d)
		if err != nil {
			s.cfg.Logger.Warn("kv disk tier: dropping unreadable block file", "file", path, "err", err)
			s.stats.Corrupt++
			os.Remove(path)
			return nil
		}
		all = append(all, found{e, mtime})
		return nil
	})
	if err != nil {
		return fmt.Errorf("diskstore: index %s: %w", root, err)
	}
	slices.SortFunc(all, func(a, b found) int { return a.mtime.Compare(b.mtime) })
	for _, f := range all {
		e := f.e
		s.entries[e.hash] = s.lists[e.class].PushBack(&e)
		s.used += e.size
	}
	removed := s.evictLocked(0, NumClasses)
	s.removeFiles(removed)
	return nil
}

// readEntry reads a block file's header.
func (s *Store) readEntry(path string, d fs.DirEntry) (entry, time.Time, error) {
	fi, err := d.Info()
	if err != nil {
		return entry{}, time.Time{}, err
	}
	f, err := os.Open(path)
	if err != nil {
		return entry{}, time.Time{}, err
	}
	defer f.Close()
	buf := make([]byte, headerSize)
	if _, err := io.ReadFull(f, buf); err != nil {
		return entry{}, time.Time{}, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	h, err := parseHeader(buf)
	if err != nil {
		return entry{}, time.Time{}, err
	}
	if d.Name() != hex.EncodeToString(h.hash[:]) {
		return entry{}, time.Time{}, fmt.Errorf("%w: named for another block", errCorrupt)
	}
	if fi.Size() != fileSize(int(h.length)) {
		return entry{}, time.Time{}, fmt.Errorf("%w: %d bytes for a block of %d", errCorrupt, fi.Size(), h.length)
	}
	if h.class >= NumClasses {
		return entry{}, time.Time{}, fmt.Errorf("%w: class %d", errCorrupt, h.class)
	}
	if _, err := os.Stat(s.saltPath(h.scope)); err != nil {
		return entry{}, time.Time{}, fmt.Errorf("its scope's key is gone: %w", err)
	}
	return entry{hash: h.hash, scope: h.scope, class: h.class, size: fi.Size()}, fi.ModTime(), nil
}

func (s *Store) blockPath(h Hash) string {
	x := hex.EncodeToString(h[:])
	return filepath.Join(s.cfg.Dir, "blocks", x[:2], x)
}

func (s *Store) saltPath(scope Hash) string {
	return filepath.Join(s.cfg.Dir, "keys", hex.EncodeToString(scope[:]))
}

// cipherFor returns scope's cipher, creating its salt when create is set.
func (s *Store) cipherFor(scope Hash, create bool) (cipher.AEAD, error) {
	s.mu.Lock()
	a, ok := s.aeads[scope]
	s.mu.Unlock()
	if ok {
		return a, nil
	}
	path := s.saltPath(scope)
	salt, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		salt = make([]byte, 32)
		rand.Read(salt)
		err = s.cfg.WriteFile(path, salt)
	}
	if err != nil {
		return nil, fmt.Errorf("diskstore: scope key: %w", err)
	}
	if a, err = deriveAEAD(s.master, salt, scope); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.aeads[scope] = a
	s.mu.Unlock()
	return a, nil
}

// Has reports whether the store holds h (on disk, queued or staged).
func (s *Store) Has(h Hash) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.entries[h]
	if !ok {
		_, ok = s.queued[h]
	}
	if !ok {
		_, ok = s.stage[h]
	}
	return ok
}

// Put queues a block to be written (its Data is kept until then and must
// not change) and reports whether it was taken. A block already on disk is
// only marked used. With the queue full, the lowest-class block waiting —
// the oldest of that class — is dropped, or b itself when none is lower.
func (s *Store) Put(b Block) bool { return s.put(b, false) }

// PutCopy is Put for data the caller will change: the block is queued with
// a copy of it, made only if it is queued (a full queue drops most of the
// blocks a burst of evictions sends, and they need no copy).
func (s *Store) PutCopy(b Block) bool { return s.put(b, true) }

func (s *Store) put(b Block, clone bool) bool {
	if s.cfg.IndexOnly {
		return s.putIndexOnly(b)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || b.Class >= NumClasses {
		s.stats.Dropped++
		return false
	}
	if el, ok := s.entries[b.Hash]; ok {
		s.lists[el.Value.(*entry).class].MoveToBack(el)
		return true
	}
	if _, ok := s.queued[b.Hash]; ok {
		return true
	}
	if len(s.queue) >= s.cfg.Queue {
		low := -1
		for i, q := range s.queue {
			if q.Class < b.Class && (low < 0 || q.Class < s.queue[low].Class) {
				low = i
			}
		}
		s.stats.Dropped++
		if low < 0 {
			return false
		}
		delete(s.queued, s.queue[low].Hash)
		s.queue = slices.Delete(s.queue, low, low+1)
	}
	q := b
	if clone {
		q.Data = bytes.Clone(b.Data)
	}
	s.queue = append(s.queue, &q)
	s.queued[b.Hash] = &q
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}

// writer writes the queue until the store closes.
func (s *Store) writer() {
	defer close(s.written)
	for {
		s.mu.Lock()
		if len(s.queue) == 0 || s.abort {
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return
			}
			<-s.wake
			continue
		}
		s.mu.Unlock()
		s.writeNext()
	}
}

// writeNext writes the queue's first block.
func (s *Store) writeNext() {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	if len(s.queue) == 0 { // taken by ForgetScope
		s.mu.Unlock()
		return
	}
	b := s.queue[0]
	s.queue = s.queue[1:]
	s.mu.Unlock()
	err := s.write(b)
	s.mu.Lock()
	delete(s.queued, b.Hash)
	s.mu.Unlock()
	if err != nil {
		s.cfg.Logger.Warn("kv disk tier: block not written", "hash", hex.EncodeToString(b.Hash[:8]), "err", err)
	}
}

// Write stores a block now, in the caller's goroutine (for flushing the
// memory tiers at shutdown).
func (s *Store) Write(b Block) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return errors.New("diskstore: write to a closed store")
	}
	return s.write(&b)
}

// write seals and writes one block, then indexes it, making room by
// deleting the least valuable files. Called with writeMu held.
func (s *Store) write(b *Block) error {
	size := fileSize(len(b.Data))
	s.mu.Lock()
	if el, ok := s.entries[b.Hash]; ok { // written meanwhile
		s.lists[el.Value.(*entry).class].MoveToBack(el)
		s.mu.Unlock()
		return nil
	}
	if !s.roomLocked(size, b.Class) {
		s.stats.Dropped++
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	aead, err := s.cipherFor(b.Scope, true)
	if err == nil {
		h := header{class: b.Class, scope: b.Scope, hash: b.Hash}
		rand.Read(h.nonce[:])
		path := s.blockPath(b.Hash)
		if err = os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
			err = s.cfg.WriteFile(path, seal(aead, h, b.Data))
		}
	}
	if err != nil {
		s.mu.Lock()
		s.stats.WriteErrors++
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	e := &entry{hash: b.Hash, scope: b.Scope, class: b.Class, size: size}
	s.entries[b.Hash] = s.lists[b.Class].PushBack(e)
	s.used += size
	s.stats.Written++
	removed := s.evictLocked(0, NumClasses)
	s.mu.Unlock()
	s.removeFiles(removed)
	if s.cfg.Events != nil {
		s.cfg.Events(true, b.Class, []Hash{b.Hash})
	}
	return nil
}

// roomLocked reports whether a file of size bytes and class c can be kept:
// it fits the budget, or files of a class no higher can make room.
func (s *Store) roomLocked(size int64, c uint8) bool {
	if size > s.cfg.Budget {
		return false
	}
	free := s.cfg.Budget - s.used
	for k := 0; k <= int(c) && free < size; k++ {
		for el := s.lists[k].Front(); el != nil && free < size; el = el.Next() {
			free += el.Value.(*entry).size
		}
	}
	return free >= size
}

// evictLocked unindexes the least valuable entries until the budget holds,
// returning them for their files to be deleted.
func (s *Store) evictLocked(from, to int) []*entry {
	var out []*entry
	for c := from; c < to && s.used > s.cfg.Budget; c++ {
		for s.used > s.cfg.Budget {
			el := s.lists[c].Front()
			if el == nil {
				break
			}
			e := el.Value.(*entry)
			s.unindexLocked(e.hash)
			out = append(out, e)
			s.stats.Evicted++
		}
	}
	return out
}

func (s *Store) unindexLocked(h Hash) {
	el, ok := s.entries[h]
	if !ok {
		return
	}
	e := el.Value.(*entry)
	s.lists[e.class].Remove(el)
	delete(s.entries, h)
	s.used -= e.size
}

// removeFiles deletes unindexed entries' files and reports them removed.
func (s *Store) removeFiles(es []*entry) {
	if len(es) == 0 {
		return
	}
	hashes := make([]Hash, len(es))
	for i, e := range es {
		if !s.cfg.IndexOnly {
			os.Remove(s.blockPath(e.hash))
		}
		hashes[i] = e.hash
	}
	if s.cfg.Events != nil {
		s.cfg.Events(false, 0, hashes)
	}
}

// Fetch starts loading the blocks of a chain that are on disk into memory,
// in order, stopping at the first the store does not hold, and calls done
// (from another goroutine) when the loads it started have ended. It returns
// how many of the chain's blocks are still on their way (started now or by
// an earlier Fetch); 0 means every block the store holds can be taken now
// and done will not be called. At most the staging budget is loaded.
func (s *Store) Fetch(scope Hash, chain []Hash, done func()) int {
	return s.fetch(scope, chain, done, false)
}

// FetchAhead is Fetch for blocks no request asks for yet (a session's next
// turn, expected soon): guesses. It loads only while staging is less than
// half full, and staged guesses are the first to go when staging is over
// its budget, so guesses never take the room of requests already waiting.
// A later Fetch of a guessed block makes it a request's.
func (s *Store) FetchAhead(scope Hash, chain []Hash, done func()) int {
	return s.fetch(scope, chain, done, true)
}

func (s *Store) fetch(scope Hash, chain []Hash, done func(), guess bool) int {
	if s.cfg.IndexOnly {
		return 0
	}
	s.mu.Lock()
	s.pruneStageLocked(time.Now())
	var load []Hash
	// A request may take the room of staged guesses (dropped as it loads),
	// a guess only what leaves half of the budget free.
	room := s.stagingLimit() - (s.stageBytes - s.guessBytes)
	if guess {
		room = s.stagingLimit()/2 - s.stageBytes
	}
	inflight := 0
	for _, h := range chain {
		if st, ok := s.stage[h]; ok {
			if st.guess && !guess { // asked for now: no longer the first to go
				s.guessOrder.Remove(st.el)
				s.guessBytes -= int64(len(st.data))
				st.guess, st.el, st.at = false, s.stageOrder.PushBack(h), time.Now()
			}
			continue
		}
		if _, ok := s.queued[h]; ok {
			continue
		}
		if s.loading[h] {
			if !guess {
				delete(s.guessed, h)
			}
			inflight++
			continue
		}
		el, ok := s.entries[h]
		if !ok || el.Value.(*entry).scope != scope || room <= 0 {
			break
		}
		room -= el.Value.(*entry).size - fileSize(0)
		s.loading[h] = true
		if guess {
			s.guessed[h] = true
		}
		load = append(load, h)
		inflight++
	}
	if len(load) > 0 && s.closing {
		for _, h := range load {
			delete(s.loading, h)
			delete(s.guessed, h)
		}
		s.mu.Unlock()
		return 0
	}
	s.mu.Unlock()
	if len(load) > 0 {
		s.loaders.Add(1)
		go func() {
			defer s.loaders.Done()
			s.load(scope, load)
			done()
		}()
	}
	return inflight
}

// stagingLimit is the staging budget in bytes.
func (s *Store) stagingLimit() int64 {
	if s.cfg.Staging > 0 {
		return s.cfg.Staging
	}
	for c := range s.lists {
		if f := s.lists[c].Front(); f != nil {
			return 64 * (f.Value.(*entry).size - fileSize(0))
		}
	}
	return 1
}

// load reads a chain's blocks into staging, stopping at the first that
// fails (the rest could not be used: a prefix hit stops at a miss).
func (s *Store) load(scope Hash, chain []Hash) {
	aead, err := s.cipherFor(scope, false)
	for i, h := range chain {
		var data []byte
		start := time.Now()
		if err == nil {
			var file []byte
			if file, err = os.ReadFile(s.blockPath(h)); err == nil {
				data, err = open(aead, file, scope, h)
			}
		}
		s.mu.Lock()
		guess := s.guessed[h]
		delete(s.loading, h)
		delete(s.guessed, h)
		el, indexed := s.entries[h]
		if err != nil {
			for _, rest := range chain[i+1:] {
				delete(s.loading, rest)
				delete(s.guessed, rest)
			}
			if indexed {
				s.unindexLocked(h)
				s.stats.Corrupt++
			}
			s.mu.Unlock()
			s.cfg.Logger.Warn("kv disk tier: block not loaded (a miss; recomputed)", "hash", hex.EncodeToString(h[:8]), "err", err)
			if indexed {
				s.removeFiles([]*entry{{hash: h}})
			}
			return
		}
		if !indexed { // forgotten or evicted while loading
			for _, rest := range chain[i+1:] {
				delete(s.loading, rest)
				delete(s.guessed, rest)
			}
			s.mu.Unlock()
			return
		}
		e := el.Value.(*entry)
		s.lists[e.class].MoveToBack(el)
		s.stageLocked(h, &staged{scope: scope, class: e.class, data: data, at: time.Now(), guess: guess})
		s.stats.Loaded++
		s.stats.LoadNanos += int64(time.Since(start))
		s.mu.Unlock()
		now := time.Now()
		os.Chtimes(s.blockPath(h), now, now) // its use survives a restart's scan
	}
}

// stageLocked holds a loaded block for Take, dropping staged blocks over
// the staging budget: the oldest guesses first, then the oldest others.
func (s *Store) stageLocked(h Hash, st *staged) {
	if _, ok := s.stage[h]; ok {
		return
	}
	if st.guess {
		st.el = s.guessOrder.PushBack(h)
		s.guessBytes += int64(len(st.data))
	} else {
		st.el = s.stageOrder.PushBack(h)
	}
	s.stage[h] = st
	s.stageBytes += int64(len(st.data))
	for s.stageBytes > s.stagingLimit() {
		if f := s.guessOrder.Front(); f != nil {
			s.unstageLocked(f.Value.(Hash)) // a guess, perhaps the one just loaded
			continue
		}
		f := s.stageOrder.Front()
		if f.Value.(Hash) == h { // a request's block just loaded stays
			break
		}
		s.unstageLocked(f.Value.(Hash))
	}
	s.pruneStageLocked(st.at)
}

// pruneStageLocked drops staged blocks loaded more than stageTTL before now.
func (s *Store) pruneStageLocked(now time.Time) {
	for _, l := range []*list.List{s.guessOrder, s.stageOrder} {
		for f := l.Front(); f != nil; f = l.Front() {
			h := f.Value.(Hash)
			if now.Sub(s.stage[h].at) <= stageTTL {
				break
			}
			s.unstageLocked(h)
		}
	}
}

func (s *Store) unstageLocked(h Hash) {
	st, ok := s.stage[h]
	if !ok {
		return
	}
	if st.guess {
		s.guessOrder.Remove(st.el)
		s.guessBytes -= int64(len(st.data))
	} else {
		s.stageOrder.Remove(st.el)
	}
	delete(s.stage, h)
	s.stageBytes -= int64(len(st.data))
}

// Take hands over block h of scope if it is in memory (staged by Fetch, or
// waiting to be written): its contents (read-only; copy them) and class.
// A staged block leaves staging; its file stays on disk.
func (s *Store) Take(scope, h Hash) (data []byte, class uint8, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, found := s.stage[h]; found && st.scope == scope {
		s.unstageLocked(h)
		s.stats.Hits++
		return st.data, st.class, true
	}
	if b, found := s.queued[h]; found && b.Scope == scope {
		s.stats.Hits++
		return b.Data, b.Class, true
	}
	if el, found := s.entries[h]; found && s.cfg.IndexOnly && el.Value.(*entry).scope == scope {
		e := el.Value.(*entry)
		s.lists[e.class].MoveToBack(el)
		s.stats.Hits++
		return nil, e.class, true
	}
	return nil, 0, false
}

// ForgetScope destroys scope's key and every block of it: staged, queued
// and on disk. Files that escape deletion can no longer be decrypted.
func (s *Store) ForgetScope(scope Hash) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	delete(s.aeads, scope)
	keep := s.queue[:0]
	for _, b := range s.queue {
		if b.Scope == scope {
			delete(s.queued, b.Hash)
			continue
		}
		keep = append(keep, b)
	}
	clear(s.queue[len(keep):])
	s.queue = keep
	for h, st := range s.stage {
		if st.scope == scope {
			s.unstageLocked(h)
		}
	}
	var gone []*entry
	for _, el := range s.entries {
		if e := el.Value.(*entry); e.scope == scope {
			gone = append(gone, e)
		}
	}
	for _, e := range gone {
		s.unindexLocked(e.hash)
	}
	s.mu.Unlock()
	var err error
	if !s.cfg.IndexOnly {
		err = os.Remove(s.saltPath(scope))
	}
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	s.removeFiles(gone)
	if err != nil {
		return fmt.Errorf("diskstore: destroy scope key: %w", err)
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Blocks, st.Bytes = len(s.entries), s.used
	st.QueueDepth, st.Staged = len(s.queued), len(s.stage)
	for c := range s.lists {
		st.ByClass[c] = s.lists[c].Len()
	}
	return st
}

// Close writes what is queued (until ctx ends; the rest is dropped), waits
// for loads in flight and releases the directory.
func (s *Store) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	s.mu.Unlock()
	if s.cfg.IndexOnly {
		return nil
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	var err error
	select {
	case <-s.written:
	case <-ctx.Done():
		s.mu.Lock()
		s.abort = true
		s.stats.Dropped += int64(len(s.queue))
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
		<-s.written
		err = fmt.Errorf("diskstore: close: %w (queued blocks dropped)", ctx.Err())
	}
	s.loaders.Wait()
	s.unlock()
	return err
}

// openIndexOnly is Open for a store that keeps no data.
func openIndexOnly(cfg Config) (*Store, error) {
	if cfg.Budget <= 0 || cfg.BlockBytes <= 0 {
		return nil, fmt.Errorf("diskstore: budget %d bytes for blocks of %d", cfg.Budget, cfg.BlockBytes)
	}
	s := &Store{cfg: cfg, entries: map[Hash]*list.Element{}, queued: map[Hash]*Block{}, stage: map[Hash]*staged{},
		stageOrder: list.New(), guessOrder: list.New(), loading: map[Hash]bool{}, guessed: map[Hash]bool{},
		aeads: map[Hash]cipher.AEAD{}, unlock: func() {}}
	for c := range s.lists {
		s.lists[c] = list.New()
	}
	return s, nil
}

// putIndexOnly indexes a block at once, as if written.
func (s *Store) putIndexOnly(b Block) bool {
	s.mu.Lock()
	if el, ok := s.entries[b.Hash]; ok {
		s.lists[el.Value.(*entry).class].MoveToBack(el)
		s.mu.Unlock()
		return true
	}
	size := s.cfg.BlockBytes
	if s.closing || b.Class >= NumClasses || !s.roomLocked(size, b.Class) {
		s.stats.Dropped++
		s.mu.Unlock()
		return false
	}
	s.entries[b.Hash] = s.lists[b.Class].PushBack(&entry{hash: b.Hash, scope: b.Scope, class: b.Class, size: size})
	s.used += size
	s.stats.Written++
	removed := s.evictLocked(0, NumClasses)
	s.mu.Unlock()
	if s.cfg.Events != nil {
		s.cfg.Events(true, b.Class, []Hash{b.Hash})
	}
	s.removeFiles(removed)
	return true
}

// writeAtomic writes data to path by way of a temporary file in tmp.
func writeAtomic(tmp, path string, data []byte) error {
	f, err := os.CreateTemp(tmp, "w-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// ShredScope destroys scope's key in the store at dir without opening it
// (for a tenant deleted while no server, or another process, holds the
// store): its block files can no longer be decrypted and are deleted by the
// next Open. A process holding the store open keeps the key it derived
// until it forgets the scope or stops.
func ShredScope(dir string, scope Hash) error {
	err := os.Remove(filepath.Join(dir, "keys", hex.EncodeToString(scope[:])))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("diskstore: destroy scope key: %w", err)
	}
	return nil
}

// Entry names a block the store holds on disk.
type Entry struct {
	Hash  Hash
	Class uint8
}

// Entries lists the blocks on disk (for a snapshot of the tiers).
func (s *Store) Entries() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Entry, 0, len(s.entries))
	for c := range s.lists {
		for el := s.lists[c].Front(); el != nil; el = el.Next() {
			e := el.Value.(*entry)
			out = append(out, Entry{Hash: e.hash, Class: e.class})
		}
	}
	return out
}

// Probe reports whether a store could be opened in dir now: ErrInUse when
// another process holds it.
func Probe(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("diskstore: %w", err)
	}
	unlock, err := lockDir(filepath.Join(dir, "lock"))
	if err != nil {
		return err
	}
	unlock()
	return nil
}
