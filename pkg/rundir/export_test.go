package rundir

// SetSideLineHead sets how much of a side file's line a merge holds, until the returned
// function restores it.
func SetSideLineHead(n int) (restore func()) {
	saved := sideLineHead
	sideLineHead = n
	return func() { sideLineHead = saved }
}
