package record_test

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/record/recordtest"
)

// A line of each kind the journal holds, as the Sink writes it.
var (
	journalLine = func() string {
		r := recordtest.Realistic(5)
		b, _ := json.Marshal(&r)
		return string(b)
	}()
	failedLine = func() string {
		for i := 0; ; i++ {
			if r := recordtest.Realistic(i); r.FailureClass != "" && strings.Contains(r.Error, `"`) {
				b, _ := json.Marshal(&r)
				return string(b)
			}
		}
	}()
)

// decodeBoth decodes line with encoding/json and with the fast path (and the fallback, as
// the package reads journals), and returns both records and whether the fast path took it.
func decodeBoth(line string) (want record.Record, wantErr error, got record.Record, gotErr error, fast bool) {
	wantErr = json.Unmarshal([]byte(line), &want)
	var d record.Decoder
	fast = d.DecodeFast([]byte(line), &got)
	if !fast {
		got = record.Record{}
		gotErr = d.Decode([]byte(line), &got)
	}
	return
}

// sameRecord compares records field by field, with reflect.DeepEqual, which tells a nil map
// or list from an empty one; times must be equal and in the same location.
func sameRecord(a, b record.Record) bool {
	if !a.StartedAt.Equal(b.StartedAt) || a.StartedAt.Location().String() != b.StartedAt.Location().String() {
		return false
	}
	_, ao := a.StartedAt.Zone()
	_, bo := b.StartedAt.Zone()
	a.StartedAt, b.StartedAt = time.Time{}, time.Time{}
	return ao == bo && reflect.DeepEqual(a, b) && math.Signbit(a.Reward) == math.Signbit(b.Reward)
}

