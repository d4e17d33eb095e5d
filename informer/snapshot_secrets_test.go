package informer_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// A factory's snapshots leave Secrets out unless told to take them: a
// snapshot would put their data on the node's disk. The informer of
// Secrets starts cold saying why and writes nothing; the ConfigMaps'
// beside it is written. With Snapshots.Secrets both are.
func TestFactory_snapshotsLeaveSecretsOutUnlessAsked(t *testing.T) {
	leakcheck.Check(t)
	for _, secrets := range []bool{false, true} {
		dir := t.TempDir()
		cs := fake.NewClientset(
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings", ResourceVersion: "7"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "token", ResourceVersion: "8"},
				Data: map[string][]byte{"password": []byte("hunter2")}})
		f := informer.NewFactory(informer.FactoryOptions{
			Snapshots: informer.SnapshotOptions{Dir: dir, Secrets: secrets,
				Cluster: func(context.Context) (string, error) { return "uid-of-kube-system", nil }},
			Reflector: reflector.Options{DisableWatchList: true},
		})
		core := func(resource string) informer.Scope {
			return informer.Scope{Resource: schema.GroupVersionResource{Version: "v1", Resource: resource}, Namespace: "default"}
		}
		if _, err := informer.For(f, core("configmaps"), func() reflector.ListerWatcher[*corev1.ConfigMap] {
			c := cs.CoreV1().ConfigMaps("default")
			return listwatch.New[*corev1.ConfigMap](c.List, c.Watch, listwatch.Options{})
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := informer.For(f, core("secrets"), func() reflector.ListerWatcher[*corev1.Secret] {
			c := cs.CoreV1().Secrets("default")
			return listwatch.New[*corev1.Secret](c.List, c.Watch, listwatch.Options{})
		}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- f.Run(ctx) }()
		if err := f.WaitForCacheSync(ctx); err != nil {
			t.Fatal(err)
		}
		starts := map[string]string{}
		for _, st := range f.Statuses() {
			starts[st.Name] = st.Start.String()
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}

		var files []string
		if err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(path, ".snap") {
				files = append(files, strings.SplitN(d.Name(), "_", 2)[0])
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(files)
		want, secretsStart := []string{"configmaps"}, "cold: Secrets are not snapshotted (FactoryOptions.Snapshots.Secrets)"
		if secrets {
			want, secretsStart = []string{"configmaps", "secrets"}, "cold: no snapshot yet"
		}
		if !slices.Equal(files, want) {
			t.Errorf("Secrets %v: snapshots of %v, want %v", secrets, files, want)
		}
		if got := starts["secrets/v1 in namespace default"]; got != secretsStart {
			t.Errorf("Secrets %v: the Secrets' informer started %q, want %q (all: %v)", secrets, got, secretsStart, starts)
		}
	}
}
