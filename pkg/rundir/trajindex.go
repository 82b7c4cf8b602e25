package rundir

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"

	"github.com/rollout-dev/rollout/internal/durable"
	"github.com/rollout-dev/rollout/internal/extsort"
	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/internal/lines"
)

// TrajIndexFile is the offset index of trajectories.jsonl: where each rollout's line starts,
// so that one trajectory is read without scanning the file.
const TrajIndexFile = "trajectories.idx"

// trajIndexMagic starts an index file; the version is its last byte before the newline.
const trajIndexMagic = "rollout-trajectories-index 1\n"

// TrajIndex maps a rollout's key to the offset of its line in trajectories.jsonl. The file is
// binary, little-endian: the magic line, the length of trajectories.jsonl it covers (uint64),
// the arm names (uint32 count, then each as uint32 length and bytes), the entries (uint64
// count, then each as task index int64, rollout index int64, arm number uint32 and offset
// uint64), sorted by key. A later line of the same key (a resumed run's) wins.
type TrajIndex struct {
	covered int64 // the length of trajectories.jsonl the index was built from
	arms    []string
	entries []trajEntry
}

// trajEntry is 24 bytes in memory (a run's rollout indexes are its repeats, far below 2^31).
type trajEntry struct {
	task    int64
	offset  int64
	rollout int32
	arm     uint32
}

const trajEntrySize = 8 + 8 + 4 + 8 // on disk: task, rollout, arm, offset

// Len is the number of rollouts indexed.
func (x *TrajIndex) Len() int { return len(x.entries) }

// lookup returns the offset of the line of (task, rollout, arm).
func (x *TrajIndex) lookup(task, rollout int64, arm string) (int64, bool) {
	a := slices.Index(x.arms, arm)
	if a < 0 {
		return 0, false
	}
	if rollout < 0 || rollout > math.MaxInt32 {
		return 0, false
	}
	i, ok := slices.BinarySearchFunc(x.entries, trajEntry{task: task, rollout: int32(rollout), arm: uint32(a)}, compareTrajEntry)
	if !ok {
		return 0, false
	}
	return x.entries[i].offset, true
}

func compareTrajEntry(a, b trajEntry) int {
	return cmp.Or(cmp.Compare(a.task, b.task), cmp.Compare(a.rollout, b.rollout), cmp.Compare(a.arm, b.arm))
}

// BuildTrajIndex scans dir's trajectories.jsonl once and returns its index (empty when the
// file does not exist). A line whose key cannot be read is an error naming its line.
func BuildTrajIndex(dir string) (*TrajIndex, error) {
	x := &TrajIndex{}
	var err error
	x.covered, x.arms, err = scanTrajKeys(dir, func(e trajEntry) { x.entries = append(x.entries, e) })
	if err != nil {
		return nil, err
	}
	// Stable, so that of lines with one key the last (a resumed run's) ends the run of equals.
	slices.SortStableFunc(x.entries, compareTrajEntry)
	kept := x.entries[:0]
	for i, e := range x.entries {
		if i+1 < len(x.entries) && compareTrajEntry(e, x.entries[i+1]) == 0 {
			continue
		}
		kept = append(kept, e)
	}
	x.entries = slices.Clip(kept)
	return x, nil
}

// trajKeyHead is how much of one line of trajectories.jsonl the index scan holds: a longer
// line's keys are read from the file as it streams.
var trajKeyHead = lines.BlockSize

