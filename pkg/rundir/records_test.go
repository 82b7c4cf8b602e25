package rundir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
)

func TestScanJournal(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, JournalFile)
	good := `{"task_index":3,"rollout_index":1,"arm":"multi","reward":1,"has_reward":true,"started_at":"2026-01-02T03:04:05Z"}` + "\n"
	for _, tt := range []struct {
		name, text, err string
		n               int
	}{
		{"records", good + good, "", 2},
		{"a task file", good + `{"id":"t1","responses_create_params":{"input":"hi"}}` + "\n", p + ":2: not a rollout record (no task_index, rollout_index, arm, started_at): is this a journal?", 1},
		{"not JSON", good + "nope\n", p + ":", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			os.WriteFile(p, []byte(tt.text), 0o644)
			n := 0
			err := ScanJournal(p, func(r *record.Record) error {
				if r.TaskIndex != 3 || r.Arm != "multi" {
					t.Errorf("record %+v", r)
				}
				n++
				return nil
			})
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.err)) {
				t.Errorf("error %v, want %q", err, tt.err)
			}
			if n != tt.n {
				t.Errorf("%d records, want %d", n, tt.n)
			}
		})
	}
	if err := ScanJournal(filepath.Join(dir, "none.jsonl"), func(*record.Record) error { return nil }); err == nil || !strings.Contains(err.Error(), "none.jsonl") {
		t.Errorf("a missing journal: %v", err)
	}
}
