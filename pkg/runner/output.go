package runner

import "github.com/rollout-dev/rollout/pkg/record"

// Output is where results go (k6 style). One writer goroutine calls Write;
// Close flushes and makes the output durable. An Output is not safe for
// concurrent use.
type Output interface {
	Write(*record.Result) error
	Close() error
}
