package record

// Record's field list, written once: the JSON encoder (AppendJSON), the journal's decoder
// (Decoder) and the Parquet column writer (ParquetWriter) all walk this table. A field is
// reached by its offset in Record, so that the loops over it read and write the field
// without a call per value. derive checks the table against Record's struct tags (name,
// omitempty, Go type), so that a field added to Record without a row here stops the program
// at once (and its tests). A kind's fields must all have its Go type: the
// loops convert the pointer at the offset to it.

import (
	"fmt"
	"reflect"
	"strings"
	"time"
	"unsafe"
)

// Record's fields, in order: indexes of recordFields (and bits of a set, in the decoder).
const (
	rfTaskIndex = iota
	rfRolloutIndex
	rfTaskID
	rfTaskHash
	rfArm
	rfAgent
	rfModel
	rfEndpoint
	rfReward
	rfHasReward
	rfRewardComponents
	rfRounds
	rfToolCalls
	rfToolNames
	rfToolErrors
	rfPromptTokens
	rfCompletionTokens
	rfLatencyMs
	rfTermination
	rfFailureClass
	rfError
	rfAttempts
	rfStartedAt
	rfSeed
	rfSourceFile
	rfSourceLine
	rfContext
	rfContextTokens
	rfContextTokensMax
	rfContextRemovedMessages
	rfContextRemovedBytes
	rfBriefingCalls
	rfTaskFields
	numRecordFields
)

// fieldKind is how a field is written and read.
type fieldKind uint8

const (
	kindInt64     fieldKind = iota
	kindInt32               // a JSON number in int32's range
	kindFloat               // float64; NaN and infinities are left to encoding/json
	kindBool                //
	kindString              // a string the decoder copies (ids, error text)
	kindName                // a string that repeats from record to record: the decoder interns it
	kindTime                // time.Time: RFC 3339 in JSON, optional timestamp(millisecond) in Parquet
	kindStrings             // []string: a JSON array, a Parquet list
	kindInt64s              // []int64: a JSON array of numbers, a Parquet list
	kindFloatMap            // map[string]float64: a JSON object, a Parquet map (two leaf columns)
	kindStringMap           // map[string]string: likewise
)

// recordField describes one field of Record.
type recordField struct {
	name      string    // JSON key and Parquet column
	key       string    // name quoted, as a JSON object's key
	member    string    // `,"name":`: the key with the comma before it and the colon after it
	kind      fieldKind //
	omitEmpty bool      // JSON omits it when empty (omitempty)
	off       uintptr   // offset in Record
	cost      int       // rough relative cost of writing its Parquet column(s), to share columns among workers
	column    int       // index of its first Parquet leaf column (maps have two: key and value)
}

// recordFields is Record's field table, by rf* index.
var recordFields = derive([numRecordFields]recordField{
	rfTaskIndex:        {name: "task_index", kind: kindInt64, off: unsafe.Offsetof(Record{}.TaskIndex)},
	rfRolloutIndex:     {name: "rollout_index", kind: kindInt64, off: unsafe.Offsetof(Record{}.RolloutIndex)},
	rfTaskID:           {name: "task_id", kind: kindString, off: unsafe.Offsetof(Record{}.TaskID), cost: 3},
	rfTaskHash:         {name: "task_hash", kind: kindString, omitEmpty: true, off: unsafe.Offsetof(Record{}.TaskHash), cost: 2},
	rfArm:              {name: "arm", kind: kindName, off: unsafe.Offsetof(Record{}.Arm), cost: 2},
	rfAgent:            {name: "agent", kind: kindName, off: unsafe.Offsetof(Record{}.Agent), cost: 2},
	rfModel:            {name: "model", kind: kindName, off: unsafe.Offsetof(Record{}.Model), cost: 2},
	rfEndpoint:         {name: "endpoint", kind: kindName, omitEmpty: true, off: unsafe.Offsetof(Record{}.Endpoint), cost: 2},
	rfReward:           {name: "reward", kind: kindFloat, off: unsafe.Offsetof(Record{}.Reward)},
	rfHasReward:        {name: "has_reward", kind: kindBool, off: unsafe.Offsetof(Record{}.HasReward)},
	rfRewardComponents: {name: "reward_components", kind: kindFloatMap, omitEmpty: true, off: unsafe.Offsetof(Record{}.RewardComponents), cost: 12},
	rfRounds:           {name: "rounds", kind: kindInt32, off: unsafe.Offsetof(Record{}.Rounds)},
	rfToolCalls:        {name: "tool_calls", kind: kindInt32, off: unsafe.Offsetof(Record{}.ToolCalls)},
	rfToolNames:        {name: "tool_names", kind: kindStrings, off: unsafe.Offsetof(Record{}.ToolNames), cost: 6},
	rfToolErrors:       {name: "tool_errors", kind: kindInt32, off: unsafe.Offsetof(Record{}.ToolErrors)},
	rfPromptTokens:     {name: "prompt_tokens", kind: kindInt64, off: unsafe.Offsetof(Record{}.PromptTokens)},
	rfCompletionTokens: {name: "completion_tokens", kind: kindInt64, off: unsafe.Offsetof(Record{}.CompletionTokens)},
	rfLatencyMs:        {name: "latency_ms", kind: kindFloat, off: unsafe.Offsetof(Record{}.LatencyMs)},
	rfTermination:      {name: "termination", kind: kindName, off: unsafe.Offsetof(Record{}.Termination), cost: 2},
	rfFailureClass:     {name: "failure_class", kind: kindName, off: unsafe.Offsetof(Record{}.FailureClass), cost: 2},
	rfError:            {name: "error", kind: kindString, off: unsafe.Offsetof(Record{}.Error), cost: 2},
	rfAttempts:         {name: "attempts", kind: kindInt32, off: unsafe.Offsetof(Record{}.Attempts)},
	rfStartedAt:        {name: "started_at", kind: kindTime, off: unsafe.Offsetof(Record{}.StartedAt), cost: 3},
	rfSeed:             {name: "seed", kind: kindInt64, off: unsafe.Offsetof(Record{}.Seed)},
	rfSourceFile:       {name: "source_file", kind: kindName, off: unsafe.Offsetof(Record{}.SourceFile), cost: 2},
	rfSourceLine:       {name: "source_line", kind: kindInt64, off: unsafe.Offsetof(Record{}.SourceLine)},

	rfContext:                {name: "context", kind: kindName, omitEmpty: true, off: unsafe.Offsetof(Record{}.Context), cost: 2},
	rfContextTokens:          {name: "context_tokens", kind: kindInt64s, omitEmpty: true, off: unsafe.Offsetof(Record{}.ContextTokens), cost: 4},
	rfContextTokensMax:       {name: "context_tokens_max", kind: kindInt64, omitEmpty: true, off: unsafe.Offsetof(Record{}.ContextTokensMax)},
	rfContextRemovedMessages: {name: "context_removed_messages", kind: kindInt32, omitEmpty: true, off: unsafe.Offsetof(Record{}.ContextRemovedMessages)},
	rfContextRemovedBytes:    {name: "context_removed_bytes", kind: kindInt64, omitEmpty: true, off: unsafe.Offsetof(Record{}.ContextRemovedBytes)},
	rfBriefingCalls:          {name: "briefing_calls", kind: kindInt32, omitEmpty: true, off: unsafe.Offsetof(Record{}.BriefingCalls)},

	rfTaskFields: {name: "task_fields", kind: kindStringMap, omitEmpty: true, off: unsafe.Offsetof(Record{}.TaskFields), cost: 10},
})

