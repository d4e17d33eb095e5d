package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

func TestDemo_convergesAndSaysSo(t *testing.T) {
	leakcheck.Check(t)
	var out, errOut bytes.Buffer
	if err := runDemo(t.Context(), []string{"--foos", "40"}, &out, &errOut); err != nil {
		t.Fatalf("demo: %v\n%s%s", err, out.String(), errOut.String())
	}
	if !regexp.MustCompile(`Deployments warm \(\d+ objects at resource version \d+\)`).MatchString(out.String()) {
		t.Errorf("demo output does not show the Deployments' cache starting warm:\n%s", out.String())
	}
	for _, want := range []string{"caches synced", "CONVERGED", "40 created", "14 scaled", "4 deleted", "36 remain",
		`spec.deploymentName: Invalid value: "kube-proxy": the prefix "kube-" is reserved`,
		"a Foo without replicas is stored with spec.replicas: 1, set by the defaulting webhook",
		"5 Deployments were deleted while it was down", "Foos warm (36 objects at resource version",
		"CONVERGED again"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
	// A new user's first run ends clean: nothing failed, the snapshots
	// written at the end included.
	for line := range strings.Lines(errOut.String()) {
		if strings.Contains(line, "level=ERROR") {
			t.Errorf("the demo logged an error: %s", line)
		}
	}
}

func TestRunFoo_namesAMissingCRD(t *testing.T) {
	srv := apiserver.StartForTest(t, apiserver.Options{})
	var errOut bytes.Buffer
	err := run(t.Context(), []string{"run", "foo", "--metrics-addr", "0", "--kubeconfig", srv.Kubeconfig()}, &bytes.Buffer{}, &errOut)
	if err == nil || !strings.Contains(err.Error(), "CRD is not installed") {
		t.Fatalf("run foo = %v, want an error saying the CRD is not installed", err)
	}
}

func TestRunFoo_namesAnUnreachableServer(t *testing.T) {
	kubeconfig := unreachableKubeconfig(t)
	err := run(t.Context(), []string{"run", "foo", "--metrics-addr", "0", "--kubeconfig", kubeconfig}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "cannot reach the API server at https://127.0.0.1:1") {
		t.Fatalf("run foo = %v, want an error naming the unreachable server", err)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(envRunAsCLI) != "" { // a replica of the demo: be ctrlkit
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestDemo_threeReplicasConvergeAfterTheLeaderIsKilled(t *testing.T) {
	leakcheck.Check(t)
	var out, errOut bytes.Buffer
	err := runDemo(t.Context(), []string{"--foos", "30", "--replicas", "3", "--kill-leader"}, &out, &errOut)
	if err != nil {
		t.Fatalf("demo: %v\n%s%s", err, out.String(), errOut.String())
	}
	for _, want := range []string{"running 3 replicas", "leader replica-", "killed the leader replica-", "CONVERGED"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
	t.Log(out.String())
}

func TestDemo_threeShardedReplicasShareTheFoosAndConvergeAfterOneIsKilled(t *testing.T) {
	leakcheck.Check(t)
	var out, errOut bytes.Buffer
	err := runDemo(t.Context(), []string{"--foos", "60", "--replicas", "3", "--shards"}, &out, &errOut)
	if err != nil {
		t.Fatalf("demo: %v\n%s%s", err, out.String(), errOut.String())
	}
	t.Log(out.String())
	for _, want := range []string{`running 3 replicas of "ctrlkit run foo --shard-ring foo`, `ring "foo" formed`,
		"killed replica-", "shards moved to the others", "CONVERGED", "60 created", "54 remain"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	_, summary, _ := strings.Cut(out.String(), "CONVERGED")
	working := 0
	for _, m := range regexp.MustCompile(`(?m)^    replica-\d+: .*?(\d+) reconciles`).FindAllStringSubmatch(summary, -1) {
		if m[1] != "0" {
			working++
		}
	}
	if working < 2 {
		t.Errorf("the summary shows reconciles on %d replicas, want at least 2", working)
	}
}
