package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rollout-dev/rollout/pkg/claim"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// rollout run --shard claim/M: the run in M shards, more than the processes that run them.
// Each process takes the next shard nobody holds, runs it as --shard I/M --out DIR/shard-I
// --resume=auto would, marks it done, and takes the next, until every shard is done; so a slow
// process runs fewer shards instead of setting the job's end. The claims are leases (files in
// DIR/.claims, or keys of the Redis of --claim-store) renewed while the shard runs: a process
// that dies stops renewing, and after --claim-lease another takes its shard over and resumes
// it from its journal.

// claimPrefix is --shard's value in claim mode.
const claimPrefix = "claim/"

// claimsDir is where the claims and done marks of a claimed run's shards are: beside the
// shards' directories, outside the shard-* glob the merge reads.
func claimsDir(out string) string { return filepath.Join(out, ".claims") }

// shardDir is shard i's directory in a claimed run's --out.
func shardDir(out string, i int) string { return filepath.Join(out, fmt.Sprintf("shard-%d", i)) }

// checkClaimFlags refuses what claim mode cannot do, once the flags are read.
func (f *runFlags) checkClaimFlags() error {
	switch {
	case f.claims == 0:
		if f.claimStore != "" {
			return badUsage("--claim-store goes with --shard claim/M")
		}
		return nil
	case f.overwrite:
		return badUsage("--shard claim/M resumes each shard in --out (as --resume=auto does); --overwrite would delete the other processes' shards")
	case f.input == "-":
		return badUsage("--shard claim/M needs --input FILE: each shard reads the tasks again")
	case f.jsonlOut != "":
		return badUsage("--jsonl-out with --shard claim/M: the processes would share one file; give it to rollout merge --jsonl-out instead")
	case f.claimLease < time.Second:
		return badUsage("--claim-lease %s: want 1s or more (a dead process's shard is taken over after it)", f.claimLease)
	case f.claimStore != "" && !strings.HasPrefix(f.claimStore, "redis://") && !strings.HasPrefix(f.claimStore, "rediss://"):
		return badUsage("--claim-store %s: want redis://[:PASSWORD@]HOST:PORT/DB (or rediss://); without it the claims are files in --out", f.claimStore)
	}
	if _, err := redis.ParseURL(f.claimStore); f.claimStore != "" && err != nil {
		return badUsage("--claim-store: not a Redis URL: want redis://[:PASSWORD@]HOST:PORT/DB (the value is not repeated here: it may hold a password)")
	}
	return nil
}

// openClaims opens the claim store of f: files in --out/.claims, or the Redis of --claim-store.
func openClaims(ctx context.Context, f runFlags) (claim.Store, error) {
	dir := claimsDir(f.out)
	files, err := claim.NewFiles(dir, f.claimLease, claim.Holder())
	if err != nil {
		return nil, badUsage("--out %s: %v", f.out, err)
	}
	if f.claimStore == "" {
		return files, nil
	}
	abs, err := filepath.Abs(f.out)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(abs))
	r, err := claim.OpenRedis(ctx, f.claimStore, hex.EncodeToString(sum[:8]), f.claimLease, claim.Holder())
	if err != nil {
		return nil, notUp("--claim-store: %v", err)
	}
	return r, nil
}

// errClaimLost ends a claimed shard's run whose lease lapsed and was taken over.
var errClaimLost = errors.New("the claim of this shard lapsed and another process took it over")

// claimOutcome is how one claimed shard's run ended, for the loop.
type claimOutcome int

const (
	shardDone      claimOutcome = iota // ended 0 or 4: marked done
	shardTransient                     // ended 5 with its rollouts' failures all transient: left for another process
	shardLost                          // its lease lapsed and another process took it over
	shardBusy                          // its directory is locked by another process still writing it
	shardStop                          // 1, 2, 130, or an endpoint not up: the loop stops
)

