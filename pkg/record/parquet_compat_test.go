package record_test

import (
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/rollout-dev/rollout/pkg/record"
)

// A Parquet file of an older run, without the task_hash column (nor others added since),
// still reads: the missing columns are zero.
func TestReadParquetWithoutNewerColumns(t *testing.T) {
	type oldRecord struct {
		TaskIndex int64   `parquet:"task_index"`
		TaskID    string  `parquet:"task_id"`
		Arm       string  `parquet:"arm"`
		Reward    float64 `parquet:"reward"`
		HasReward bool    `parquet:"has_reward"`
	}
	path := filepath.Join(t.TempDir(), "old.parquet")
	if err := parquet.WriteFile(path, []oldRecord{{TaskIndex: 3, TaskID: "t3", Arm: "multi", Reward: 0.5, HasReward: true}}); err != nil {
		t.Fatal(err)
	}
	recs, err := record.ReadParquet(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].TaskIndex != 3 || recs[0].TaskID != "t3" || recs[0].Reward != 0.5 || !recs[0].HasReward || recs[0].TaskHash != "" {
		t.Errorf("records %+v", recs)
	}
}
