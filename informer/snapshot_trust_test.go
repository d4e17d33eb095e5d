//go:build unix

package informer_test

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/snapshot"
)

// A snapshot that another user could have written or swapped, or that is
// no file of this process's, starts cold (a list) with a reason that says
// why and quotes none of its bytes, whatever it holds: one in a directory
// everyone can write (never read: the snapshots go into a private folder
// inside it), a directory of another user, a private folder "ctrlkit-<uid>"
// that another user made first or a link at that name (nothing is written
// there either), a snapshot written without the directory's key (the
// previous format, or another directory's), a FIFO (which must not hang
// the start), a link to another user's secret, a file far larger than its
// header says. A refused file is replaced by the snapshot written at
// shutdown.
func TestInformer_snapshotsAnotherUserCouldHaveWrittenStartCold(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	cms := configMaps(t, srv.Config(), ns)
	w := newWriter(cms, 10)
	w.createAll(t)
	id := snapshot.Identity{Cluster: "test", Version: "v1", Resource: "configmaps", Namespace: ns}
	list, err := cms.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// What a planted snapshot would serve: the server's objects, one
	// changed, and one the server does not have.
	planted := []*corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ghost", ResourceVersion: list.ResourceVersion}}}
	for i := range list.Items {
		planted = append(planted, &list.Items[i])
	}
	planted[1] = planted[1].DeepCopy()
	planted[1].Data = map[string]string{"planted": "yes"}
	encode := func(c *corev1.ConfigMap) ([]byte, error) { return c.Marshal() }
	// valid writes a snapshot of planted, with the key of dir, and returns its path.
	valid := func(t *testing.T, dir string) string {
		t.Helper()
		path := filepath.Join(dir, "cms.snap")
		if err := snapshot.Write(path, id, list.ResourceVersion, planted, encode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	const secretText = "admin-token-0123456789abcdef"
	secret := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secret, []byte(strings.Repeat(secretText+`,admin,admin,"system:masters"`+"\n", 3)), 0o600); err != nil {
		t.Fatal(err)
	}
	root := os.Geteuid() == 0
	if root {
		if err := os.Chown(secret, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	private := fmt.Sprintf("ctrlkit-%d", os.Geteuid())
	// volume returns a directory as an emptyDir volume's mount point is:
	// mode 0777, not sticky, and another user's when the test runs as root.
	volume := func(t *testing.T) string {
		dir := t.TempDir()
		if root {
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
		chmod(t, dir, 0o777)
		return dir
	}
	// theirs is a private directory of this user's holding a planted
	// snapshot, which a link at the private folder's name leads to.
	theirs := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(theirs, 0o700); err != nil {
		t.Fatal(err)
	}
	valid(t, theirs)
	theirsBefore, err := os.ReadDir(theirs)
	if err != nil {
		t.Fatal(err)
	}
	type trustCase struct {
		name string
		path func(t *testing.T) string
		want string
		// dirRefused: the directory is refused, and nothing is written
		// there; otherwise the snapshot written at shutdown replaces the
		// file, or is written at written's path when set.
		dirRefused bool
		written    func(path string) string
	}
	cases := []trustCase{
		{name: "a snapshot planted in a directory everyone can write", path: func(t *testing.T) string {
			p := valid(t, t.TempDir())
			chmod(t, filepath.Dir(p), 0o777)
			return p
		}, want: "no snapshot yet", written: func(p string) string {
			return filepath.Join(filepath.Dir(p), private, filepath.Base(p))
		}},
		{name: "a link at the private folder's name, to another private directory", path: func(t *testing.T) string {
			vol := volume(t)
			if err := os.Symlink(theirs, filepath.Join(vol, private)); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(vol, "cms.snap")
		}, want: "is writable by other users, is a symbolic link", dirRefused: true},
		{name: "a directory of another user", path: func(t *testing.T) string {
			if !root {
				return "/cms.snap" // "/" is root's
			}
			p := valid(t, t.TempDir())
			if err := os.Chown(filepath.Dir(p), 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return p
		}, want: "is owned by uid", dirRefused: true},
		{name: "a snapshot of the previous format, which anyone could write", path: func(t *testing.T) string {
			p := valid(t, t.TempDir())
			write(t, p, formatV1(t, id, list.ResourceVersion, planted))
			return p
		}, want: "format version 1, written by an older ctrlkit"},
		{name: "a snapshot written with another directory's key", path: func(t *testing.T) string {
			b, err := os.ReadFile(valid(t, t.TempDir()))
			if err != nil {
				t.Fatal(err)
			}
			p := valid(t, t.TempDir())
			write(t, p, b)
			return p
		}, want: "header MAC mismatch"},
		{name: "a FIFO", path: func(t *testing.T) string {
			p := valid(t, t.TempDir())
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, want: "is not a regular file (a FIFO)"},
		{name: "a link to another user's secret file", path: func(t *testing.T) string {
			p := valid(t, t.TempDir())
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(secret, p); err != nil {
				t.Fatal(err)
			}
			return p
		}, want: "is a symbolic link"},
		{name: "a 2 GiB sparse file", path: func(t *testing.T) string {
			p := valid(t, t.TempDir())
			if err := os.Truncate(p, 2<<30); err != nil {
				t.Fatal(err)
			}
			return p
		}, want: "size mismatch"},
	}
	if root {
		cases = append(cases, trustCase{name: "a private folder made first by another user, holding a snapshot", path: func(t *testing.T) string {
			vol := volume(t)
			sub := filepath.Join(vol, private)
			if err := os.Mkdir(sub, 0o700); err != nil {
				t.Fatal(err)
			}
			valid(t, sub)
			if err := os.Chown(sub, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(vol, "cms.snap")
		}, want: "is writable by other users, is owned by uid 65534, not by you", dirRefused: true})
	} else {
		cases = append(cases, trustCase{name: "a private folder everyone can write", path: func(t *testing.T) string {
			vol := volume(t)
			sub := filepath.Join(vol, private)
			if err := os.Mkdir(sub, 0o700); err != nil {
				t.Fatal(err)
			}
			valid(t, sub)
			chmod(t, sub, 0o777)
			return filepath.Join(vol, "cms.snap")
		}, want: "is writable by other users, is writable by other users too", dirRefused: true})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path(t)
			var before []os.DirEntry
			if tc.dirRefused {
				var err error
				if before, err = os.ReadDir(filepath.Dir(path)); err != nil {
					t.Fatal(err)
				}
			}
			r := runWarm(t, cms, informer.Snapshot[*corev1.ConfigMap]{Path: path, Identity: id}, nil)
			t.Logf("start: %v", r.start)
			if r.start.Warm || !strings.Contains(r.start.Reason, tc.want) {
				t.Fatalf("start: %v; want cold saying %q", r.start, tc.want)
			}
			if strings.Contains(r.start.Reason, secretText[:5]) {
				t.Errorf("the reason quotes the secret file: %s", r.start.Reason)
			}
			if got := r.heard.counts(); got["add (initial)"] != 10 || len(got) != 1 {
				t.Errorf("handler heard %v, want the server's 10 objects as a cold initial list", got)
			}
			if r.lw.lists.Load()+r.lw.streams.Load() == 0 {
				t.Error("a cold start did not list")
			}
			if want := serverState(t, cms)(); !maps.Equal(r.cached, want) {
				t.Errorf("cache:\n%v\nserver:\n%v", r.cached, want)
			}
			if tc.dirRefused {
				after, err := os.ReadDir(filepath.Dir(path))
				if err != nil {
					t.Fatal(err)
				}
				if r.stats.Writes+r.stats.Failures != 0 || !reflect.DeepEqual(names(after), names(before)) {
					t.Errorf("into a refused directory: %+v, entries %v then %v; want no write", r.stats, names(before), names(after))
				}
				if after, err := os.ReadDir(theirs); err != nil || !reflect.DeepEqual(names(after), names(theirsBefore)) {
					t.Errorf("the directory a link led to holds %v (%v); want %v, unchanged", names(after), err, names(theirsBefore))
				}
				return
			}
			written := path
			if tc.written != nil {
				written = tc.written(path)
			}
			if fi, err := os.Lstat(written); r.stats.Writes != 1 || err != nil || !fi.Mode().IsRegular() || fi.Size() > 1<<20 {
				t.Errorf("after the run: %+v, the file %v (%v); want a snapshot written at %s", r.stats, fi, err, written)
			}
		})
	}
}

// An emptyDir volume's mount point is root's, mode 0777 and not sticky,
// and the controller runs as another user (here the volume is another
// user's when the test runs as root): the informer keeps its snapshot in a
// private folder "ctrlkit-<uid>" that it makes inside (mode 0700), writes
// nothing else into the volume, and the next run starts warm from it.
func TestInformer_snapshotsInAnEmptyDirVolumeMakeTheNextStartWarm(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	cms := configMaps(t, srv.Config(), ns)
	w := newWriter(cms, 10)
	w.createAll(t)
	vol := t.TempDir()
	if os.Geteuid() == 0 {
		if err := os.Chown(vol, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	chmod(t, vol, 0o777)
	snap := informer.Snapshot[*corev1.ConfigMap]{Path: filepath.Join(vol, "cms.snap"),
		Identity: snapshot.Identity{Cluster: "test", Version: "v1", Resource: "configmaps", Namespace: ns}}

	cold := runWarm(t, cms, snap, nil)
	if cold.start.Warm || cold.start.Reason != "no snapshot yet" || cold.stats.Writes != 1 {
		t.Fatalf("first run: %v, writes %+v; want cold, no snapshot yet, and one snapshot written", cold.start, cold.stats)
	}
	private := filepath.Join(vol, fmt.Sprintf("ctrlkit-%d", os.Geteuid()))
	fi, err := os.Lstat(private)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the private folder: %v (%v); want a directory, mode 0700", fi, err)
	}
	if got, err := os.ReadDir(vol); err != nil || !reflect.DeepEqual(names(got), []string{filepath.Base(private)}) {
		t.Fatalf("the volume holds %v (%v); want only the private folder", names(got), err)
	}
	if got, err := os.ReadDir(private); err != nil || !reflect.DeepEqual(names(got), []string{"cms.snap", snapshot.KeyFile}) {
		t.Fatalf("the private folder holds %v (%v); want the snapshot and the key", names(got), err)
	}

	warm := runWarm(t, cms, snap, nil)
	if !warm.start.Warm || warm.start.Objects != 10 {
		t.Fatalf("second run: %v; want warm from 10 objects", warm.start)
	}
	if l, s := warm.lw.lists.Load(), warm.lw.streams.Load(); l != 0 || s != 0 {
		t.Errorf("a warm start listed %d times and streamed %d times; want neither", l, s)
	}
	if want := serverState(t, cms)(); !maps.Equal(warm.cached, want) {
		t.Errorf("cache:\n%v\nserver:\n%v", warm.cached, want)
	}
}

func names(des []os.DirEntry) []string {
	var out []string
	for _, d := range des {
		out = append(out, d.Name())
	}
	return out
}

// formatV1 returns objs at rv as a snapshot of format version 1, which no
// key authenticated: a CRC-32C after the header, a bare SHA-256 trailer.
func formatV1(t *testing.T, id snapshot.Identity, rv string, objs []*corev1.ConfigMap) []byte {
	t.Helper()
	typ := reflect.TypeFor[*corev1.ConfigMap]()
	var body []byte
	for _, s := range []string{id.Cluster, id.Server, id.Group, id.Version, id.Resource, id.Namespace,
		id.LabelSelector, id.FieldSelector, id.Shards, typ.String(), snapshot.Fingerprint(typ), rv} {
		body = append(binary.AppendUvarint(body, uint64(len(s))), s...)
	}
	body = binary.AppendUvarint(body, uint64(len(objs)))
	b := binary.BigEndian.AppendUint32([]byte("CKSNAPv\x00\x00\x01"), uint32(len(body)))
	b = append(b, body...)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	for _, o := range objs {
		rec, err := o.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		b = append(binary.AppendUvarint(b, uint64(len(rec))), rec...)
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}
