package informer

import (
	"errors"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/object"
)

func TestDetectEnabled_theOptionThenTheEnvironmentThenWhetherThisIsATest(t *testing.T) {
	for _, tc := range []struct {
		d       Detection
		env     string
		test    bool
		want    bool
		wantErr string
	}{
		{DetectInTests, "", true, true, ""},
		{DetectInTests, "", false, false, ""},
		{DetectInTests, "0", true, false, ""},
		{DetectInTests, "false", true, false, ""},
		{DetectInTests, "1", false, true, ""},
		{DetectInTests, "true", false, true, ""},
		{DetectInTests, "yes please", true, false, `CTRLKIT_CACHE_MUTATION_DETECTOR="yes please": want 1, true, 0 or false`},
		{DetectAlways, "0", false, true, ""},
		{DetectNever, "1", true, false, ""},
		{Detection(7), "", true, false, "DetectMutations 7 is not a Detection"},
	} {
		got, err := detectEnabled(tc.d, tc.env, tc.test)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("detectEnabled(%d, %q, %v) error = %v, want %q", tc.d, tc.env, tc.test, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("detectEnabled(%d, %q, %v) = %v, %v; want %v", tc.d, tc.env, tc.test, got, err, tc.want)
		}
	}
}

// recorder collects what a detector reports.
type recorder struct {
	mu   sync.Mutex
	errs []error
}

func (r *recorder) report(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

func (r *recorder) all() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

func testDetector(r *recorder) *detector[*corev1.ConfigMap] {
	return &detector[*corev1.ConfigMap]{name: "cms", copy: copierOf[*corev1.ConfigMap](), report: r.report,
		entries: map[string]*cachedCopy[*corev1.ConfigMap]{}}
}

// A mutation of an object that never changes again is found by the last
// sweep, and reported once, however many checks see it.
func TestDetector_aSweepFindsAMutationOfAnObjectThatNeverChangesAgainOnce(t *testing.T) {
	r := &recorder{}
	d := testDetector(r)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}, Data: map[string]string{"k": "v"}}
	d.stored("ns/a", cm)
	d.sweep()
	if errs := r.all(); len(errs) != 0 {
		t.Fatalf("reported %v before any mutation", errs)
	}
	cm.Data["k"] = "w"
	d.sweep()
	d.sweep()
	errs := r.all()
	if len(errs) != 1 {
		t.Fatalf("reported %d errors, want 1: %v", len(errs), errs)
	}
	var me *MutationError
	if !errors.As(errs[0], &me) || me.Name != (object.ObjectName{Namespace: "ns", Name: "a"}) ||
		me.Kind != "*v1.ConfigMap" || len(me.Changes) != 1 || me.Changes[0].Path != `.data["k"]` {
		t.Fatalf("reported %#v", errs[0])
	}
	want := `informer cms: cached *v1.ConfigMap ns/a was modified in place (cached objects are shared and read-only: DeepCopy one before changing it): .data["k"]: "v" -> "w"`
	if got := errs[0].Error(); got != want {
		t.Errorf("message:\n%s\nwant\n%s", got, want)
	}
	d.removed("ns/a") // already reported: not again
	d.flush()
	if n := len(r.all()); n != 1 {
		t.Errorf("reported %d errors after the object left the cache, want still 1", n)
	}
}
