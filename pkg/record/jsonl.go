package record

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/rollout-dev/rollout/internal/lines"
)

// ScanJSONL calls fn for every record of the journal at path, in order. A torn last line
// (a crash in the middle of a write) is ignored; any other line that does not parse is an
// error naming the line. Each call gets a record of its own. Lines are decoded in parallel,
// ahead of fn.
func ScanJSONL(path string, fn func(rec *Record) error) error {
	return ScanJSONLInPlace(path, func(rec *Record) error {
		r := new(Record)
		*r = *rec
		return fn(r)
	})
}

// ScanJSONLInPlace calls fn for every record of the journal at path, in order; the record is
// only valid during the call (the maps and lists it points to are its own).
func ScanJSONLInPlace(path string, fn func(rec *Record) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	workers := lines.Workers()
	decoders := make([]Decoder, workers)
	var lineErr error // a line's, or fn's: returned as it is
	_, err = lines.Scan(f, workers, func(w int, line []byte, res *decodedLine) {
		res.err = decoders[w].DecodeRecord(line, &res.rec)
	}, func(_ []byte, n int, res *decodedLine) error {
		if res.err != nil {
			lineErr = &LineError{Path: path, Line: n, Err: res.err}
		} else {
			lineErr = fn(&res.rec)
		}
		return lineErr
	})
	if err != nil && err != lineErr {
		err = fmt.Errorf("%s: %w", path, err)
	}
	return err
}

// A LineError is a journal line that is not a record.
type LineError struct {
	Path string
	Line int // 1-based
	Err  error
}

func (e *LineError) Error() string {
	if m, ok := e.Err.(*MissingError); ok {
		return fmt.Sprintf("%s:%d: not a rollout record (no %s): is this a journal?", e.Path, e.Line, strings.Join(m.Members, ", "))
	}
	return fmt.Sprintf("%s:%d: not a record: %v", e.Path, e.Line, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// A MissingError is a JSON object without members every record has (RequiredFields).
type MissingError struct{ Members []string }

func (e *MissingError) Error() string {
	return fmt.Sprintf("no %s (a record has %s)", strings.Join(e.Members, ", "), strings.Join(RequiredFields, ", "))
}

// decodedLine is a journal line decoded: a record, or encoding/json's error.
type decodedLine struct {
	rec Record
	err error
}

// Decode decodes a journal line into r, which must be zero: through the fast path, or else
// encoding/json, whose error it returns.
func (d *Decoder) Decode(line []byte, r *Record) error {
	if d.decode(line, r) {
		return nil
	}
	*r = Record{}
	return json.Unmarshal(line, r)
}

// DecodeRecord is Decode for a journal's line, which must be a record: a line without the
// members every record has (RequiredFields) is an error naming them, so that a line of
// something else ({"foo":1}) is never read as the record of task 0, repeat 0, arm "".
func (d *Decoder) DecodeRecord(line []byte, r *Record) error {
	if d.decode(line, r) && d.seen&requiredSeen == requiredSeen {
		return nil
	}
	*r = Record{}
	if err := json.Unmarshal(line, r); err != nil {
		return err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(line, &members); err != nil {
		return err
	}
	var missing []string
	for _, name := range RequiredFields {
		found := false
		for k := range members {
			found = found || strings.EqualFold(k, name) // as encoding/json matches them
		}
		if !found {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return &MissingError{Members: missing}
	}
	return nil
}

// RequiredFields are the members every journal record has (the Sink writes them all; these
// are the ones a record cannot be read without: its key, and when it ran).
var RequiredFields = []string{"task_index", "rollout_index", "arm", "started_at"}

// requiredSeen is RequiredFields as the fast path's set of fields seen.
var requiredSeen = func() uint64 {
	var m uint64
	for _, name := range RequiredFields {
		m |= 1 << recordFieldByName[name]
	}
	return m
}()
