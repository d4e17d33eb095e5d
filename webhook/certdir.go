package webhook

import (
	"crypto/tls"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ctrlkit/ctrlkit/internal/safefile"
)

// The certificate directory holds the serving key: whoever can change what
// the server reads there can impersonate the webhook, and whoever can point
// its names elsewhere can make the server read what they like (a FIFO that
// never ends, /dev/zero). So the server reads a pair only through entries
// that no other user could have put there:
//
//   - the directory, and every directory above it, is owned by the current
//     user or root, and not writable by group or others unless sticky (then
//     others may add names but not rename or remove ours: /tmp, and the
//     tmpfs a Secret volume is, mode 1777, or 3777 with an fsGroup);
//   - every entry on the way to each file (the name, the links a Secret
//     volume makes, tls.key -> ..data/tls.key and ..data -> ..2026_..., the
//     directories they lead to) is owned by the current user or root, and a
//     file or directory among them is not writable by group or others
//     (again unless a sticky directory);
//   - a link is followed only while it stays inside the directory;
//   - each file is opened without following a link and without blocking,
//     must be a regular file, and is read up to maxCertFile bytes.
//
// This is the rule of the test API server's data directory (apiserver's
// prepareDataDir) plus the sticky exception a Secret volume needs.

// maxCertFile bounds each file: a certificate chain or key is a few KiB.
const maxCertFile = 1 << 20

// maxLinks bounds the links followed to reach one file, as the kernel does.
const maxLinks = 40

// certDir reads a certificate and key from a directory under the rules
// above.
type certDir struct {
	path string
	uid  int // whose entries are trusted, with root's: os.Getuid(), another in tests
}

// load reads the certificate and key named certName and keyName.
func (d certDir) load(certName, keyName string) (tls.Certificate, error) {
	real, err := d.resolve()
	if err != nil {
		return tls.Certificate{}, err
	}
	certPEM, err := d.read(real, certName)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := d.read(real, keyName)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// resolve returns the directory's absolute path with links resolved, after
// checking that neither it nor a directory above it could be changed by
// another user.
func (d certDir) resolve() (string, error) {
	abs, err := filepath.Abs(d.path)
	if err != nil {
		return "", fmt.Errorf("certificate directory: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("certificate directory: %w", err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("certificate directory: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("certificate directory %s is not a directory", real)
	}
	if err := d.trusted(real, fi); err != nil {
		return "", err
	}
	for p := filepath.Dir(real); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("certificate directory: %w", err)
		}
		if d.trusted(p, fi) != nil {
			return "", fmt.Errorf("certificate directory %s is inside %s (owner uid %d, mode %s), where another "+
				"user could rename or replace it; use a directory under ones that only you (or root) can write",
				real, p, safefile.Owner(fi), fi.Mode())
		}
		if filepath.Dir(p) == p {
			return real, nil
		}
	}
}

// trusted returns why the entry at path, described by fi (not following a
// link), could have been made or changed by another user, or nil.
func (d certDir) trusted(path string, fi fs.FileInfo) error {
	uid, owner, mode := d.uid, safefile.Owner(fi), fi.Mode()
	switch {
	case owner != uid && owner != 0:
		return fmt.Errorf("%s is owned by uid %d, neither you (uid %d) nor root: that user could replace "+
			"the serving certificate; mount the Secret there, or use a directory and files you created", path, owner, uid)
	case mode&fs.ModeSymlink != 0:
		return nil // a link's own mode means nothing
	case mode.Perm()&0o022 != 0 && mode.IsDir() && mode&fs.ModeSticky == 0:
		return fmt.Errorf("%s is writable by other users (mode %s): they could plant or swap the serving "+
			"certificate; run \"chmod go-w %s\" (or make it sticky, chmod +t, as /tmp and a Secret volume are)",
			path, mode, path)
	case mode.Perm()&0o022 != 0 && !mode.IsDir():
		return fmt.Errorf("%s is writable by other users (mode %s): they could rewrite the serving certificate; "+
			"run \"chmod go-w %s\" (for a Secret volume, give it a defaultMode without write bits)", path, mode, path)
	}
	return nil
}

// read reads the file name in dir (the path resolve returned).
func (d certDir) read(dir, name string) ([]byte, error) {
	path, err := d.resolveIn(dir, name)
	if err != nil {
		return nil, err
	}
	// Neither a FIFO (it would hang the handshake) nor a device (/dev/zero
	// would fill memory) is waited on or read.
	f, fi, err := safefile.OpenRegular(path)
	if err != nil {
		return nil, fmt.Errorf("refusing to read it: %w", err)
	}
	defer f.Close()
	if err := d.trusted(path, fi); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCertFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxCertFile {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a certificate or a key", path, maxCertFile)
	}
	return b, nil
}

// resolveIn returns the path of name inside dir with every link resolved,
// following a link only while it stays inside dir, and checks each entry on
// the way (trusted).
func (d certDir) resolveIn(dir, name string) (string, error) {
	todo := strings.Split(name, "/")
	cur, via := dir, "" // cur is dir or a directory inside it, never a link; via the last link followed
	leaves := func() error {
		if via == "" {
			return fmt.Errorf("the name %q leads out of the certificate directory %s", name, dir)
		}
		return fmt.Errorf("%s leads out of the certificate directory %s (through %s); only links that "+
			"stay inside it are followed, as a Secret volume's do", filepath.Join(dir, name), dir, via)
	}
	for links := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if cur == dir {
				return "", leaves()
			}
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		if err := d.trusted(next, fi); err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s: more than %d links", filepath.Join(dir, name), maxLinks)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		via = next + " -> " + target
		if filepath.IsAbs(target) {
			rel, err := filepath.Rel(dir, filepath.Clean(target))
			if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				return "", leaves()
			}
			cur, target = dir, rel
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return cur, nil
}
