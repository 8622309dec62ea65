package engine

import (
	"context"
	"slices"
	"testing"
)

// TestWaitingByPriority: requests waiting for admission are counted by
// priority, highest first, and leave the count when admitted or
// cancelled.
func TestWaitingByPriority(t *testing.T) {
	e, err := NewStepped(nullForwarder{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, r := range []Request{
		{Prompt: []int32{1, 2, 3}, MaxTokens: 1, Priority: 0},
		{Prompt: []int32{1, 2}, MaxTokens: 1, Priority: 5},
		{Prompt: []int32{4}, MaxTokens: 1, Priority: 0},
		{Prompt: []int32{4, 5, 6, 7}, MaxTokens: 1, Priority: -1},
	} {
		if _, err := e.Submit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	want := []PriorityWaiting{{5, 1, 2}, {0, 2, 4}, {-1, 1, 4}}
	if got := e.Now().WaitingByPriority; !slices.Equal(got, want) {
		t.Fatalf("waiting by priority %+v, want %+v", got, want)
	}
	if n := e.Now().Waiting; n != 4 {
		t.Fatalf("waiting %d, want 4", n)
	}
	for e.Step(ctx) {
	}
	if got := e.Now(); got.WaitingByPriority != nil || got.Waiting != 0 {
		t.Fatalf("after every request ran: waiting %d, by priority %+v", got.Waiting, got.WaitingByPriority)
	}
	// A request cancelled before admission leaves the count too.
	cctx, ccancel := context.WithCancel(ctx)
	if _, err := e.Submit(cctx, Request{Prompt: []int32{1}, MaxTokens: 1, Priority: 2}); err != nil {
		t.Fatal(err)
	}
	ccancel()
	for e.Step(ctx) {
	}
	if got := e.Now(); got.WaitingByPriority != nil || got.Waiting != 0 {
		t.Fatalf("after a cancelled request: waiting %d, by priority %+v", got.Waiting, got.WaitingByPriority)
	}
}
