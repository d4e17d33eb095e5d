package podlogger_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/examples/podlogger"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
)

var env apiserver.Shared

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

func TestPodLogger_printsEachPodsStateAndItsDeletion(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	kube := kubernetes.NewForConfigOrDie(srv.Config())
	pods := kube.CoreV1().Pods(ns)
	newPod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	}
	if _, err := pods.Create(t.Context(), newPod("before"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	leakcheck.Check(t)

	pr, pw := io.Pipe()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- podlogger.Run(ctx, srv.Config(), ns, pw, manager.Options{HTTPAddr: "0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		pw.Close()
		for range lines {
		}
	}()

	expect := func(want string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case l := <-lines:
				if strings.Contains(l, want) {
					return
				}
			case <-deadline:
				t.Fatalf("no line containing %q within 30s", want)
			}
		}
	}
	expect(`Sync/Add/Update for Pod before, phase "Pending"`) // the initial list; the server defaults the phase
	p, err := pods.Create(t.Context(), newPod("web"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expect("Sync/Add/Update for Pod web")
	p.Labels = map[string]string{"tier": "front"}
	if _, err := pods.Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("labels map[tier:front]")
	if err := pods.Delete(t.Context(), "web", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	expect("Pod " + ns + "/web does not exist anymore")
}
