package agent

import "fmt"

// StatusText says how a tool call ended, for people: "ok", "HTTP 422, failed", "timed out", ...
func (c ToolCall) StatusText() string {
	switch {
	case c.TimedOut:
		return "timed out"
	case c.Unreachable:
		return "unreachable"
	case c.Status != 0 && c.Failed:
		return fmt.Sprintf("HTTP %d, failed", c.Status)
	case c.Status != 0:
		return fmt.Sprintf("HTTP %d", c.Status)
	case c.Failed:
		return "failed"
	}
	return "ok"
}
