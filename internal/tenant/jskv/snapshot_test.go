package jskv

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"testing"
)

// FuzzSnapshot: any bytes decode to records or an error (never a panic),
// and what decodes encodes back to the same records.
func FuzzSnapshot(f *testing.F) {
	sum := sha256.Sum256([]byte("x"))
	kd := &kindData{
		ids:   []string{"a", "b", "c"},
		vals:  map[string][]byte{"a": []byte("small"), "b": {}},
		blobs: map[string]blob{"c": {Key: "rec.keys.0011.0.", Chunks: 2, Size: 5000, SHA256: hex.EncodeToString(sum[:])}},
	}
	f.Add(encodeSnapshot(kd))
	f.Add([]byte{})
	f.Add([]byte{1, 'a', 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		kd, err := decodeSnapshot(data)
		if err != nil {
			return
		}
		again, err := decodeSnapshot(encodeSnapshot(kd))
		if err != nil {
			t.Fatalf("re-encoded records do not decode: %v", err)
		}
		if !slices.Equal(kd.ids, again.ids) || !maps.EqualFunc(kd.vals, again.vals, bytes.Equal) || !maps.Equal(kd.blobs, again.blobs) {
			t.Fatalf("records changed through encoding: %+v, then %+v", kd, again)
		}
	})
}