// runClaimed is rollout run --shard claim/M: it takes shards until every one is done, and
// returns the worst outcome of those it ran (2, 1 and 130 stop it at once; then 4, then 5).
func runClaimed(ctx context.Context, args []string, e env, f runFlags) error {
	store, err := openClaims(ctx, f)
	if err != nil {
		return err
	}
	defer store.Close()
	dir, m := claimsDir(f.out), f.claims
	// A process with nothing left to take looks again every poll: for a done mark (then it ends)
	// or a lease that lapsed (then it takes the shard over).
	poll := min(max(f.claimLease/10, 50*time.Millisecond), time.Second)
	var ran, failed, transient []string
	tried := map[int]bool{} // left after a transient end: another process takes them, or this one's retry
	// Shards whose directory another process still writes (its holder was late and has not
	// stopped yet): not taken again before a lease has passed.
	busy := map[int]time.Time{}
	for {
		if ctx.Err() != nil {
			return errInterrupted
		}
		left, waiting, took := 0, 0, false
		for i := range m {
			done, _, err := claim.Done(dir, i)
			if err != nil {
				return err
			}
			if done {
				continue
			}
			left++
			if tried[i] {
				continue
			}
			if time.Now().Before(busy[i]) {
				waiting++
				continue
			}
			lease, ok, err := store.Take(ctx, i)
			if err != nil {
				return transientError{fmt.Errorf("--shard claim/%d: taking shard %d: %w", m, i, err)}
			}
			if !ok {
				waiting++
				continue
			}
			took = true
			name := fmt.Sprintf("%d/%d", i, m)
			fmt.Fprintf(e.stderr, "rollout: shard %s: claimed by %s; running it in %s\n", name, claim.Holder(), shardDir(f.out, i))
			outcome, err := runClaim(ctx, args, e, f, i, lease)
			switch outcome {
			case shardDone:
				ran = append(ran, name)
				var fe failuresError
				if errors.As(err, &fe) {
					failed = append(failed, name)
				}
			case shardBusy:
				busy[i] = time.Now().Add(f.claimLease)
			case shardTransient:
				ran, transient = append(ran, name), append(transient, name)
				tried[i] = true
			case shardStop:
				return err
			}
			break // from the first shard again: a lower one may have been released meanwhile
		}
		if left == 0 {
			fmt.Fprintf(e.stderr, "rollout: every one of the %d shards is done (this process ran %s); merge them with: rollout merge --out MERGED '%s'\n",
				m, dashList(ran), filepath.Join(f.out, "shard-*"))
			break
		}
		if !took && waiting == 0 {
			break // what is left, this process ran and left after a transient end
		}
		if !took {
			select {
			case <-ctx.Done():
				return errInterrupted
			case <-time.After(poll):
			}
		}
	}
	switch {
	case len(failed) > 0:
		return failuresError{msg: fmt.Sprintf("shards %s ended with more failed rollouts than --fail-on-error allows (their results are written and marked done)", strings.Join(failed, ", "))}
	case len(transient) > 0:
		return failuresError{transient: true, msg: fmt.Sprintf("shards %s ended with transient failures only; they are left for another process (or this one run again: --resume=auto runs them again)",
			strings.Join(transient, ", "))}
	}
	return nil
}

// runClaim runs shard i, held by lease, as rollout run ARGS --shard I/M --out DIR/shard-I
// --resume=auto, renewing the lease while it runs; it marks the shard done, or releases it.
func runClaim(ctx context.Context, args []string, e env, f runFlags, i int, lease claim.Lease) (claimOutcome, error) {
	name := fmt.Sprintf("%d/%d", i, f.claims)
	shardCtx, cancelCause := context.WithCancelCause(ctx)
	cancel := func() { cancelCause(nil) }
	defer cancel()
	lost := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		tick := time.NewTicker(f.claimLease / 3)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-shardCtx.Done():
				return
			case <-tick.C:
			}
			held, err := lease.Renew(shardCtx)
			if err == nil && held {
				last = time.Now()
				continue
			}
			if !held || time.Since(last) >= f.claimLease {
				close(lost)
				cancelCause(errClaimLost)
				return
			}
		}
	}()
	shardArgs := append(slices.Clone(args), "--shard", name, "--out", shardDir(f.out, i), "--resume=auto", "--claim-store=")
	err := cmdRun(shardCtx, shardArgs, e)
	cancel()
	<-renewed
	select {
	case <-lost:
		fmt.Fprintf(e.stderr, "rollout: shard %s: its lease lapsed and another process took it over; what this one ran is kept in %s for it to resume\n", name, shardDir(f.out, i))
		return shardLost, nil
	default:
	}
	release := func() {
		if rerr := lease.Release(context.WithoutCancel(ctx)); rerr != nil {
			fmt.Fprintf(e.stderr, "rollout: shard %s: releasing its claim: %v (it is taken over after --claim-lease)\n", name, rerr)
		}
	}
	var (
		fe failuresError
		le *rundir.LockedError
	)
	switch {
	case err == nil || errors.As(err, &fe) && !fe.transient:
		outcome := fmt.Sprintf("exit %d by %s", exitOf(err), claim.Holder())
		if merr := claim.MarkDone(claimsDir(f.out), i, outcome); merr != nil {
			release()
			return shardStop, fmt.Errorf("shard %s: marking it done: %w", name, merr)
		}
		release()
		fmt.Fprintf(e.stderr, "rollout: shard %s: done (%s)\n", name, outcome)
		if err != nil {
			fmt.Fprintf(e.stderr, "rollout: shard %s: %v\n", name, err)
		}
		return shardDone, err
	case errors.As(err, &le):
		release()
		fmt.Fprintf(e.stderr, "rollout: shard %s: %v; it is tried again later\n", name, err)
		return shardBusy, nil
	case errors.As(err, &fe):
		release()
		fmt.Fprintf(e.stderr, "rollout: shard %s: %v\n", name, err)
		return shardTransient, err
	}
	release()
	return shardStop, fmt.Errorf("shard %s: %w", name, err)
}
