package snapshot_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ctrlkit/ctrlkit/snapshot"
)

// FuzzRead feeds Read arbitrary files, seeded with a real snapshot and its
// damaged forms: it must never panic, and it either refuses with ErrCorrupt or
// ErrMismatch or serves exactly what a writer could have written (which it
// checks by writing the result again and reading it back).
func FuzzRead(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "seed.snap")
	enc, dec := snapshot.JSON[item]()
	if err := snapshot.Write(path, testID(), "42", items, enc); err != nil {
		f.Fatal(err)
	}
	seed, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add(append(slices.Clone(seed), 0))
	f.Add([]byte{})
	path = filepath.Join(dir, "fuzz.snap") // beside the seed: its key authenticates the files
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		rv, got, err := snapshot.Read(t.Context(), path, testID(), dec)
		if err != nil {
			if !errors.Is(err, snapshot.ErrCorrupt) && !errors.Is(err, snapshot.ErrMismatch) {
				t.Fatalf("Read = %v; want ErrCorrupt or ErrMismatch", err)
			}
			if rv != "" || got != nil {
				t.Fatalf("a refused snapshot served %q, %v", rv, got)
			}
			return
		}
		again := filepath.Join(dir, "again.snap")
		if err := snapshot.Write(again, testID(), rv, got, enc); err != nil {
			t.Fatalf("what Read served cannot be written: %v", err)
		}
		rv2, got2, err := snapshot.Read(t.Context(), again, testID(), dec)
		if err != nil || rv2 != rv || !slices.Equal(got, got2) {
			t.Fatalf("served %q, %v; written again and read: %q, %v, %v", rv, got, rv2, got2, err)
		}
	})
}