// scanTrajKeys reads the key of every line of dir's trajectories.jsonl, in file order, and
// gives each to add with its offset; it returns the length of the file read and the arm
// names (an entry's arm is its number in them). No file is no line.
func scanTrajKeys(dir string, add func(trajEntry)) (covered int64, arms []string, err error) {
	path := join(dir, TrajectoriesFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	type keyLine struct {
		task, rollout int64
		arm           []byte
		ok            bool
	}
	armOf := map[string]uint32{}
	var offset int64
	complete, err := lines.ScanHeads(f, lines.Workers(), trajKeyHead, func(_ int, line []byte, res *keyLine) {
		res.task, res.rollout, res.arm, _, res.ok = jsonfast.LineKeys(line, "task_index", "rollout_index", "arm")
	}, func(line []byte, length int64, n int, res *keyLine) error {
		at := offset
		offset += length + 1
		task, rollout, arm := res.task, res.rollout, string(res.arm)
		if length > int64(len(line)) || !res.ok {
			k, err := decodeTrajKey(path, line, length, at)
			if err != nil {
				return fmt.Errorf("%s:%d: not a trajectory line: %v", path, n, err)
			}
			task, rollout, arm = k.Task, k.Rollout, k.Arm
		}
		if rollout < 0 || rollout > math.MaxInt32 {
			return fmt.Errorf("%s:%d: rollout_index %d out of range", path, n, rollout)
		}
		a, ok := armOf[arm]
		if !ok {
			a = uint32(len(arms))
			armOf[arm] = a
			arms = append(arms, arm)
		}
		add(trajEntry{task: task, rollout: int32(rollout), arm: a, offset: at})
		return nil
	})
	return complete, arms, err
}

// trajSpillEntries is how many entries WriteTrajIndex keeps in memory (6 MiB) before it
// writes them to a temporary file as a sorted run.
var trajSpillEntries = 1 << 18

// trajEntryCodec is an entry in that file.
var trajEntryCodec = extsort.Codec[trajEntry]{
	Size: 8 + 8 + 4 + 4,
	Encode: func(b []byte, e *trajEntry) {
		binary.LittleEndian.PutUint64(b, uint64(e.task))
		binary.LittleEndian.PutUint64(b[8:], uint64(e.offset))
		binary.LittleEndian.PutUint32(b[16:], uint32(e.rollout))
		binary.LittleEndian.PutUint32(b[20:], e.arm)
	},
	Decode: func(b []byte, e *trajEntry) {
		e.task = int64(binary.LittleEndian.Uint64(b))
		e.offset = int64(binary.LittleEndian.Uint64(b[8:]))
		e.rollout = int32(binary.LittleEndian.Uint32(b[16:]))
		e.arm = binary.LittleEndian.Uint32(b[20:])
	},
}

// WriteTrajIndex writes the index of dir's trajectories.jsonl to dir's trajectories.idx
// (atomically), and returns its number of entries: Finish calls it at the end of a run. Its
// memory does not grow with the file: past trajSpillEntries lines, the keys go to a
// temporary file in dir in sorted runs, merged as the index is written (the same bytes as
// BuildTrajIndex's).
func WriteTrajIndex(dir string) (int, error) {
	keys := extsort.New(dir, trajSpillEntries, trajEntryCodec)
	defer keys.Close()
	// By key, then offset: of the lines of one key, the last (a resumed run's) is the index's.
	order := func(a, b trajEntry) int { return cmp.Or(compareTrajEntry(a, b), cmp.Compare(a.offset, b.offset)) }
	covered, arms, err := scanTrajKeys(dir, func(e trajEntry) {
		keys.Buf = append(keys.Buf, e)
		if keys.Full() {
			keys.Spill(order)
		}
	})
	if err != nil {
		return 0, fmt.Errorf("trajectory index: %w", err)
	}
	// The entries kept, in order: each key's last.
	each := func(f func(*trajEntry)) error {
		var prev trajEntry
		have := false
		err := keys.Each(order, func(e *trajEntry) {
			if have && compareTrajEntry(prev, *e) != 0 {
				f(&prev)
			}
			prev, have = *e, true
		})
		if err == nil && have {
			f(&prev)
		}
		return err
	}
	n := 0
	if err := each(func(*trajEntry) { n++ }); err != nil {
		return 0, fmt.Errorf("trajectory index: %w", err)
	}
	err = durable.WriteAtomic(join(dir, TrajIndexFile), 0o644, func(w io.Writer) error {
		b := encodeTrajHeader(covered, arms, n)
		var werr error
		err := each(func(e *trajEntry) {
			b = appendTrajEntry(b, e)
			if len(b) >= 1<<12-trajEntrySize {
				if werr == nil {
					_, werr = w.Write(b)
				}
				b = b[:0]
			}
		})
		if err = cmp.Or(err, werr); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("trajectory index: %w", err)
	}
	return n, nil
}

// encodeTrajHeader is the start of an index file of n entries, in a buffer of 4 KiB.
func encodeTrajHeader(covered int64, arms []string, n int) []byte {
	b := make([]byte, 0, 1<<12)
	b = append(b, trajIndexMagic...)
	b = binary.LittleEndian.AppendUint64(b, uint64(covered))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(arms)))
	for _, a := range arms {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(a)))
		b = append(b, a...)
	}
	return binary.LittleEndian.AppendUint64(b, uint64(n))
}

