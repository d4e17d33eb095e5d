package fleet

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ctrlkit/ctrlkit/internal/safefile"
)

// Directory is a provider of clusters: every kubeconfig file in Path
// (*.kubeconfig, *.yaml, *.yml; its current context) is a cluster named
// after the file without its extension. A file added engages its cluster,
// a file removed disengages it, a file changed is given to Fleet.Update
// (rotated credentials keep the cluster's cache; another server engages
// it again).
//
// The folder and each file must belong to this process's user and be
// writable by no other (a kubeconfig says what the process connects to
// and with what credentials), and so must each file a kubeconfig names
// (tokenFile, client-certificate, client-key, certificate-authority): a
// relative path is taken from Path, as kubectl takes it from the
// kubeconfig's folder, never from the working directory. Those files are
// read with the kubeconfig, every Interval, so a rotated certificate or
// token is a changed kubeconfig. A credential plugin (exec,
// auth-provider) is refused unless AllowExec.
type Directory struct {
	Path string
	// AllowExec accepts kubeconfigs that run a credential plugin; an exec
	// plugin's command must still be a file no other user could have
	// planted or swapped (found on PATH when it has no slash).
	AllowExec bool
	// Interval is how often Path is read. Default: 1s.
	Interval time.Duration
	// Logger receives a line per cluster engaged, disengaged or refused.
	// Default: the fleet's (Fleet.Logger).
	Logger *slog.Logger
}

// Run keeps f's clusters those of d.Path until ctx ends. A file that is
// not a usable kubeconfig is logged and skipped (its cluster, if engaged
// from an earlier version of the file, runs on with that version, listed by
// Fleet.Refused until the file is fixed or removed); a Path that cannot
// be read is an error only at the first read.
func (d Directory) Run(ctx context.Context, f *Fleet) error {
	interval := d.Interval
	if interval <= 0 {
		interval = time.Second
	}
	log := d.Logger
	if log == nil {
		log = f.Logger()
	}
	seen := map[string][32]byte{}    // engaged from this directory: name → the file's digest
	refused := map[string][32]byte{} // not engaged: name → the digest refused (logged once per content)
	cache := inlinedFiles{}
	first := true
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		files, err := d.read(cache)
		switch {
		case err != nil && first:
			return fmt.Errorf("fleet: directory %s: %w", d.Path, err)
		case err != nil:
			log.Warn("fleet: reading the clusters' directory failed; keeping the clusters as they are", "path", d.Path, "err", err)
		default:
			d.apply(f, files, seen, refused, log)
		}
		first = false
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// inlinedFiles keeps, by cluster name, what inlineFiles made of each
// kubeconfig, to be used again while the kubeconfig and every file it
// named are as they were: a folder read every second then parses only
// what changed.
type inlinedFiles map[string]inlined

type inlined struct {
	raw   [32]byte    // the kubeconfig's digest
	files []fileStamp // what it named, as they were read
	b     []byte
	err   error
}

// fileStamp is what tells that a file changed: its size, modification
// time, mode and owner (absent: the zero stamp).
type fileStamp struct {
	path  string
	size  int64
	mod   time.Time
	mode  os.FileMode
	owner int
}

func stampOf(path string) fileStamp {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileStamp{path: path}
	}
	return fileStamp{path: path, size: fi.Size(), mod: fi.ModTime(), mode: fi.Mode(), owner: safefile.Owner(fi)}
}

// inline returns inlineFiles(b, dir) for the cluster called name, from
// the cache when nothing it read has changed.
func (c inlinedFiles) inline(name string, b []byte, dir string) ([]byte, error) {
	raw := sha256.Sum256(b)
	if was, ok := c[name]; ok && was.raw == raw && !slices.ContainsFunc(was.files, func(s fileStamp) bool { return stampOf(s.path) != s }) {
		return was.b, was.err
	}
	out, paths, err := inlineFiles(b, dir)
	files := make([]fileStamp, len(paths))
	recent := false
	for i, p := range paths {
		files[i] = stampOf(p)
		recent = recent || time.Since(files[i].mod) < recentlyChanged
	}
	delete(c, name)
	if !recent { // a file changed as it was read could show the old content under the new stamp
		c[name] = inlined{raw: raw, files: files, b: out, err: err}
	}
	return out, err
}

