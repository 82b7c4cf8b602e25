package record

import (
	"encoding/json"
	"fmt"
	"os"

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
		res.err = decoders[w].Decode(line, &res.rec)
	}, func(_ []byte, n int, res *decodedLine) error {
		if res.err != nil {
			lineErr = fmt.Errorf("%s:%d: not a record: %v", path, n, res.err)
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