func appendTrajEntry(b []byte, e *trajEntry) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(e.task))
	b = binary.LittleEndian.AppendUint64(b, uint64(int64(e.rollout)))
	b = binary.LittleEndian.AppendUint32(b, e.arm)
	return binary.LittleEndian.AppendUint64(b, uint64(e.offset))
}

func (x *TrajIndex) encode(w io.Writer) error {
	b := encodeTrajHeader(x.covered, x.arms, len(x.entries))
	for i := range x.entries {
		b = appendTrajEntry(b, &x.entries[i])
		if len(b) >= 1<<12-trajEntrySize {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	_, err := w.Write(b)
	return err
}

// decodeTrajIndex reads an index file's bytes; an error says what is wrong with them. The file is
// input like any other: every count is checked against the bytes that are there before anything
// is allocated by it, and every offset against the length of trajectories.jsonl it covers.
func decodeTrajIndex(b []byte) (*TrajIndex, error) {
	if !bytes.HasPrefix(b, []byte(trajIndexMagic)) {
		return nil, errors.New("not a trajectory index (or another version)")
	}
	b = b[len(trajIndexMagic):]
	short := errors.New("truncated")
	if len(b) < 12 {
		return nil, short
	}
	x := &TrajIndex{covered: int64(binary.LittleEndian.Uint64(b))}
	if x.covered < 0 {
		return nil, fmt.Errorf("covers %d bytes", x.covered)
	}
	narms := binary.LittleEndian.Uint32(b[8:])
	b = b[12:]
	if uint64(narms) > uint64(len(b))/4 {
		return nil, fmt.Errorf("%d arms in %d bytes", narms, len(b))
	}
	for range narms {
		if len(b) < 4 {
			return nil, short
		}
		n := binary.LittleEndian.Uint32(b)
		if uint64(len(b)-4) < uint64(n) {
			return nil, short
		}
		x.arms = append(x.arms, string(b[4:4+n]))
		b = b[4+n:]
	}
	if len(b) < 8 {
		return nil, short
	}
	n := binary.LittleEndian.Uint64(b)
	b = b[8:]
	if n > uint64(len(b))/trajEntrySize || uint64(len(b)) != n*trajEntrySize {
		return nil, fmt.Errorf("%d entries in %d bytes", n, len(b))
	}
	x.entries = make([]trajEntry, n)
	for i := range x.entries {
		e := b[i*trajEntrySize:]
		x.entries[i] = trajEntry{
			task: int64(binary.LittleEndian.Uint64(e)), rollout: int32(binary.LittleEndian.Uint64(e[8:])),
			arm: binary.LittleEndian.Uint32(e[16:]), offset: int64(binary.LittleEndian.Uint64(e[20:])),
		}
		if r := binary.LittleEndian.Uint64(e[8:]); r > math.MaxInt32 {
			return nil, fmt.Errorf("entry %d: rollout index %d", i, r)
		}
		if x.entries[i].arm >= narms {
			return nil, fmt.Errorf("entry %d: arm %d of %d", i, x.entries[i].arm, narms)
		}
		if off := x.entries[i].offset; off < 0 || off >= x.covered {
			return nil, fmt.Errorf("entry %d: offset %d outside the %d bytes covered", i, off, x.covered)
		}
		if i > 0 && compareTrajEntry(x.entries[i-1], x.entries[i]) >= 0 {
			return nil, fmt.Errorf("entry %d: out of order", i)
		}
	}
	return x, nil
}

// Trajectories reads single trajectory lines of a run directory through its offset index.
type Trajectories struct {
	dir   string
	index *TrajIndex
}

// OpenTrajectories returns the reader of dir's trajectories: the index in trajectories.idx
// when it covers the whole of trajectories.jsonl, else one built now by a scan of the file and
// written for next time (when the directory is writable; a read-only one keeps it in memory).
func OpenTrajectories(dir string) (*Trajectories, error) {
	t := &Trajectories{dir: dir}
	return t, t.load(false)
}

// load reads the index file when it covers trajectories.jsonl (unless rebuild), else builds it.
func (t *Trajectories) load(rebuild bool) error {
	size := int64(-1)
	if st, err := os.Stat(join(t.dir, TrajectoriesFile)); err == nil {
		size = st.Size()
	}
	if b, err := os.ReadFile(join(t.dir, TrajIndexFile)); err == nil && !rebuild {
		if x, err := decodeTrajIndex(b); err == nil && x.covered == max(size, 0) {
			t.index = x
			return nil
		}
	}
	x, err := BuildTrajIndex(t.dir)
	if err != nil {
		return fmt.Errorf("trajectory index: %w", err)
	}
	t.index = x
	if size >= 0 {
		_ = durable.WriteAtomic(join(t.dir, TrajIndexFile), 0o644, x.encode) // best effort: the index is a cache
	}
	return nil
}

// Len is the number of rollouts with a trajectory line.
func (t *Trajectories) Len() int { return t.index.Len() }

// Line returns the trajectory line of (task, rollout, arm), without its newline; ok is false
// when the run has none. A line at the indexed offset that is not that rollout's (the file
// was rewritten since) makes the index be built again, once.
func (t *Trajectories) Line(task, rollout int64, arm string) (line []byte, ok bool, err error) {
	for attempt := 0; ; attempt++ {
		off, found := t.index.lookup(task, rollout, arm)
		if !found {
			return nil, false, nil
		}
		line, err := readLineAt(join(t.dir, TrajectoriesFile), off)
		if err != nil {
			return nil, false, err
		}
		gt, gr, ga, _, ok := jsonfast.LineKeys(line, "task_index", "rollout_index", "arm")
		if !ok {
			var k struct {
				Task    int64  `json:"task_index"`
				Rollout int64  `json:"rollout_index"`
				Arm     string `json:"arm"`
			}
			if json.Unmarshal(line, &k) == nil {
				gt, gr, ga, ok = k.Task, k.Rollout, []byte(k.Arm), true
			}
		}
		if ok && gt == task && gr == rollout && string(ga) == arm {
			return line, true, nil
		}
		if attempt > 0 {
			return nil, false, fmt.Errorf("%s at offset %d: not the line of task %d rollout %d arm %q", join(t.dir, TrajectoriesFile), off, task, rollout, arm)
		}
		if err := t.load(true); err != nil {
			return nil, false, err
		}
	}
}

// MaxTrajectoryLine bounds one line of trajectories.jsonl that a reader takes into memory
// (export's bound too): a longer one is a *LineTooLongError, not hundreds of MiB per request.
var MaxTrajectoryLine int64 = 256 << 20

// LineTooLongError is a line of a run's file longer than a reader's bound.
type LineTooLongError struct {
	Path   string
	Offset int64
	Limit  int64
}

func (e *LineTooLongError) Error() string {
	return fmt.Sprintf("%s at offset %d: a line longer than %d bytes", e.Path, e.Offset, e.Limit)
}

// readLineAt reads the line that starts at off, at most MaxTrajectoryLine bytes of it.
func readLineAt(path string, off int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, err
	}
	limit := MaxTrajectoryLine
	// The line, its newline and one byte more: enough to tell a line over the bound.
	r := bufio.NewReaderSize(io.LimitReader(f, limit+2), 64<<10)
	line, err := r.ReadBytes('\n')
	line = bytes.TrimSuffix(line, []byte{'\n'})
	if int64(len(line)) > limit {
		return nil, &LineTooLongError{Path: path, Offset: off, Limit: limit}
	}
	if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
		return nil, fmt.Errorf("%s at offset %s: %w", path, strconv.FormatInt(off, 10), err)
	}
	return line, nil
}
