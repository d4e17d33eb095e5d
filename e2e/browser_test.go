package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's chromium package's binary, which .ci/run installs.
const chromiumPath = "chromium"

// lockedBuffer collects the browser's output from chromedp's goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// browser starts headless Chromium for the test and returns a context whose
// actions run in one of its tabs. The browser is stopped, and its process
// waited for, when the test ends. A machine without Chromium fails the
// test: it never skips.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath(chromiumPath)
	if err != nil {
		t.Fatalf("cannot start Chromium: %v; install Debian's package with: apt-get install -y chromium (.ci/run does)", err)
	}
	out := &lockedBuffer{}
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1100), chromedp.CombinedOutput(out))
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc() // waits for the browser process to exit
	})
	// The first action starts the browser, bound to the context it runs
	// with (so not one with a shorter life).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("cannot start Chromium (%s): %v\nits output:\n%s", path, err, out.String())
	}
	return ctx
}

// saveArtifact writes data as name into the test's artifact directory
// (kept with go test -artifacts -outputdir DIR) and, when
// $CTRLKIT_ARTIFACTS is set, into that folder too, and logs where.
func saveArtifact(t *testing.T, name string, data []byte) {
	t.Helper()
	dirs := []string{t.ArtifactDir()}
	if d := os.Getenv("CTRLKIT_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("saved %s (%d bytes)", p, len(data))
	}
}
