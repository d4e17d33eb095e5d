package object

import "strconv"

// CompareResourceVersions orders two resource versions. Resource versions
// are opaque strings in the Kubernetes API, but every API server backed by
// etcd uses etcd's revision, a decimal unsigned integer, and so ordering them
// is meaningful in practice.
//
// When both parse as unsigned decimal integers, cmp is -1, 0 or +1 as a is
// older than, equal to or newer than b, and ok is true. Otherwise (an empty
// string, a server that uses another scheme, a number with a sign or leading
// "+") ok is false and cmp is 0: the versions cannot be ordered, and the
// caller decides, usually by trusting the order in which it received them.
func CompareResourceVersions(a, b string) (cmp int, ok bool) {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return 0, false
	}
	switch {
	case x < y:
		return -1, true
	case x > y:
		return 1, true
	}
	return 0, true
}
