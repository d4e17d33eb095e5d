//go:build unix

package snapshot_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/ctrlkit/ctrlkit/snapshot"
)

// privateName is the name of the private folder PrepareDir makes in a
// directory others can write.
func privateName() string { return fmt.Sprintf("ctrlkit-%d", os.Geteuid()) }

// volume makes a directory at path as an emptyDir volume's mount point is
// (root's, mode mode): another user's when the test runs as root, which
// owns it otherwise; ours when it runs as another user.
func volume(t *testing.T, path string, mode fs.FileMode) string {
	t.Helper()
	mkdir(t, path, 0o700)
	if os.Geteuid() == 0 {
		giveAway(t, path)
	}
	chmodT(t, path, mode)
	return path
}

// names lists dir, or returns nil if it is no directory that can be read.
func names(dir string) []string {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range des {
		out = append(out, d.Name())
	}
	return out
}

// Read and Write refuse a directory that is not their user's alone (one
// others can write, another user's, a link in a folder others can write),
// even holding a snapshot written while it was safe, and write nothing
// there, with an error that names the fix. PrepareDir gives, for a
// directory others can write, the private folder it makes inside, where
// the snapshot left in the shared directory is not found; it refuses the
// others alike.
func TestReadWrite_refuseADirectoryThatIsNotTheirUsersAlone(t *testing.T) {
	tmp := t.TempDir()
	type dirCase struct {
		name string
		dir  func(t *testing.T) string // a directory holding a snapshot, then spoilt
		want string                    // what Read and Write say
		// shared: PrepareDir gives the private folder inside; otherwise
		// it refuses, saying want.
		shared bool
	}
	cases := []dirCase{
		{"writable by everyone", func(t *testing.T) string {
			d := withSnapshot(t, mkdir(t, filepath.Join(tmp, "world"), 0o700))
			chmodT(t, d, 0o777)
			return d
		}, "chmod 700 " + filepath.Join(tmp, "world"), true},
		{"writable by the group", func(t *testing.T) string {
			d := withSnapshot(t, mkdir(t, filepath.Join(tmp, "group"), 0o700))
			chmodT(t, d, 0o770)
			return d
		}, "chmod 700 " + filepath.Join(tmp, "group"), true},
		{"a link in a folder everyone can write", func(t *testing.T) string {
			target := withSnapshot(t, mkdir(t, filepath.Join(tmp, "target"), 0o700))
			link := filepath.Join(mkdir(t, filepath.Join(tmp, "open"), 0o777), "cache")
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			return link
		}, "is a symbolic link in " + filepath.Join(tmp, "open"), false},
	}
	if os.Geteuid() == 0 {
		cases = append(cases, dirCase{"owned by another user", func(t *testing.T) string {
			d := withSnapshot(t, mkdir(t, filepath.Join(tmp, "theirs"), 0o700))
			giveAway(t, d)
			return d
		}, "owned by uid 65534, not by you", false})
	} else {
		cases = append(cases, dirCase{"owned by another user", func(*testing.T) string { return "/" }, "owned by uid 0, not by you", false})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := c.dir(t)
			before := entries(t, dir)
			path := filepath.Join(dir, "items.snap")
			rv, got, err := readItems(t, path)
			if !errors.Is(err, snapshot.ErrUntrusted) || !strings.Contains(err.Error(), c.want) || rv != "" || got != nil {
				t.Errorf("Read = %q, %v, %v; want ErrUntrusted saying %q, nothing served", rv, got, err, c.want)
			}
			enc, _ := snapshot.JSON[item]()
			if err := snapshot.Write(path, testID(), "43", items, enc); !errors.Is(err, snapshot.ErrUntrusted) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Write = %v; want ErrUntrusted saying %q", err, c.want)
			}
			if after := entries(t, dir); !slices.Equal(after, before) {
				t.Errorf("a refused Write changed the directory: %v, then %v", before, after)
			}
			use, err := snapshot.PrepareDir(dir)
			if !c.shared {
				if !errors.Is(err, snapshot.ErrUntrusted) || !strings.Contains(err.Error(), c.want) || use != "" {
					t.Errorf("PrepareDir = %q, %v; want ErrUntrusted saying %q", use, err, c.want)
				}
				if after := entries(t, dir); !slices.Equal(after, before) {
					t.Errorf("a refusing PrepareDir changed the directory: %v, then %v", before, after)
				}
				return
			}
			if want := filepath.Join(dir, privateName()); err != nil || use != want {
				t.Fatalf("PrepareDir = %q, %v; want %s", use, err, want)
			}
			if rv, got, err := readItems(t, filepath.Join(use, "items.snap")); !errors.Is(err, snapshot.ErrNotFound) {
				t.Errorf("Read in the private folder = %q, %v, %v; want ErrNotFound: the snapshot left in %s is not its", rv, got, err, dir)
			}
		})
	}
}

