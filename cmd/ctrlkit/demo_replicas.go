package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// demoLease is the Lease "ctrlkit run foo --leader-elect" uses.
const demoLease = "foo-controller"

// startReplicas runs n copies of "ctrlkit run foo" as separate processes:
// with --leader-elect, or in the ring demoRing when sharded. Their logs go
// to files in a temporary folder. It sends on ctrlErr when every replica
// has exited. The processes get SIGTERM when ctx ends and are waited for
// through wg.
func (d *demo) startReplicas(ctx context.Context, wg *sync.WaitGroup, kubeconfig string, n int, sharded bool, ctrlErr chan<- error) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logs, err := os.MkdirTemp("", "ctrlkit-demo-replicas-")
	if err != nil {
		return err
	}
	mode := []string{"--leader-elect", "--metrics-addr", "0"}
	if sharded {
		mode = []string{"--shard-ring", demoRing, "--shard-key", "uid", "--lease-duration", demoShardLease.String(),
			"--metrics-addr", "127.0.0.1:0"}
	}
	fmt.Fprintf(d.out, "running %d replicas of \"ctrlkit run foo %s\"; their logs: %s\n", n, strings.Join(mode[:len(mode)-2], " "), logs)
	var running sync.WaitGroup
	d.procs = map[string]*os.Process{}
	for i := range n {
		id := fmt.Sprintf("replica-%d", i+1)
		args := append([]string{"run", "foo", "--kubeconfig", kubeconfig, "--identity", id}, mode...)
		cmd := exec.Command(self, args...)
		cmd.Env = append(os.Environ(), envRunAsCLI+"=1")
		out, err := os.Create(filepath.Join(logs, id+".log"))
		if err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = out, out
		if sharded {
			r := &replica{id: id}
			d.ring = append(d.ring, r)
			cmd.Stdout = &lineWriter{w: out, line: r.sawLine}
		}
		if err := cmd.Start(); err != nil {
			out.Close()
			return err
		}
		d.procs[id] = cmd.Process
		running.Add(1)
		wg.Go(func() {
			defer running.Done()
			stop := context.AfterFunc(ctx, func() { cmd.Process.Signal(syscall.SIGTERM) })
			defer stop()
			_ = cmd.Wait()
			out.Close()
		})
	}
	d.status = func() string { return "leader " + d.leader(ctx) }
	wg.Go(func() {
		running.Wait()
		ctrlErr <- fmt.Errorf("every replica exited (logs in %s)", logs)
	})
	return nil
}

// leader returns the identity holding the demo's Lease, or "none".
func (d *demo) leader(ctx context.Context) string {
	l, err := d.kube.CoordinationV1().Leases("default").Get(ctx, demoLease, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return "none"
	}
	return *l.Spec.HolderIdentity
}

// killLeaderHalfway sends SIGKILL to the leading replica once half the Foos
// have been created.
func (d *demo) killLeaderHalfway(ctx context.Context) {
	if !d.waitHalfCreated(ctx) {
		return
	}
	id := d.leader(ctx)
	if p, ok := d.procs[id]; ok {
		p.Kill()
		fmt.Fprintf(d.out, "  killed the leader %s (SIGKILL); a standby takes over when its lease expires\n", id)
	}
}

// waitHalfCreated waits until half the Foos exist; false when ctx ended
// first.
func (d *demo) waitHalfCreated(ctx context.Context) bool {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for d.created.Load() < int64(d.foos/2) {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}
