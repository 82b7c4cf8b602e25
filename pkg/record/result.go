package record

import "encoding/json"

// Result is what a finished rollout hands to the outputs.
type Result struct {
	Record     Record
	Trajectory json.RawMessage // the trajectory, already JSON-encoded; may be nil
	Verify     json.RawMessage // the resource server's /verify answer as sent; nil when verify did not run or failed
}