// recentlyChanged is how recent a change to a named file keeps the
// kubeconfig from being cached: it is read whole again until then.
const recentlyChanged = 2 * time.Second

// file is a kubeconfig file read, or why it could not be.
type file struct {
	b   []byte
	err error
}

// digest identifies what was read (or refused), to act once per content.
func (f file) digest() [32]byte {
	if f.err != nil {
		return sha256.Sum256([]byte("refused: " + f.err.Error()))
	}
	return sha256.Sum256(f.b)
}

// read returns the kubeconfig files of d.Path by cluster name.
func (d Directory) read(cache inlinedFiles) (map[string]file, error) {
	fi, err := os.Stat(d.Path)
	if err != nil {
		return nil, err
	}
	if err := private(fi); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(d.Path)
	if err != nil {
		return nil, err
	}
	out := map[string]file{}
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".kubeconfig" && ext != ".yaml" && ext != ".yml") {
			continue
		}
		name := strings.TrimSuffix(e.Name(), ext)
		b, err := readPrivate(filepath.Join(d.Path, e.Name()))
		if err == nil {
			b, err = cache.inline(name, b, d.Path)
		}
		out[name] = file{b, err}
	}
	for name := range cache {
		if _, ok := out[name]; !ok {
			delete(cache, name)
		}
	}
	return out, nil
}

// apply engages, re-engages and disengages f's clusters to match files.
func (d Directory) apply(f *Fleet, files map[string]file, seen, refused map[string][32]byte, log *slog.Logger) {
	for name := range refused {
		if _, ok := files[name]; !ok {
			delete(refused, name)
			f.unrefuse(name)
		}
	}
	for name := range seen {
		if _, ok := files[name]; !ok {
			delete(seen, name)
			if err := f.Disengage(name); err == nil {
				log.Info("fleet: cluster disengaged: its kubeconfig is gone", "cluster", name)
			}
		}
	}
	for name, fl := range files {
		sum := fl.digest()
		if old, engaged := seen[name]; engaged {
			bad, wasRefused := refused[name]
			switch {
			case old == sum && wasRefused: // back to what it runs on: no longer refused
				delete(refused, name)
				f.unrefuse(name)
				continue
			case old == sum || wasRefused && bad == sum:
				continue // unchanged, or the same change refused before
			}
			err := d.engage(f, name, fl, true, log) // rotated credentials keep the cache, another server does not
			switch {
			case err == nil:
				seen[name] = sum
				delete(refused, name)
			case f.changeFailed(name, err, log): // a file read half written: the cluster runs on
				refused[name] = sum
			default: // an Update to another server that could not engage it: it is gone
				delete(seen, name)
				refused[name] = sum
			}
			continue
		}
		if bad, ok := refused[name]; ok && bad == sum {
			continue // the same content was refused before
		}
		if err := d.engage(f, name, fl, false, log); err != nil {
			if !errors.Is(err, ErrEngaged) { // engaged by someone else: not ours to manage
				_ = f.refuse(name, err) // a file's own faults too, not only Engage's
				log.Warn("fleet: cluster not engaged", "cluster", name, "err", err)
			}
			refused[name] = sum
			continue
		}
		delete(refused, name)
		seen[name] = sum
	}
}

// engage engages the cluster of file fl or, when changed is set (the
// cluster is engaged from an earlier version of the file), gives it what
// fl now says (Fleet.Update).
func (d Directory) engage(f *Fleet, name string, fl file, changed bool, log *slog.Logger) error {
	if fl.err != nil {
		return fl.err
	}
	cfg, err := kubeconfigPolicy{allowExec: d.AllowExec}.restConfig(fl.b) // its files put inline by read
	if err != nil {
		return err
	}
	give, what := f.Engage, "fleet: cluster engaged"
	if changed {
		give, what = f.Update, "fleet: cluster's kubeconfig changed"
	}
	if err := give(name, cfg); err != nil {
		return err
	}
	log.Info(what, "cluster", name, "server", redactedHost(cfg.Host))
	return nil
}
