package etcdstore

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// transientFor bounds how long a request is retried while etcd cannot
// answer it: a leader election after a voter dies takes a second or two,
// a lost quorum longer, and a write then fails after it.
const transientFor = 30 * time.Second

// passing are etcd's answers that say "not now" rather than "no".
var passing = map[string]bool{}

func init() {
	for _, e := range []error{rpctypes.ErrNoLeader, rpctypes.ErrNotLeader, rpctypes.ErrLeaderChanged, rpctypes.ErrTimeout,
		rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrTimeoutWaitAppliedIndex,
		rpctypes.ErrTooManyRequests, rpctypes.ErrStopped, rpctypes.ErrNotCapable} {
		passing[e.Error()] = true
	}
}

// transient says whether err may pass if the request is made again: etcd
// was electing a leader, timed out, or could not be reached.
func transient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || passing[rpctypes.ErrorDesc(err)] {
		return true
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if passing[e.Error()] {
			return true
		}
		if s, ok := status.FromError(e); ok && (s.Code() == codes.Unavailable || s.Code() == codes.DeadlineExceeded) {
			return true
		}
	}
	return false
}

// joinable says whether a refused membership change may pass later:
// another member is joining (etcd takes one learner at a time), or one
// just added has not been connected long enough.
func joinable(err error) bool {
	for _, e := range []error{rpctypes.ErrUnhealthy, rpctypes.ErrMemberNotEnoughStarted, rpctypes.ErrTooManyLearners, rpctypes.ErrMemberLearnerNotReady} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// again runs fn until it succeeds, fails for good, or transientFor passes.
func again(fn func() error) error { return retryWhile(transient, transientFor, fn) }

// retryWhile runs fn, backing off, while its error passes (and within).
func retryWhile(passes func(error) bool, within time.Duration, fn func() error) error {
	deadline := time.Now().Add(within)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		err := fn()
		if err == nil || !passes(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(wait)
	}
}