// recordFieldByName is the field of each JSON key.
var recordFieldByName = func() map[string]int {
	m := make(map[string]int, numRecordFields)
	for f := range recordFields {
		m[recordFields[f].name] = f
	}
	return m
}()

// numRecordColumns is the number of Parquet leaf columns of a record.
var numRecordColumns = recordFields[rfTaskFields].column + 2

// kindTypes is the Go type of each kind's fields.
var kindTypes = [...]reflect.Type{
	kindInt64:     reflect.TypeFor[int64](),
	kindInt32:     reflect.TypeFor[int32](),
	kindFloat:     reflect.TypeFor[float64](),
	kindBool:      reflect.TypeFor[bool](),
	kindString:    reflect.TypeFor[string](),
	kindName:      reflect.TypeFor[string](),
	kindTime:      reflect.TypeFor[time.Time](),
	kindStrings:   reflect.TypeFor[[]string](),
	kindInt64s:    reflect.TypeFor[[]int64](),
	kindFloatMap:  reflect.TypeFor[map[string]float64](),
	kindStringMap: reflect.TypeFor[map[string]string](),
}

// derive fills in the table's derived columns (key, member, column) and checks it against
// Record (checkRecordFields); a table that does not match stops the program.
func derive(fields [numRecordFields]recordField) [numRecordFields]recordField {
	col := 0
	for f := range fields {
		fd := &fields[f]
		fd.key = `"` + fd.name + `"`
		fd.member = `,` + fd.key + `:`
		fd.column = col
		col++
		if fd.kind == kindFloatMap || fd.kind == kindStringMap {
			col++
		}
	}
	if err := checkRecordFields(&fields); err != nil {
		panic("record: " + err.Error())
	}
	return fields
}

// checkRecordFields checks recordFields against Record's struct fields: the same fields in
// the same order, each with the JSON and Parquet name, omitempty and Go type of its row.
func checkRecordFields(fields *[numRecordFields]recordField) error {
	t := reflect.TypeFor[Record]()
	if t.NumField() != numRecordFields {
		return fmt.Errorf("Record has %d fields, the field table %d", t.NumField(), numRecordFields)
	}
	for f := range fields {
		fd := &fields[f]
		sf := t.Field(f)
		name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
		pqName, _, _ := strings.Cut(sf.Tag.Get("parquet"), ",")
		typ := sf.Type
		if typ == reflect.TypeFor[FailureClass]() {
			typ = reflect.TypeFor[string]()
		}
		switch {
		case sf.Offset != fd.off:
			return fmt.Errorf("field %d (%s) of the table is at offset %d, Record.%s at %d", f, fd.name, fd.off, sf.Name, sf.Offset)
		case name != fd.name || pqName != fd.name:
			return fmt.Errorf("Record.%s is %q in JSON and %q in Parquet, the field table says %q", sf.Name, name, pqName, fd.name)
		case (opts == "omitempty") != fd.omitEmpty:
			return fmt.Errorf("Record.%s: JSON options %q, the field table says omitEmpty %v", sf.Name, opts, fd.omitEmpty)
		case typ != kindTypes[fd.kind]:
			return fmt.Errorf("Record.%s is a %v, the field table's kind is for %v", sf.Name, sf.Type, kindTypes[fd.kind])
		}
	}
	return nil
}

// at is a pointer to the field at offset off of r.
func at(r *Record, off uintptr) unsafe.Pointer { return unsafe.Add(unsafe.Pointer(r), off) }
