package report

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// Manifest identifies what a run in an output directory is running, so that a resume can
// refuse to mix results of another dataset or configuration.
type Manifest struct {
	Version int `json:"version"`
	// Input is the task file; InputSHA256 the hash of its bytes.
	Input       string `json:"input"`
	InputSHA256 string `json:"input_sha256"`
	// Config holds the settings that change results (arm, repeats, model, servers, rounds,
	// sampling, seeds); ConfigSHA256 is the hash of its JSON. Operational settings
	// (concurrency, timeouts, retries) may change between resumes.
	Config       json.RawMessage `json:"config"`
	ConfigSHA256 string          `json:"config_sha256"`
	CreatedAt    time.Time       `json:"created_at"`
	// Resumes lists when the run was resumed, and whether a changed input or config was
	// forced.
	Resumes []Resume `json:"resumes,omitempty"`
}

// Resume is one resume of a run.
type Resume struct {
	At          time.Time `json:"at"`
	Forced      bool      `json:"forced,omitempty"`
	RetryFailed bool      `json:"retry_failed,omitempty"`
}

// NewManifest hashes the input file and the config.
func NewManifest(input string, config any) (*Manifest, error) {
	h, err := HashFile(input)
	if err != nil {
		return nil, err
	}
	cfg, err := json.Marshal(config)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(cfg)
	return &Manifest{Version: 1, Input: input, InputSHA256: h, Config: cfg, ConfigSHA256: hex.EncodeToString(sum[:]), CreatedAt: time.Now().UTC()}, nil
}

// HashFile is the SHA-256 of a file's bytes, in hex.
func HashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Differences lists how m (this invocation) differs from the recorded run: a changed input
// or config, in words a user can act on. Empty when they match.
func (m *Manifest) Differences(recorded *Manifest) []string {
	var d []string
	if m.InputSHA256 != recorded.InputSHA256 {
		d = append(d, fmt.Sprintf("the input differs: %s (sha256 %.12s) was run, this is %s (sha256 %.12s)", recorded.Input, recorded.InputSHA256, m.Input, m.InputSHA256))
	}
	if m.ConfigSHA256 != recorded.ConfigSHA256 {
		d = append(d, diffJSON("", recorded.Config, m.Config)...)
	}
	return d
}

// diffJSON lists the members in which two JSON objects differ, descending into objects:
// "sim.Latency was "0", now "5ms"".
func diffJSON(prefix string, was, now json.RawMessage) []string {
	var a, b map[string]json.RawMessage
	if json.Unmarshal(was, &a) != nil || json.Unmarshal(now, &b) != nil {
		return []string{fmt.Sprintf("%s was %s, now %s", strings.TrimSuffix(prefix, "."), orNone(was), orNone(now))}
	}
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var names []string
	for k := range keys {
		if !sameJSON(a[k], b[k]) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var d []string
	for _, k := range names {
		if a[k] != nil && b[k] != nil && bytes.HasPrefix(bytes.TrimSpace(a[k]), []byte("{")) && bytes.HasPrefix(bytes.TrimSpace(b[k]), []byte("{")) {
			d = append(d, diffJSON(prefix+k+".", a[k], b[k])...)
			continue
		}
		d = append(d, fmt.Sprintf("%s%s was %s, now %s", prefix, k, orNone(a[k]), orNone(b[k])))
	}
	return d
}

func orNone(v json.RawMessage) string {
	if v == nil {
		return "unset"
	}
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	return b.String()
}

// sameJSON compares two JSON values, ignoring layout.
func sameJSON(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return orNone(a) == orNone(b)
}

// WriteManifest writes the manifest atomically.
func WriteManifest(dir string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(join(dir, ManifestFile), append(b, '\n'), 0o644)
}

// ReadManifest reads the manifest of dir; os.ErrNotExist when there is none.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(join(dir, ManifestFile))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", join(dir, ManifestFile), err)
	}
	return &m, nil
}

// InfraFailure reports whether a failure class is an infrastructure one, which
// --retry-failed runs again: the task and the model were not at fault.
func InfraFailure(class string) bool {
	switch class {
	case FailModelUnavailable, FailRateLimited, FailResourceServer, FailVerify, FailTimeout, FailCancelled:
		return true
	}
	return false
}

