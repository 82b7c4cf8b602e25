package rundir

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/internal/durable"
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
	// JSONLOut is the run's --jsonl-out file, which belongs to the run like the files in its
	// directory: made from the journal at the end, replaced by each resume. It is relative to
	// the run's directory (absolute in manifests written before), so that a copy of the
	// directory elsewhere writes its own; JSONLOutPath resolves it.
	JSONLOut string `json:"jsonl_out,omitempty"`
	// Dir is the run's directory (absolute, symbolic links resolved) when the manifest was
	// last written: a resume from another directory is of a copy or a move.
	Dir string `json:"dir,omitempty"`
	// Resumes lists when the run was resumed, and whether a changed input or config was
	// forced.
	Resumes []Resume `json:"resumes,omitempty"`
	// Shard is the part of a sharded run the directory holds (nil: the whole run). It is not
	// part of the config, so that the shards of one run have the same config hash.
	Shard *Shard `json:"shard,omitempty"`
	// Complete is set when every rollout of the run (or shard) has a record: the run ended
	// without an interrupt. A resume clears it until it ends so.
	Complete *Completion `json:"complete,omitempty"`
	// Planned is the number of rollouts the run (or shard) plans in all, written when it
	// starts (0: not known, as for a task file read from stdin). With Complete unset, the
	// run holds fewer: it was interrupted, stopped early, crashed, or is running.
	Planned int `json:"planned,omitempty"`
	// MergedFrom lists the shard directories a merged run was made of.
	MergedFrom []string `json:"merged_from,omitempty"`
	// Missing lists the shards a partial merge did not have (by index).
	Missing []int `json:"missing_shards,omitempty"`
	// Short lists the shards a partial merge took although they lack records or trajectories
	// their manifests say they finished with.
	Short []ShortShard `json:"short_shards,omitempty"`
}

// Shard is the part of a sharded run a directory holds: the tasks whose index is Index mod
// Count.
type Shard struct {
	Index int `json:"index"`
	Count int `json:"count"`
}

func (s *Shard) String() string {
	if s == nil {
		return "none"
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// Completion is when a run ended with every rollout recorded, and how many records it had.
type Completion struct {
	At       time.Time `json:"at"`
	Rollouts int       `json:"rollouts"`
}

// Resume is one resume of a run.
type Resume struct {
	At          time.Time `json:"at"`
	Forced      bool      `json:"forced,omitempty"`
	RetryFailed bool      `json:"retry_failed,omitempty"`
	// Changed lists the settings this resume changed ("config.model was "a", now "b""); the
	// manifest names the new ones from then on.
	Changed []string `json:"changed,omitempty"`
	// RetryTransient: the records of transient failures (record.FailureClass.Transient) were
	// run again, as --resume=auto does.
	RetryTransient bool `json:"retry_transient,omitempty"`
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

// InputNow is the SHA-256 of the run's task file as the manifest names it, read now, to compare
// with InputSHA256 (what the run read). known is false when it cannot be told: the input was
// standard input, the manifest has no hash, or the file cannot be read (moved or gone).
func (m *Manifest) InputNow() (sum string, known bool) {
	if m.Input == "" || m.Input == "-" || m.InputSHA256 == "" {
		return "", false
	}
	sum, err := HashFile(m.Input)
	return sum, err == nil
}

// JSONLOutPath is the absolute path of the run's --jsonl-out file ("" for none), for the run
// in dir.
func (m *Manifest) JSONLOutPath(dir string) string {
	if m.JSONLOut == "" || filepath.IsAbs(m.JSONLOut) {
		return m.JSONLOut
	}
	return filepath.Join(ResolvePath(dir), m.JSONLOut)
}

// relativeTo is path (absolute) relative to the directory dir (absolute), or path itself when
// it cannot be.
func relativeTo(dir, path string) string {
	if rel, err := filepath.Rel(dir, path); err == nil && path != "" {
		return rel
	}
	return path
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
	if m.JSONLOut != recorded.JSONLOut {
		d = append(d, fmt.Sprintf("--jsonl-out was %s, now %s", orUnset(recorded.JSONLOut), orUnset(m.JSONLOut)))
	}
	if m.Shard.String() != recorded.Shard.String() {
		d = append(d, fmt.Sprintf("--shard was %s, now %s", recorded.Shard, m.Shard))
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

func orUnset(s string) string {
	if s == "" {
		return "unset"
	}
	return s
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
	return durable.WriteFileAtomic(join(dir, ManifestFile), append(b, '\n'), 0o644)
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
