package rundir

import (
	"fmt"
	"strings"

	"github.com/rollout-dev/rollout/pkg/record"
)

// ScanJournal calls fn with each record of a journal file, in order. A line that is not a
// rollout record (no started_at: a task file given by mistake, say, which would otherwise read as
// records without rewards) is an error naming the file and line, as is every other error.
func ScanJournal(path string, fn func(rec *record.Record) error) error {
	line := 0
	err := record.ScanJSONL(path, func(rec *record.Record) error {
		line++
		if rec.StartedAt.IsZero() {
			return fmt.Errorf("%s:%d: not a rollout record (no started_at): is this a journal?", path, line)
		}
		return fn(rec)
	})
	if err != nil && !strings.Contains(err.Error(), path) {
		err = fmt.Errorf("%s: %w", path, err)
	}
	return err
}
