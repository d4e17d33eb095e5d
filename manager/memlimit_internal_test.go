package manager

import (
	"os"
	"path/filepath"
	"testing"
)

// A cgroup tree under a temporary root, as /sys/fs/cgroup shows it: files
// maps a path under root to its content.
func cgroupTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCgroupMemoryLimit_findsTheLowestLimitOfTheProcesssCgroupsAndTheirAncestors(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		self  string
		want  int64 // 0: no limit
	}{
		{"v2, the container's own namespace", map[string]string{"memory.max": "268435456\n"}, "0::/\n", 256 << 20},
		{"v2, no limit", map[string]string{"memory.max": "max\n"}, "0::/\n", 0},
		{"v2, the full path: the pod's limit is lower than the container's",
			map[string]string{"kubepods/pod1/memory.max": "134217728\n", "kubepods/pod1/c1/memory.max": "268435456\n",
				"kubepods/memory.max": "max\n"}, "0::/kubepods/pod1/c1\n", 128 << 20},
		{"v1, unlimited (the largest page-aligned int64)",
			map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, "4:memory:/\n0::/\n", 0},
		{"v1 beside other controllers, a limit down the path",
			map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n",
				"memory/process/a/memory.limit_in_bytes": "536870912\n"}, "5:cpu,cpuacct:/\n4:memory,hugetlb:/process/a\n0::/\n", 512 << 20},
		{"hybrid: v1's memory unlimited, v2's unified limited",
			map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n", "unified/app/memory.max": "1073741824\n"},
			"4:memory:/\n0::/app\n", 1 << 30},
		{"nothing readable", map[string]string{"memory.max": "garbage\n"}, "0::/\nnot a line\n", 0},
		{"a path that climbs out of the root stays inside it", map[string]string{"memory.max": "268435456\n"}, "0::/../..\n", 256 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := cgroupMemoryLimit(cgroupTree(t, c.files), []byte(c.self))
			if !ok {
				got = 0
			}
			if got != c.want || ok != (c.want != 0) {
				t.Errorf("cgroupMemoryLimit = %d, %v; want %d", got, ok, c.want)
			}
		})
	}
}
