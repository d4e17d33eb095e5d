//go:build unix

package safefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// OpenRegular opens a regular file and refuses, without following or
// waiting, a link, a FIFO and a directory; no error quotes the content.
func TestOpenRegular_opensOnlyARegularFile(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("secret-content"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, fi, err := OpenRegular(regular)
	if err != nil || !fi.Mode().IsRegular() || Owner(fi) != os.Geteuid() {
		t.Fatalf("OpenRegular(a file of ours) = %v, %v", fi, err)
	}
	f.Close()
	link, fifo := filepath.Join(dir, "link"), filepath.Join(dir, "fifo")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]error{link: ErrLink, fifo: ErrNotRegular, dir: ErrNotRegular,
		filepath.Join(dir, "missing"): fs.ErrNotExist} {
		f, _, err := OpenRegular(path)
		if !errors.Is(err, want) {
			t.Errorf("OpenRegular(%s) = %v, want %v", path, err, want)
		}
		if f != nil {
			f.Close()
		}
		if err != nil && strings.Contains(err.Error(), "secret-content") {
			t.Errorf("the error quotes the content: %v", err)
		}
	}
}
