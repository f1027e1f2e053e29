package train

import "context"

type progressKey struct{}

// WithProgress returns a context under which Forward, ForwardBackward and
// Evaluate call fn after each micro-batch with the tokens done so far and the
// batch's total. Long primitives report through it without the engine
// knowing who listens (the same shape as net/http/httptrace).
func WithProgress(ctx context.Context, fn func(done, total int)) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

func progress(ctx context.Context, done, total int) {
	if fn, ok := ctx.Value(progressKey{}).(func(done, total int)); ok {
		fn(done, total)
	}
}
