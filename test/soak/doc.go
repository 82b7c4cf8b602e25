// Package soak holds rollout's soak test (soak_test.go): the real binary, built once, run as
// separate processes on loopback: the model simulator with network and HTTP faults (rollout
// sim), a built-in resource server with chaos (rollout serve --chaos-*), and a run (rollout
// run) against both; then every rollout is accounted for from rollouts.parquet. Its mixed case
// (mixed_test.go) runs a second writer of one --out, a Redis restart and a model echoing the API
// key at once, and checks that nothing is lost, duplicated or leaked.
//
//	go test ./test/soak                                      # short: 300 rollouts
//	ROLLOUT_SOAK_ROLLOUTS=10000 go test -run TestSoak -v -timeout 30m ./test/soak
//
// The figures of the long run are in RELIABILITY.md.
package soak