// The fast record decoder reads every line as encoding/json does: the same record, or an
// error where encoding/json has one; and it takes the lines the Sink writes itself.
func TestRecordDecoderMatchesEncodingJSON(t *testing.T) {
	base := journalLine
	replace := func(old, new string) string {
		if !strings.Contains(base, old) {
			panic(old)
		}
		return strings.Replace(base, old, new, 1)
	}
	tests := []struct {
		name string
		line string
		fast bool // the fast path must take it
	}{
		{"sink line", base, true},
		{"failed, escaped quotes in error", failedLine, true},
		{"empty object", `{}`, true},
		{"spaces everywhere", " { \"task_index\" : 3 ,\t\"arm\" :\r\n \"multi\" , \"tool_names\" : [ \"a\" , \"b\" ] , \"reward_components\" : { \"x\" : 1 } } \n", true},
		{"keys in another order", `{"arm":"single","rollout_index":2,"task_index":9,"reward":0.5,"has_reward":true}`, true},
		{"escaped arm", `{"task_index":1,"rollout_index":0,"arm":"a\"b\\c\/d\n\t\u00e9"}`, true},
		{"non-ASCII arm", `{"task_index":1,"arm":"multi-é-😀"}`, true},
		{"arm with a surrogate pair escape", `{"task_index":1,"arm":"\ud83d\ude00"}`, false},
		{"arm with a lone surrogate", `{"task_index":1,"arm":"\ud83d"}`, false},
		{"invalid UTF-8 in arm", "{\"task_index\":1,\"arm\":\"a\xffb\"}", false},
		{"invalid UTF-8 in error", "{\"task_index\":1,\"error\":\"a\xff\"}", false},
		{"key-like text inside a string", `{"error":"\"task_index\":99,\"arm\":\"x\"","task_index":1,"arm":"a"}`, true},
		{"key-like members in a nested object", `{"task_fields":{"task_index":"99","arm":"x"},"task_index":1,"arm":"a"}`, true},
		{"null fields", `{"task_index":null,"arm":null,"tool_names":null,"reward_components":null,"started_at":null,"reward":null,"has_reward":null}`, true},
		{"empty list and map", `{"tool_names":[],"reward_components":{},"task_fields":{}}`, true},
		{"negative zero reward", `{"reward":-0}`, false},
		{"reward exponent", `{"reward":1e-7,"latency_ms":12.5E2}`, true},
		{"big integers", `{"task_index":9223372036854775807,"rollout_index":-9223372036854775807,"seed":-12}`, true},
		{"int64 overflow", `{"task_index":9223372036854775808}`, false},
		{"int32 overflow", `{"rounds":2147483648}`, false},
		{"int32 min", `{"rounds":-2147483648}`, true},
		{"float into int", `{"task_index":1.0}`, false},
		{"exponent into int", `{"task_index":1e3}`, false},
		{"string into int", `{"task_index":"1"}`, false},
		{"leading zero", `{"task_index":01}`, false},
		{"number into string", `{"arm":1}`, false},
		{"float out of range", `{"reward":1e400}`, false},
		{"bool as number", `{"has_reward":1}`, false},
		{"repeated key", `{"task_index":1,"task_index":2}`, false},
		{"repeated map key", `{"task_fields":{"a":"1","a":"2"}}`, true},
		{"key in another case", `{"Task_Index":5,"ARM":"x"}`, false},
		{"key with an escape", `{"task\u005findex":5}`, false},
		{"Kelvin sign key", "{\"tas\u212a_index\":5}", false},
		{"unknown key", `{"task_index":1,"extra":{"a":[1,2,{"b":null}]}}`, false},
		{"null in a list", `{"tool_names":["a",null]}`, false},
		{"context tokens", `{"context":"window:2","context_tokens":[ 812 , -3,0,9223372036854775807 ],"context_tokens_max":812}`, true},
		{"empty context tokens", `{"context_tokens":[]}`, true},
		{"null in context tokens", `{"context_tokens":[1,null]}`, false},
		{"float in context tokens", `{"context_tokens":[1.5]}`, false},
		{"string in context tokens", `{"context_tokens":["1"]}`, false},
		{"context tokens not a list", `{"context_tokens":7}`, false},
		{"torn context tokens", `{"context_tokens":[1,`, false},
		{"null map value", `{"reward_components":{"a":null}}`, false},
		{"time with offset", `{"started_at":"2025-03-14T15:09:26.5+05:00"}`, true},
		{"time not a string", `{"started_at":12}`, false},
		{"bad time", `{"started_at":"yesterday"}`, false},
		{"time with an escape", `{"started_at":"2025-03-14T15:09:26\u005a"}`, false},
		{"torn line", base[:len(base)/2], false},
		{"trailing garbage", base + `x`, false},
		{"two objects", base + base, false},
		{"not an object", `[1,2]`, false},
		{"garbage", `garbage`, false},
		{"empty", ``, false},
		{"unterminated string", `{"arm":"abc}`, false},
		{"control character in string", "{\"arm\":\"a\tb\"}", false},
		{"bad escape", `{"arm":"a\qb"}`, false},
		{"missing colon", `{"arm" "a"}`, false},
		{"trailing comma", `{"arm":"a",}`, false},
		{"deep nesting in a map value", `{"task_fields":{"a":[[[[[]]]]]}}`, false},
		{"BOM", "\ufeff" + base, false},
		{"CRLF", base + "\r\n", true},
		{"replace reward", replace(`"reward":`, `"reward": 0.25, "x_reward":`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, wantErr, got, gotErr, fast := decodeBoth(tt.line)
			if (wantErr == nil) != (gotErr == nil) {
				t.Fatalf("encoding/json error %v, fast path error %v", wantErr, gotErr)
			}
			if wantErr == nil && !sameRecord(got, want) {
				t.Errorf("records differ:\n got %+v\nwant %+v", got, want)
			}
			if tt.fast && !fast {
				t.Errorf("the fast path refused the line")
			}
			if fast && wantErr != nil {
				t.Errorf("the fast path took a line encoding/json refuses (%v)", wantErr)
			}
			// The key-only path agrees.
			var d record.Decoder
			if k, ok := d.Key([]byte(tt.line)); ok {
				if wantErr != nil {
					t.Errorf("Decoder.Key took a line encoding/json refuses (%v)", wantErr)
				} else if k != want.Key() {
					t.Errorf("Decoder.Key %v, want %v", k, want.Key())
				}
			}
		})
	}
}

