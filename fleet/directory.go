package fleet

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
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
	// AllowExec accepts kubeconfigs that run a credential plugin.
	AllowExec bool
	// Interval is how often Path is read. Default: 1s.
	Interval time.Duration
	// Logger receives a line per cluster engaged, disengaged or refused.
	// Default: slog.Default().
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
		log = slog.Default()
	}
	seen := map[string][32]byte{}    // engaged from this directory: name → the file's digest
	refused := map[string][32]byte{} // not engaged: name → the digest refused (logged once per content)
	first := true
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		files, err := d.read()
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
func (d Directory) read() (map[string]file, error) {
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
		b, err := readPrivate(filepath.Join(d.Path, e.Name()))
		if err == nil {
			b, err = inlineFiles(b, d.Path)
		}
		out[strings.TrimSuffix(e.Name(), ext)] = file{b, err}
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
