package record

// Key identifies a rollout: (task index, rollout index, arm). It is what resume and
// de-duplication use.
type Key struct {
	Task    int64
	Rollout int64
	Arm     string
}

// Key returns the record's rollout key.
func (r *Record) Key() Key { return Key{Task: r.TaskIndex, Rollout: r.RolloutIndex, Arm: r.Arm} }