// Random records, written by the Sink's encoder, read back by the fast decoder as
// encoding/json reads them; and the encoder writes encoding/json's bytes.
func TestRecordJSONRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	str := func() string {
		const alphabet = "ab \"\\/\n\t\x01\x7f<>&é€😀\u2028\xff"
		var b strings.Builder
		for range rng.IntN(6) {
			runes := []rune(alphabet)
			if rng.IntN(10) == 0 {
				b.WriteByte(0xff) // invalid UTF-8
				continue
			}
			b.WriteRune(runes[rng.IntN(len(runes))])
		}
		return b.String()
	}
	num := func() float64 {
		switch rng.IntN(6) {
		case 0:
			return 0
		case 1:
			return float64(rng.IntN(1000))
		case 2:
			return rng.NormFloat64() * 1e-8
		case 3:
			return rng.NormFloat64() * 1e22
		case 4:
			return math.Copysign(0, -1)
		}
		return rng.Float64()
	}
	var enc bytes.Buffer
	je := json.NewEncoder(&enc)
	je.SetEscapeHTML(false)
	var keys []string
	for i := range 3000 {
		r := recordtest.Realistic(rng.IntN(1 << 20))
		if i%2 == 0 {
			r.TaskID, r.Arm, r.Error, r.Termination = str(), str(), str(), str()
			if i%4 == 0 {
				r.TaskHash = str() // often "", left out like encoding/json's omitempty
			}
			r.Reward, r.LatencyMs = num(), num()
			r.TaskFields = map[string]string{str(): str(), str(): str()}
			r.RewardComponents = map[string]float64{str(): num()}
			r.ToolNames = []string{str(), str()}
			r.ContextTokens = []int64{rng.Int64(), -rng.Int64N(1000), 0}
			r.StartedAt = time.Unix(rng.Int64N(1<<35), rng.Int64N(1e9)).In(time.FixedZone("", 60*(rng.IntN(1440)-720)))
		}
		switch i % 7 {
		case 1:
			r.ToolNames = nil
		case 2:
			r.ToolNames = []string{}
		case 3:
			r.RewardComponents, r.TaskFields = map[string]float64{}, nil
		case 4:
			r.StartedAt = time.Time{}
		case 5:
			r.ContextTokens = []int64{}
		case 6:
			r.ContextTokens = nil
		}
		enc.Reset()
		if err := je.Encode(&r); err != nil {
			t.Fatal(err)
		}
		var line []byte
		var ok bool
		line, keys, ok = record.AppendJSON(nil, &r, keys)
		if !ok || string(line) != enc.String() {
			t.Fatalf("record %d: record.AppendJSON (ok %v):\n%s\nencoding/json:\n%s", i, ok, line, enc.Bytes())
		}
		want, wantErr, got, gotErr, _ := decodeBoth(string(line))
		if wantErr != nil || gotErr != nil {
			t.Fatalf("record %d: errors %v, %v", i, wantErr, gotErr)
		}
		if !sameRecord(got, want) {
			t.Fatalf("record %d: decoded\n got %+v\nwant %+v", i, got, want)
		}
	}
}

// A record encoding/json refuses is refused by the fast encoder too (the Sink then gives
// encoding/json's error).
func TestAppendRecordJSONRefuses(t *testing.T) {
	for _, r := range []record.Record{
		{Reward: math.NaN()},
		{LatencyMs: math.Inf(1)},
		{RewardComponents: map[string]float64{"a": math.Inf(-1)}},
		{StartedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{StartedAt: time.Date(2020, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600))},
	} {
		if _, err := json.Marshal(&r); err == nil {
			t.Fatalf("encoding/json takes %+v", r)
		}
		if out, _, ok := record.AppendJSON([]byte("x"), &r, nil); ok || string(out) != "x" {
			t.Errorf("AppendJSON took %+v: %q", r, out)
		}
	}
}

// appendCompact is json.Compact on valid JSON, and refuses what json.Compact refuses.
func TestAppendCompact(t *testing.T) {
	for _, in := range []string{
		`{}`, ` [ ] `, `{"a" : [1, 2.5e-3, -0, true, false, null, "x y\"\\\u00e9"], "b":{ "c" : {} } }`,
		"\n{\"messages\": [\n  {\"role\": \"assistant\"}\n]}\n", `"string"`, `12`, `-`, `01`, `1.`, `.5`, `1e`,
		`{"a":1,}`, `[1,]`, `{"a" 1}`, `{1:2}`, `[1 2]`, `{"a":tru}`, `nul`, `"a` + "\x01" + `"`, `"\x"`, `"\u12"`,
		`{"a":1}}`, `[[[`, ``, ` `, "\"\xff\xfe\"", `{"a":"<b> & c"}`, strings.Repeat("[", 2000) + strings.Repeat("]", 2000),
		string(recordtest.Trajectory(3, 1024)),
	} {
		var want bytes.Buffer
		werr := json.Compact(&want, []byte(in))
		got, ok := jsonfast.AppendCompact([]byte("pre"), []byte(in))
		switch {
		case werr == nil && ok && string(got) != "pre"+want.String():
			t.Errorf("%.40q: got %q, want %q", in, got, want.String())
		case werr != nil && ok:
			t.Errorf("%.40q: took what json.Compact refuses (%v)", in, werr)
		case werr == nil && !ok && len(in) < 1000:
			t.Errorf("%.40q: refused what json.Compact takes", in)
		case !ok && string(got) != "pre":
			t.Errorf("%.40q: refused, but changed dst: %q", in, got)
		}
	}
}

