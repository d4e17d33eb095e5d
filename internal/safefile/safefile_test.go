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

// Trusted takes a file only another user could not have planted or
// swapped: its mode, the folders above it and above the link it was
// found as.
func TestTrusted_refusesAFileAnotherUserCouldHavePlantedOrSwapped(t *testing.T) {
	mkdir := func(mode fs.FileMode) string {
		d := t.TempDir()
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	write := func(dir string, mode fs.FileMode) string {
		p := filepath.Join(dir, "prog")
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	link := func(dir, target string) string {
		p := filepath.Join(dir, "link")
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	private := mkdir(0o755)
	ours := write(private, 0o755)
	open := mkdir(0o777) // others may write, not sticky
	for _, tc := range []struct {
		name, path, want string // want: "" to accept, else what the error says
	}{
		{"a file of ours in a folder of ours", ours, ""},
		{"one others may write", write(mkdir(0o755), 0o757), "writable by other users"},
		{"one in a folder others may write", write(open, 0o755), "another user could rename or replace it"},
		{"one in a sticky folder others may write", write(mkdir(0o777|fs.ModeSticky), 0o755), ""},
		{"a link to ours, in a folder others may write", link(mkdir(0o777), ours), "another user could rename or replace it"},
		{"a link of ours to a file in a folder others may write", link(mkdir(0o755), write(mkdir(0o777), 0o755)),
			"another user could rename or replace it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Trusted(tc.path)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Trusted(%s) = %v, want nil", tc.path, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Trusted(%s) = %v, want an error saying %q", tc.path, err, tc.want)
			}
		})
	}
}
