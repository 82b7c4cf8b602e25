package runner

import (
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// The outputs a run writes to are Outputs.
var (
	_ Output = (*rundir.Sink)(nil)
	_ Output = (*rundir.TrajectoryWriter)(nil)
	_ Output = (*rundir.NemoGymWriter)(nil)
	_ Output = (*record.ParquetWriter)(nil)
)