// checkDecoder fails t if the fast paths read line otherwise than encoding/json does.
func checkDecoder(t *testing.T, line string) {
	t.Helper()
	want, wantErr, got, gotErr, fast := decodeBoth(line)
	if (wantErr == nil) != (gotErr == nil) || fast && wantErr != nil {
		t.Fatalf("%q: encoding/json error %v, fast path (took it: %v) error %v", line, wantErr, fast, gotErr)
	}
	if wantErr == nil && !sameRecord(got, want) {
		t.Fatalf("%q: records differ:\n got %+v\nwant %+v", line, got, want)
	}
	var d record.Decoder
	if k, ok := d.Key([]byte(line)); ok && (wantErr != nil || k != want.Key()) {
		t.Fatalf("%q: Decoder.Key %v, want %v (err %v)", line, k, want.Key(), wantErr)
	}
	type keys struct {
		Task    int64  `json:"task_index"`
		Rollout int64  `json:"rollout_index"`
		Arm     string `json:"arm"`
	}
	var wk keys
	werr := json.Unmarshal([]byte(line), &wk)
	if task, rollout, arm, _, ok := jsonfast.LineKeys([]byte(line), "task_index", "rollout_index", "arm"); ok &&
		(werr != nil || task != wk.Task || rollout != wk.Rollout || string(arm) != wk.Arm) {
		t.Fatalf("%q: jsonfast.LineKeys %d %d %q, want %+v (err %v)", line, task, rollout, arm, wk, werr)
	}
}

// Lines a byte away from the Sink's, thousands of them: the fast paths read each as
// encoding/json does (or leave it to encoding/json).
func TestRecordDecoderMutations(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const alphabet = "{}[]\":,\\ \t\n0123456789.eE+-ntfaulsr_xé\x00\xff"
	for _, base := range []string{journalLine, failedLine, `{"task_index":1,"tool_names":[],"reward_components":{"a":-0.5e-3}}`} {
		for range 4000 {
			b := []byte(base)
			for range 1 + rng.IntN(3) {
				i := rng.IntN(len(b))
				switch rng.IntN(3) {
				case 0:
					b[i] = alphabet[rng.IntN(len(alphabet))]
				case 1:
					b = append(b[:i], b[i+1:]...)
				default:
					b = append(b[:i], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[i:]...)...)
				}
				if len(b) == 0 {
					break
				}
			}
			checkDecoder(t, string(b))
		}
	}
}

// go test ./pkg/report -run '^$' -fuzz FuzzRecordDecoder
func FuzzRecordDecoder(f *testing.F) {
	f.Add(journalLine)
	f.Add(failedLine)
	f.Add(`{"task_index":1,"arm":"a\"b","tool_names":["x"],"task_fields":{"k":"v"}}`)
	f.Fuzz(func(t *testing.T, line string) {
		checkDecoder(t, line)
		var want bytes.Buffer
		werr := json.Compact(&want, []byte(line))
		if got, ok := jsonfast.AppendCompact(nil, []byte(line)); ok && (werr != nil || string(got) != want.String()) {
			t.Fatalf("%q: appendCompact %q, json.Compact %q (%v)", line, got, want.String(), werr)
		}
	})
}

// DecodeRecord refuses a line without the members every record has, through the fast path
// and encoding/json alike, and names the ones missing.
func TestDecodeRecordNeedsItsMembers(t *testing.T) {
	full, err := json.Marshal(recordtest.Realistic(3))
	if err != nil {
		t.Fatal(err)
	}
	without := func(name string) string {
		var m map[string]json.RawMessage
		json.Unmarshal(full, &m)
		delete(m, name)
		b, _ := json.Marshal(m)
		return string(b)
	}
	for _, tt := range []struct {
		name, line, want string
	}{
		{"a record", string(full), ""},
		{"a record with an unknown member (encoding/json)", strings.Replace(string(full), `{`, `{"extra":1,`, 1), ""},
		{"a record with a key in another case (encoding/json)", strings.Replace(string(full), `"arm"`, `"ARM"`, 1), ""},
		{"not a record", `{"foo":1}`, "no task_index, rollout_index, arm, started_at"},
		{"empty object", `{}`, "no task_index, rollout_index, arm, started_at"},
		{"no arm", without("arm"), "no arm ("},
		{"no started_at", without("started_at"), "no started_at ("},
		{"no task_index", without("task_index"), "no task_index ("},
		{"no rollout_index, unknown member (encoding/json)", strings.Replace(without("rollout_index"), `{`, `{"extra":1,`, 1), "no rollout_index ("},
	} {
		var d record.Decoder
		var r record.Record
		err := d.DecodeRecord([]byte(tt.line), &r)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
		if _, ok := d.Key([]byte(tt.line)); ok && tt.want != "" {
			t.Errorf("%s: Key read a key", tt.name)
		}
	}
}
