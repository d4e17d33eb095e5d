package webhook

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

func TestCertWatcher_readsARotatedPair(t *testing.T) {
	dir, next := t.TempDir(), t.TempDir()
	if _, err := SelfSigned(dir, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	c := newCertWatcher(dir, "tls.crt", "tls.key", slog.New(slog.DiscardHandler), nil)
	first, err := c.get(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SelfSigned(next, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tls.key", "tls.crt"} {
		if err := os.Rename(filepath.Join(next, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	second, err := c.get(nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(first.Certificate[0]) == string(second.Certificate[0]) {
		t.Fatal("the rotated certificate was not read")
	}
}
