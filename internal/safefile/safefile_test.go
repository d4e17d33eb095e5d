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
	"time"
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

// Where each user has a group of their own (umask 002), what the user
// installs is writable by that group alone: trusted, as the user's own.
// Writable by another group, it is not.
func TestTrusted_acceptsWhatTheUsersPrivateGroupMayWrite(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "prog")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(prog, 0o775); err != nil {
		t.Fatal(err)
	}
	// Where the process's group is not the user's own (a shared "users"
	// or "staff" group), its members are other users: refused.
	switch err := Trusted(prog); {
	case ownGroup() && err != nil:
		t.Errorf("a program and its folder writable by the user's private group: %v, want it trusted", err)
	case !ownGroup() && (err == nil || !strings.Contains(err.Error(), "writable by other users")):
		t.Errorf("a program writable by the process's group %d, shared with other users: %v, want it refused", os.Getgid(), err)
	}
	other := -1
	if os.Getuid() == 0 {
		other = 65534 // nogroup: root may give a file any group
	} else if gids, err := os.Getgroups(); err == nil {
		for _, g := range gids {
			if g != os.Getgid() {
				other = g
			}
		}
	}
	// The rule itself, on a file's metadata: another group's write is
	// another user's, whoever runs the test.
	for _, tc := range []struct {
		gid  int
		mode fs.FileMode
		want bool
	}{
		{os.Getgid() + 1, 0o775, true}, {os.Getgid(), 0o775, !ownGroup()}, {os.Getgid() + 1, 0o755, false}, {os.Getgid(), 0o757, true},
	} {
		if got := othersMayWrite(statOf{mode: tc.mode, gid: tc.gid}); got != tc.want {
			t.Errorf("othersMayWrite(mode %04o, group %d) = %v, want %v", tc.mode, tc.gid, got, tc.want)
		}
	}
	if other < 0 {
		t.Log("neither root nor in a second group: no real file of another group to try Trusted on (the rule is checked above)")
		return
	}
	if err := os.Chown(prog, -1, other); err != nil {
		t.Fatal(err)
	}
	if err := Trusted(prog); err == nil || !strings.Contains(err.Error(), "writable by other users") {
		t.Errorf("a program writable by group %d: %v, want it refused", other, err)
	}
	if err := os.Chmod(prog, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, -1, other); err != nil {
		t.Fatal(err)
	}
	if err := Trusted(prog); err == nil || !strings.Contains(err.Error(), "another user could rename or replace it") {
		t.Errorf("a program in a folder writable by group %d: %v, want it refused", other, err)
	}
}

// statOf is the metadata of a file of mode and group gid.
type statOf struct {
	mode fs.FileMode
	gid  int
}

func (s statOf) Name() string       { return "f" }
func (s statOf) Size() int64        { return 0 }
func (s statOf) Mode() fs.FileMode  { return s.mode }
func (s statOf) ModTime() time.Time { return time.Time{} }
func (s statOf) IsDir() bool        { return false }
func (s statOf) Sys() any           { return &syscall.Stat_t{Gid: uint32(s.gid)} }