// Compact prepares the output directory for a resume. It rewrites the journal keeping the
// first record of each rollout for which keep is true (nil keeps all), dropping a torn last
// line; then it rewrites the trajectories file (and the NeMo Gym file at nemoGym, if set)
// keeping one line for each kept record, so that lines of rollouts that had no record when
// the run stopped are gone. It returns the kept rollouts: the ones a resume skips.
func Compact(dir, nemoGym string, keep func(*Record) bool) (Done, error) {
	done := Done{}
	jpath := join(dir, JournalFile)
	if _, err := os.Stat(jpath); errors.Is(err, os.ErrNotExist) {
		return done, nil
	}
	err := rewriteLines(jpath, func(line []byte, n int) (bool, error) {
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil {
			return false, fmt.Errorf("%s:%d: not a record: %v", jpath, n, err)
		}
		if _, dup := done[rec.Key()]; dup || (keep != nil && !keep(&rec)) {
			return false, nil
		}
		done[rec.Key()] = struct{}{}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	seen := Done{}
	err = rewriteLines(join(dir, TrajectoriesFile), func(line []byte, _ int) (bool, error) {
		var k struct {
			Task    int64  `json:"task_index"`
			Rollout int64  `json:"rollout_index"`
			Arm     string `json:"arm"`
		}
		if json.Unmarshal(line, &k) != nil {
			return false, nil
		}
		key := Key{k.Task, k.Rollout, k.Arm}
		if _, ok := done[key]; !ok {
			return false, nil
		}
		if _, dup := seen[key]; dup {
			return false, nil
		}
		seen[key] = struct{}{}
		return true, nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if nemoGym != "" {
		// NeMo Gym lines carry no arm: a line is kept when its (task, rollout) has a record.
		type tr struct{ task, rollout int64 }
		ok := map[tr]bool{}
		for k := range done {
			ok[tr{k.Task, k.Rollout}] = true
		}
		err = rewriteLines(nemoGym, func(line []byte, _ int) (bool, error) {
			var k struct {
				Task    *int64 `json:"_ng_task_index"`
				Rollout *int64 `json:"_ng_rollout_index"`
			}
			if json.Unmarshal(line, &k) != nil || k.Task == nil || k.Rollout == nil {
				return false, nil
			}
			key := tr{*k.Task, *k.Rollout}
			if !ok[key] {
				return false, nil
			}
			delete(ok, key)
			return true, nil
		})
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	return done, nil
}

// rewriteLines rewrites the file at path with the complete lines for which keep is true
// (a torn last line is dropped), through a temporary file that is synced and renamed.
func rewriteLines(path string, keep func(line []byte, n int) (bool, error)) (err error) {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := path + ".compact"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			out.Close()
			os.Remove(tmp)
		}
	}()
	br := bufio.NewReaderSize(in, 1<<20)
	bw := bufio.NewWriterSize(out, 1<<20)
	for n := 1; ; n++ {
		line, rerr := br.ReadBytes('\n')
		if len(line) == 0 || line[len(line)-1] != '\n' {
			if rerr != nil && !errors.Is(rerr, io.EOF) {
				return fmt.Errorf("%s: %w", path, rerr)
			}
			break // the end, or a torn tail
		}
		ok, err := keep(line[:len(line)-1], n)
		if err != nil {
			return err
		}
		if ok {
			if _, err := bw.Write(line); err != nil {
				return err
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(path)
}

// Finalize derives the run's Parquet file and summary from its journal: rollouts.parquet
// (written as .tmp, synced, renamed) and summary.json. It returns the summary.
func Finalize(dir string, opt ParquetOptions) (Summary, error) {
	pw, err := NewParquetWriter(join(dir, ParquetFile), opt)
	if err != nil {
		return Summary{}, err
	}
	var stats Stats
	res := &Result{}
	err = ScanJournal(join(dir, JournalFile), func(rec *Record) error {
		stats.Add(rec)
		res.Record = *rec
		return pw.Write(res)
	})
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if cerr := pw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Summary{}, err
	}
	sum := stats.Summary()
	if err := WriteSummaryJSON(join(dir, SummaryFile), sum); err != nil {
		return Summary{}, err
	}
	return sum, nil
}
