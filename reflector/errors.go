package reflector

import (
	"errors"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// isExpired reports 410 Gone: the resource version is older than what the
// server (its watch cache, or etcd after compaction) still has.
func isExpired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// isTooLarge reports a resource version newer than the server has seen,
// as from an API server that lags behind the one that served the last read.
func isTooLarge(err error) bool {
	return apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)
}

// isRetriable reports errors after which the cached state is still good
// and the same watch should simply be tried again later.
func isRetriable(err error) bool {
	return apierrors.IsTooManyRequests(err) || utilnet.IsConnectionRefused(err)
}

// isWatchListUnsupported reports a server that rejects watch-list requests
// (the WatchList feature is off): 422 Invalid naming sendInitialEvents, or
// 400 from servers that validate it that way.
func isWatchListUnsupported(err error) bool {
	if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
		return false
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Details != nil {
		for _, c := range st.Status().Details.Causes {
			if strings.Contains(c.Field, "sendInitialEvents") || strings.Contains(c.Field, "resourceVersionMatch") {
				return true
			}
		}
	}
	return strings.Contains(err.Error(), "sendInitialEvents")
}
