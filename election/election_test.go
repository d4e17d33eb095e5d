package election_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/lease"
)

// Taking over and fencing are tested with real processes on the real API
// server in package manager (TestLeaderElection_*); these are the options.
func TestNew_rejectsOptionsThatBreakFencing(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	for _, tc := range []struct {
		name string
		opts election.Options
		want string
	}{
		{name: "a Lease needs a name", opts: election.Options{}, want: "name is required"},
		{name: "the renew deadline must end before the lease does",
			opts: election.Options{Name: "x", Timing: lease.Timing{LeaseDuration: 10 * time.Second, RenewDeadline: 10 * time.Second}},
			want: "must be shorter than LeaseDuration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := election.New(cfg, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	e, err := election.New(cfg, election.Options{Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if e.IsLeader() || e.Leader() != "" || !strings.Contains(e.Identity(), "_") {
		t.Errorf("a new Elector: leader %v, leader seen %q, identity %q; want false, \"\", host_suffix", e.IsLeader(), e.Leader(), e.Identity())
	}
}
