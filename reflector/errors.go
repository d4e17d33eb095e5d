package reflector

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode"

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
// Servers before 1.18.6 sent it as a 504 Timeout without the status cause
// type: with the message "Too large resource version" as a cause (1.17.0 to
// 1.18.5), or only at the start of the status message (before 1.17).
func isTooLarge(err error) bool {
	if apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		return true
	}
	var st apierrors.APIStatus
	if !apierrors.IsTimeout(err) || !errors.As(err, &st) {
		return false
	}
	const legacy = "Too large resource version"
	if d := st.Status().Details; d != nil {
		for _, c := range d.Causes {
			if c.Message == legacy {
				return true
			}
		}
	}
	return strings.Contains(st.Status().Message, legacy)
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

// Ops of an Error.
const (
	OpList  = "list"
	OpWatch = "watch"
)

// Error is a failed list or watch, classified once where it happens so that
// readiness checks and the informer factory read its fields with errors.As
// instead of parsing its message. apierrors helpers (IsForbidden,
// IsNotFound, ...) still see the cause through Unwrap.
type Error struct {
	Op       string              // OpList or OpWatch
	Resource string              // the reflector's Name
	Code     int32               // HTTP status code of the failure; 0 when there was none (connection refused, timeout)
	Reason   metav1.StatusReason // the API status reason, "" when none
	Err      error               // the cause
}

// newError classifies err, the cause of a failed op.
func newError(op, resource string, err error) *Error {
	e := &Error{Op: op, Resource: resource, Err: err}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		e.Code, e.Reason = st.Status().Code, st.Status().Reason
	}
	return e
}

// Error is short: "watch configmaps/v1 in namespace x: forbidden (403):
// <cause>", with the request's URL left out of the cause.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteByte(' ')
	b.WriteString(e.Resource)
	b.WriteString(": ")
	switch {
	case e.Reason != "":
		b.WriteString(words(string(e.Reason)))
		if e.Code != 0 {
			fmt.Fprintf(&b, " (%d)", e.Code)
		}
		b.WriteString(": ")
	case e.Code != 0:
		fmt.Fprintf(&b, "status %d: ", e.Code)
	}
	b.WriteString(shortCause(e.Err))
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// words turns a reason such as "TooManyRequests" into "too many requests".
func words(camel string) string {
	var b strings.Builder
	for i, r := range camel {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte(' ')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// shortCause is err's message without the request URL that client-go's
// transport errors start with (`Get "https://host/api/v1/...?limit=500":
// dial tcp ...: connection refused`): the Error already names the resource.
func shortCause(err error) string {
	if err == nil {
		return "<nil>"
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err.Error()
	}
	return err.Error()
}
