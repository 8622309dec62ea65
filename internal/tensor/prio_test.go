//go:build linux

package tensor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// threadNices returns the nice value of every thread of this process,
// or 20 for threads under the SCHED_IDLE policy.
func threadNices(t *testing.T) map[int]int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for _, d := range dirs {
		data, err := os.ReadFile(d)
		if err != nil {
			continue // the thread exited
		}
		// Fields after the parenthesised command: state is field 3, nice 19.
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		tid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		nice, _ := strconv.Atoi(f[19-3])
		if policy, _ := strconv.Atoi(f[41-3]); policy == schedIdle {
			nice = 20
		}
		out[tid] = nice
	}
	return out
}

func countNice(m map[int]int, nice int) int {
	n := 0
	for _, v := range m {
		if v == nice {
			n++
		}
	}
	return n
}

// withoutMain drops the process's main thread from m. A goroutine that
// exits while locked to the main thread does not end it (the main thread
// cannot exit): the runtime parks it for good instead, so it never runs
// Go code again and its priority no longer matters.
func withoutMain(m map[int]int) map[int]int {
	delete(m, os.Getpid())
	return m
}

// TestPoolBackground checks that a background pool's workers and its
// driving goroutine run at the lowered priority, compute correctly, and
// that their threads go away with them (so no other goroutine ever runs
// on a lowered thread).
func TestPoolBackground(t *testing.T) {
	for _, nice := range []int{7, 20} {
		t.Run(fmt.Sprintf("nice%d", nice), func(t *testing.T) { testPoolBackground(t, nice) })
	}
}

func testPoolBackground(t *testing.T, nice int) {
	for _, threads := range []int{1, 3} {
		before := threadNices(t)
		done := make(chan int)
		go func() {
			p := NewPoolWith(PoolOptions{Threads: threads, Nice: nice})
			if err := p.LockBackground(); err != nil {
				t.Error(err)
			}
			for _, n := range []int{1, 5, 1000} {
				for rep := 0; rep < 20; rep++ {
					hits := make([]int32, n)
					p.Parallel(n, func(lo, hi int) {
						for i := lo; i < hi; i++ {
							atomic.AddInt32(&hits[i], 1)
						}
					})
					for i, h := range hits {
						if h != 1 {
							t.Errorf("threads=%d n=%d: index %d covered %d times", threads, n, i, h)
							return
						}
					}
				}
			}
			got := countNice(threadNices(t), nice) - countNice(before, nice)
			p.Close()
			done <- got
		}()
		if got := <-done; got != threads {
			t.Errorf("threads=%d: %d threads at nice %d, want %d (the workers and the caller)", threads, got, nice, threads)
		}
		// The locked threads exit with their goroutines.
		want := countNice(withoutMain(before), nice)
		deadline := time.Now().Add(5 * time.Second)
		for countNice(withoutMain(threadNices(t)), nice) != want {
			if time.Now().After(deadline) {
				t.Fatalf("threads=%d: lowered threads outlive the pool: %v", threads, threadNices(t))
			}
			time.Sleep(time.Millisecond)
		}
	}
	// A pool without Nice leaves the caller's thread alone.
	before := countNice(threadNices(t), nice)
	p := NewPool(2)
	defer p.Close()
	if err := p.LockBackground(); err != nil {
		t.Fatal(err)
	}
	if got := countNice(threadNices(t), nice); got != before {
		t.Fatalf("%d threads at nice %d after a plain pool's LockBackground, want %d", got, nice, before)
	}
}
