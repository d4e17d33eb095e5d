package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

func TestRun_unknownCommandPrintsUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"frobnicate"}, &out, &errOut)
	if err == nil || !strings.Contains(errOut.String(), "usage:") {
		t.Fatalf("err = %v, stderr = %q; want an error and the usage", err, errOut.String())
	}
}

func TestRun_apiserverRunServesUntilInterruptedAndCleansUp(t *testing.T) {
	leakcheck.Check(t)
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"apiserver", "run"}, pw, &stderr)
		pw.Close()
		done <- err
	}()

	kubeconfig := make(chan string, 1)
	go func() {
		defer close(kubeconfig)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "kubeconfig: "); ok {
				kubeconfig <- p
			}
		}
	}()
	var path string
	select {
	case p, ok := <-kubeconfig:
		if !ok {
			t.Fatalf("run ended without printing a kubeconfig: %v\n%s", <-done, stderr.String())
		}
		path = p
	case <-time.After(2 * time.Minute):
		t.Fatal("no kubeconfig line within 2m")
	}
	if _, err := clientcmd.LoadFromFile(path); err != nil {
		t.Fatalf("printed kubeconfig does not load: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after interrupt: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not return within 1m of the interrupt")
	}
	for range kubeconfig { // the reader ends when the pipe closes
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("temporary kubeconfig %s still exists after stop (err %v)", path, err)
	}
}
