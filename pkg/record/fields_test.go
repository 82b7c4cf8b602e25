package record

import (
	"strings"
	"testing"
)

// TestRecordFieldsMatchRecord checks the derived columns of the field table: the keys the
// encoder writes and the decoder matches, and the Parquet leaf column of each field.
func TestRecordFieldsMatchRecord(t *testing.T) {
	if err := checkRecordFields(&recordFields); err != nil {
		t.Fatal(err)
	}
	for f, fd := range recordFields {
		if fd.key != `"`+fd.name+`"` || fd.member != `,"`+fd.name+`":` {
			t.Errorf("field %d: key %s, member %s", f, fd.key, fd.member)
		}
		if got := fieldOfKey([]byte(fd.name)); got != f {
			t.Errorf("fieldOfKey(%q) = %d, want %d", fd.name, got, f)
		}
		if got := fieldOfKey([]byte(strings.ToUpper(fd.name))); got != -1 {
			t.Errorf("fieldOfKey(%q) = %d, want -1 (case is left to encoding/json)", strings.ToUpper(fd.name), got)
		}
	}
	// The map fields take two leaf columns, every other field one.
	if got := recordFields[rfRounds].column; got != rfRounds+1 {
		t.Errorf("rounds is column %d, want %d (after reward_components' key and value)", got, rfRounds+1)
	}
	if numRecordColumns != numRecordFields+2 {
		t.Errorf("%d columns for %d fields, want 2 more (two maps)", numRecordColumns, numRecordFields)
	}
}

// TestCheckRecordFieldsRefusesDrift changes one row of a copy of the table at a time, as a
// field added or edited on Record without its row would, and checks that the check fails
// naming the field.
func TestCheckRecordFieldsRefusesDrift(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(*[numRecordFields]recordField)
		errHas string
	}{
		{"name", func(t *[numRecordFields]recordField) { t[rfArm].name = "arms" }, `Record.Arm is "arm"`},
		{"omitempty", func(t *[numRecordFields]recordField) { t[rfTaskHash].omitEmpty = false }, "Record.TaskHash: JSON options"},
		{"kind", func(t *[numRecordFields]recordField) { t[rfRounds].kind = kindInt64 }, "Record.Rounds is a int32"},
		{"offset", func(t *[numRecordFields]recordField) { t[rfSeed].off = t[rfSourceLine].off }, "(seed) of the table is at offset"},
		{"name kind", func(t *[numRecordFields]recordField) { t[rfFailureClass].kind = kindTime }, "Record.FailureClass is a record.FailureClass"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fields := recordFields
			tc.edit(&fields)
			err := checkRecordFields(&fields)
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("err = %v, want one containing %q", err, tc.errHas)
			}
		})
	}
}
