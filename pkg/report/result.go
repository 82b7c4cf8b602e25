package report

import "encoding/json"

// Result is what a finished rollout hands to the outputs.
type Result struct {
	Record     Record
	Trajectory json.RawMessage // the trajectory, already JSON-encoded; may be nil
	Verify     json.RawMessage // the resource server's /verify answer as sent; nil when verify did not run or failed
}

// Output is where results go (k6 style). One writer goroutine calls Write;
// Close flushes and makes the output durable. An Output is not safe for
// concurrent use.
type Output interface {
	Write(*Result) error
	Close() error
}