// The folders above the directory are not checked (PrepareDir says why):
// inside an emptyDir volume (root's, mode 0777, not sticky), a sticky
// folder like /tmp or a folder of another user, a directory of the user's
// own that no one else can write is used as it is, made if missing, and
// the next start finds its snapshot there.
func TestPrepareDir_acceptsFoldersAboveThatOthersCanWrite(t *testing.T) {
	tmp := t.TempDir()
	type aboveCase struct {
		name  string
		above func(t *testing.T) string
	}
	cases := []aboveCase{
		{"inside an emptyDir volume: everyone can write it, not sticky", func(t *testing.T) string {
			return volume(t, filepath.Join(tmp, "volume"), 0o777)
		}},
		{"inside a sticky folder everyone can write, like /tmp", func(t *testing.T) string {
			return volume(t, filepath.Join(tmp, "sticky"), fs.ModeSticky|0o777)
		}},
	}
	if os.Geteuid() == 0 {
		cases = append(cases, aboveCase{"inside a folder of another user", func(t *testing.T) string {
			above := mkdir(t, filepath.Join(tmp, "above"), 0o755)
			giveAway(t, above)
			return above
		}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(c.above(t), "made", "cache")
			use, err := snapshot.PrepareDir(dir)
			if err != nil || use != dir {
				t.Fatalf("PrepareDir = %q, %v; want %s itself", use, err, dir)
			}
			if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
				t.Fatalf("PrepareDir made %v (%v); want a directory, mode 0700", fi.Mode(), err)
			}
			writeItems(t, use, "42")
			if again, err := snapshot.PrepareDir(dir); err != nil || again != use {
				t.Fatalf("the next start: PrepareDir = %q, %v; want %s", again, err, use)
			}
			if rv, got, err := readItems(t, filepath.Join(use, "items.snap")); err != nil || rv != "42" || !slices.Equal(got, items) {
				t.Fatalf("the next start: Read = %q, %v, %v", rv, got, err)
			}
		})
	}
}

