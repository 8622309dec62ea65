//go:build !race

package tokenizer

// raceEnabled reports whether the tests run with the race detector.
const raceEnabled = false
