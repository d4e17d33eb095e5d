package manager

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// setGoMemoryLimit sets Go's soft memory limit (runtime/debug's
// SetMemoryLimit) to nine tenths of the memory limit of the cgroups the
// process runs in, so that the collector works harder as the process
// nears the limit instead of the kernel ending it there; the tenth left
// is for what Go does not count (the program's mapped binary, the
// kernel's own). It does nothing when GOMEMLIMIT is set (GOMEMLIMIT=off
// keeps Go's default, no limit) or no cgroup limits memory. It returns
// the limit it set, 0 if none.
func setGoMemoryLimit() int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	limit, ok := cgroupMemoryLimit("/sys/fs/cgroup", self)
	if !ok {
		return 0
	}
	soft := limit / 10 * 9
	debug.SetMemoryLimit(soft)
	return soft
}

// unlimited is the least value a cgroup's memory limit file holds that
// means no limit: cgroup v1 writes the largest page-aligned int64.
const unlimited = int64(1) << 60

// cgroupMemoryLimit returns the lowest memory limit of the cgroups that
// self (the content of /proc/self/cgroup) names, and of their ancestors,
// under the cgroup file systems mounted at root: cgroup v2's memory.max
// (at root, or at root/unified beside v1's), v1's
// memory/memory.limit_in_bytes. In a container with its own cgroup
// namespace the paths are "/" and the files at the mount's top are the
// container's; without one they are the full paths, walked up to the top.
// ok is false when no cgroup limits memory.
func cgroupMemoryLimit(root string, self []byte) (limit int64, ok bool) {
	limit = math.MaxInt64
	take := func(dir, cgroup, file string) {
		for p := path.Clean("/" + cgroup); ; p = path.Dir(p) {
			if v, found := readLimit(filepath.Join(dir, filepath.FromSlash(p), file)); found && v < limit {
				limit, ok = v, true
			}
			if p == "/" {
				return
			}
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(self))
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		fields := strings.SplitN(sc.Text(), ":", 3)
		if len(fields) != 3 {
			continue
		}
		switch {
		case fields[0] == "0" && fields[1] == "":
			take(root, fields[2], "memory.max")
			take(filepath.Join(root, "unified"), fields[2], "memory.max")
		case hasController(fields[1], "memory"):
			take(filepath.Join(root, "memory"), fields[2], "memory.limit_in_bytes")
		}
	}
	return limit, ok
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readLimit reads a memory limit file: a number of bytes, or "max" (v2)
// or a number from unlimited up (v1) for none.
func readLimit(file string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v <= 0 || v >= unlimited {
		return 0, false
	}
	return v, true
}