// A directory other users can write, such as an emptyDir volume's mount
// point (root's, mode 0777, not sticky: here another user's when the test
// runs as root) or /tmp, gets its snapshots in a private folder
// "ctrlkit-<uid>" that PrepareDir makes inside: a real directory, the
// user's, mode 0700. The next start finds them there, and nothing else is
// written into the shared directory.
func TestPrepareDir_keepsSnapshotsInAPrivateFolderOfASharedDirectory(t *testing.T) {
	tmp := t.TempDir()
	for i, c := range []struct {
		name string
		mode fs.FileMode
	}{
		{"an emptyDir volume: everyone can write it, not sticky", 0o777},
		{"a sticky folder everyone can write, like /tmp", fs.ModeSticky | 0o777},
		{"a folder the group can write", 0o770},
	} {
		t.Run(c.name, func(t *testing.T) {
			vol := volume(t, filepath.Join(tmp, fmt.Sprint("volume-", i)), c.mode)
			use, err := snapshot.PrepareDir(vol)
			if want := filepath.Join(vol, privateName()); err != nil || use != want {
				t.Fatalf("PrepareDir = %q, %v; want %s", use, err, want)
			}
			fi, err := os.Lstat(use)
			if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 || int(fi.Sys().(*syscall.Stat_t).Uid) != os.Geteuid() {
				t.Fatalf("PrepareDir made %v (%v); want a directory of uid %d, mode 0700", fi, err, os.Geteuid())
			}
			writeItems(t, use, "42")
			again, err := snapshot.PrepareDir(vol) // the next start
			if err != nil || again != use {
				t.Fatalf("the next start: PrepareDir = %q, %v; want %s", again, err, use)
			}
			if rv, got, err := readItems(t, filepath.Join(again, "items.snap")); err != nil || rv != "42" || !slices.Equal(got, items) {
				t.Fatalf("the next start: Read = %q, %v, %v; want the snapshot", rv, got, err)
			}
			if got := entries(t, vol); !slices.Equal(got, []string{privateName()}) {
				t.Errorf("the shared directory holds %v; want only %s", got, privateName())
			}
			if got := entries(t, use); !slices.Equal(got, []string{snapshot.KeyFile, "items.snap"}) {
				t.Errorf("the private folder holds %v; want the key and the snapshot", got)
			}
		})
	}
}

// In a directory others can write, another user can make "ctrlkit-<uid>"
// before this user does: a folder of theirs, which may hold snapshots, a
// symbolic link to another private directory of this user's, holding a
// snapshot of its own, a file, a folder everyone can write. PrepareDir
// refuses each, naming the folder and the fix, and makes or changes
// nothing; Read and Write refuse the folder too.
func TestPrepareDir_refusesAPrivateFolderItDidNotMake(t *testing.T) {
	tmp := t.TempDir()
	type subCase struct {
		name string
		make func(t *testing.T, sub string)
		want string
	}
	cases := []subCase{
		{"a link to another private directory of the user's", func(t *testing.T, sub string) {
			target := withSnapshot(t, mkdir(t, filepath.Join(t.TempDir(), "private"), 0o700))
			if err := os.Symlink(target, sub); err != nil {
				t.Fatal(err)
			}
		}, "is a symbolic link"},
		{"a file", func(t *testing.T, sub string) {
			if err := os.WriteFile(sub, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "is not a directory"},
		{"a folder everyone can write", func(t *testing.T, sub string) { mkdir(t, sub, 0o777) },
			"is writable by other users too (mode 0777)"},
	}
	if os.Geteuid() == 0 {
		cases = append(cases, subCase{"a folder of another user, holding a snapshot", func(t *testing.T, sub string) {
			giveAway(t, withSnapshot(t, mkdir(t, sub, 0o700)))
		}, "is owned by uid 65534, not by you"})
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vol := volume(t, filepath.Join(tmp, fmt.Sprint("volume-", i)), 0o777)
			sub := filepath.Join(vol, privateName())
			c.make(t, sub)
			before, beforeSub := entries(t, vol), names(sub)
			use, err := snapshot.PrepareDir(vol)
			if !errors.Is(err, snapshot.ErrUntrusted) || use != "" {
				t.Fatalf("PrepareDir = %q, %v; want ErrUntrusted", use, err)
			}
			for _, want := range []string{"folder " + sub, c.want, "remove it"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("PrepareDir = %v; want it to say %q", err, want)
				}
			}
			path := filepath.Join(sub, "items.snap")
			if rv, got, err := readItems(t, path); err == nil || rv != "" || got != nil {
				t.Errorf("Read in the folder = %q, %v, %v; want a refusal, nothing served", rv, got, err)
			}
			enc, _ := snapshot.JSON[item]()
			if err := snapshot.Write(path, testID(), "43", items, enc); err == nil {
				t.Error("Write in the folder succeeded; want a refusal")
			}
			if after, afterSub := entries(t, vol), names(sub); !slices.Equal(after, before) || !slices.Equal(afterSub, beforeSub) {
				t.Errorf("refusals changed the directory (%v, then %v) or the folder (%v, then %v)", before, after, beforeSub, afterSub)
			}
		})
	}
}
