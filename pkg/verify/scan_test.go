package verify

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// scanSeeds are answers, valid and not, for FuzzVerifyScan.
var scanSeeds = []string{
	`{"reward":1}`, ` {"reward" : 1.5e3 , "a" : true } `, `{"reward":0,"reward":1}`, `{"rew\u0061rd":1,"reward":2}`,
	`{"reward":null}`, `{"reward":"1"}`, `{"reward":true}`, `{"reward":{}}`, `{"reward":[]}`, `{"reward":1e400}`,
	`{"reward":-0}`, `{"reward":1e-400}`, `{"accuracy":1}`, `{"reward":1,"a":1,"a":"x"}`, `{"reward":1,"a":"x","a":2}`,
	`{"reward":1,"reward_components":{"a":1,"a":"x"}}`, `{"reward":1,"reward_components":{"a":"x","a":1}}`,
	`{"reward":1,"reward_components":{"a":"x","b":[]}}`, `{"reward":1,"reward_components":[1]}`,
	`{"reward":1,"reward_components":"x"}`, `{"reward":1,"reward_components":null,"reward_components":{"b":true}}`,
	`{"reward":1,"reward_components":{"reward":"x","c":null,"d":false}}`, `{"reward":1,"id":3,"expected_count":2,"b":1}`,
	`{"reward":1,"response":1,"responses_create_params":2,"c":3}`, "{\"reward\":1,\"k\xff\":2,\"\\u00e9\":3,\"é\":4}",
	`{"reward":1,"big":1e400,"n":-1.25E-2}`, `{"reward":1} x`, `{"reward":1}{}`, `{"reward":1`, `[{"reward":1}]`, `1`,
	`"x"`, `null`, ``, ` `, `{"reward":01}`, `{"reward":1.}`, `{"reward":-}`, `{"reward":1,}`, "{\"reward\":1,\"r\":\"\x01\"}",
	`{"reward":1,"r":"\x"}`, `{"reward":1,"r":"\u12"}`, `<html>`, "\f{\"reward\":1}",
	`{"reward":1,"x":[[[[{"y":[1,2,{"z":"w"}]}]]]]}`,
}

// FuzzVerifyScan holds the one-pass Parse to the encoding/json one it replaces: the same
// reward, components and error, or the same wording of the error, for any answer; and it
// reads every answer that is one JSON object itself.
func FuzzVerifyScan(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	// and FuzzVerifyParse's corpus
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzVerifyParse", "*"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		_, v, _ := strings.Cut(string(data), "[]byte(")
		if q, err := strconv.Unquote(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), ")"))); err == nil {
			f.Add([]byte(q))
		}
	}
	f.Fuzz(checkParse)
}

var fuzzRowKeys = []string{"id", "expected_count"}

func checkParse(t *testing.T, answer []byte) {
	slowR, slowErr := parseSlow(answer, fuzzRowKeys)
	r, err := parseFast(answer, fuzzRowKeys)
	isObject := json.Valid(answer) && bytes.HasPrefix(bytes.TrimLeft(answer, " \t\r\n"), []byte("{"))
	if (err != errNotRead) != isObject {
		t.Fatalf("parseFast(%q) read it: %v; an object: %v", answer, err != errNotRead, isObject)
	}
	if err == errNotRead {
		return
	}
	if (err == nil) != (slowErr == nil) {
		t.Fatalf("parseFast(%q) = %v, %v; parseSlow %v, %v", answer, r, err, slowR, slowErr)
	}
	if err != nil {
		var e, se *Error
		if !errors.As(err, &e) || !errors.As(slowErr, &se) {
			t.Fatalf("errors %T %T", err, slowErr)
		}
		// parseSlow names the first bad reward component of a map: any of them.
		const rc = "reward_components."
		if e.Msg != se.Msg && !(strings.HasPrefix(e.Msg, rc) && strings.HasPrefix(se.Msg, rc)) {
			t.Fatalf("parseFast(%q): %q, parseSlow %q", answer, e.Msg, se.Msg)
		}
		return
	}
	if r.Reward != slowR.Reward || !reflect.DeepEqual(r.Components, slowR.Components) || !bytes.Equal(r.Answer, answer) {
		t.Fatalf("parseFast(%q) = %v %v; parseSlow %v %v", answer, r.Reward, r.Components, slowR.Reward, slowR.Components)
	}
}

// Nesting at encoding/json's limit and past it.
func TestScanDepth(t *testing.T) {
	for _, n := range []int{jsonfast.MaxDepth - 1, jsonfast.MaxDepth, jsonfast.MaxDepth + 1} {
		checkParse(t, []byte(`{"reward":1,"x":`+strings.Repeat("[", n)+strings.Repeat("]", n)+`}`))
		checkParse(t, []byte(`{"reward":1,"x":`+strings.Repeat(`{"a":`, n)+"1"+strings.Repeat("}", n)+`}`))
	}
}
