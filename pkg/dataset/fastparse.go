package dataset

import (
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// The single-pass row parser.
//
// parseFast validates a row (UTF-8 and JSON syntax) and extracts what Task holds in one scan,
// with no encoding/json and no reflection. It accepts only rows that parseCareful (the
// reference: encoding/json's checks) accepts, and then gives exactly its result; on anything
// else it returns false and the row goes to parseCareful, which decides and words the error.
// So it may refuse a good row that is unusual (escaped keys, a duplicate member, null where a
// value goes, a key that encoding/json would match case-insensitively, nesting deeper than
// maxFastDepth): that only costs the careful pass. FuzzParseFast checks the two agree.

// maxFastDepth is the nesting parseFast follows; deeper rows go to parseCareful, which applies
// MaxNesting.
const maxFastDepth = 512

// span is a string's content in the row: b[start:end] without the quotes; esc says it has
// escapes. set is false for an absent (or null) value.
type span struct {
	start, end int
	esc, set   bool
}

// scanner is jsonfast's validating Scanner, its data at hand (b), with the readers of a row's
// parts. Its strings are checked as encoding/json checks them, which lets invalid UTF-8
// through: parseFast checks the row's UTF-8 once, when a string had a byte >= 0x80.
type scanner struct {
	jsonfast.Scanner
	b []byte
}

func newScanner(b []byte) *scanner {
	return &scanner{Scanner: jsonfast.NewLimit(b, maxFastDepth), b: b}
}

// str reads the string at the position.
func (s *scanner) str() (span, bool) {
	start, kind, ok := s.Str()
	return span{start: start + 1, end: s.Pos() - 1, esc: kind&jsonfast.Escape != 0, set: true}, ok
}

// object reads the object at the position: for each member, member gets the key (bytes
// without escapes: a key with escapes fails the object) with the position at the value, and
// must move past the value.
func (s *scanner) object(member func(key []byte) bool) bool {
	return s.Members(func(start, end int, kind jsonfast.Kind) bool {
		return kind&jsonfast.Escape == 0 && member(s.b[start+1:end-1])
	})
}

// optString reads a string or null (as encoding/json does into a *string: null is nil).
// Another kind of value fails: encoding/json would give a type error.
func (s *scanner) optString(dst *span) bool {
	switch s.Peek() {
	case '"':
		sp, ok := s.str()
		*dst = sp
		return ok
	case 'n':
		*dst = span{}
		return s.Literal("null")
	}
	return false
}

// text is the value of a string span, unescaped as encoding/json does.
func (s *scanner) text(sp span) string {
	raw := s.b[sp.start:sp.end]
	if !sp.esc {
		return string(raw)
	}
	return bytesString(jsonfast.AppendUnquoted(make([]byte, 0, len(raw)), raw))
}

// bytesString is b as a string, without a copy: b is not used after.
func bytesString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// is says whether the span's text is lit.
func (s *scanner) is(sp span, lit string) bool {
	if !sp.esc {
		return string(s.b[sp.start:sp.end]) == lit
	}
	return s.text(sp) == lit
}

// foldsTo says whether key is not one of names (lower case) but encoding/json would take it
// for one (it matches keys case-insensitively). A key with non-ASCII bytes may fold to ASCII (the Kelvin
// sign to k): it counts as such a key.
func foldsTo(key []byte, names []string) bool {
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return true
		}
	}
	for _, n := range names {
		if jsonfast.EqualFoldASCII(key, n) {
			return true
		}
	}
	return false
}

// rowKey is a top-level key as a string, without allocating for the usual ones.
func rowKey(k []byte) string {
	switch string(k) {
	case "id":
		return "id"
	case rcp:
		return rcp
	case "agent_ref":
		return "agent_ref"
	case "expected_answer":
		return "expected_answer"
	case "ground_truth":
		return "ground_truth"
	case "category":
		return "category"
	case "difficulty":
		return "difficulty"
	case "metadata":
		return "metadata"
	}
	return string(k)
}

// parseFast is the single pass; see the top of this file.
func (t *Task) parseFast() bool {
	s := newScanner(t.Raw)
	s.SkipSpace()
	fields := make([]Field, 0, 8)
	var seen map[string]bool
	var params *Params
	ok := s.object(func(kb []byte) bool {
		key := rowKey(kb)
		if repeated(fields, &seen, key) {
			return false
		}
		start := s.Pos()
		if key == rcp && s.Peek() == '{' {
			if params = s.params(); params == nil {
				return false
			}
		} else if !s.Value(1) {
			return false
		}
		fields = append(fields, Field{Key: key, Value: s.Since(start)})
		return true
	})
	if !ok || !s.AtEnd() || params == nil {
		return false
	}
	if s.Kinds()&jsonfast.High != 0 && !utf8.Valid(t.Raw) {
		return false // encoding/json would take it, with U+FFFD: parseCareful words the error
	}
	for _, f := range fields {
		switch f.Key {
		case "id":
			switch c := f.Value[0]; {
			case c == '"':
				t.ID = newScanner(f.Value).wholeText()
			case c == '-' || jsonfast.IsDigit(c):
				t.ID = string(f.Value)
			case c != 'n':
				return false
			}
		case "agent_ref":
			if f.Value[0] != 'n' {
				ref, ok := agentRef(f.Value)
				if !ok {
					return false
				}
				t.AgentRef = ref
			}
		}
	}
	t.Fields, t.Params = fields, params
	return true
}

// wholeText is the text of s.b, one valid JSON string.
func (s *scanner) wholeText() string {
	sp, _ := s.str()
	return s.text(sp)
}

// typeName are the members of agent_ref and of a tool_choice object.
var typeName = []string{"type", "name"}

// agentRef reads agent_ref, a valid object, as encoding/json does into AgentRef.
func agentRef(raw []byte) (*AgentRef, bool) {
	s := newScanner(raw)
	var m [2]span
	ok := s.stringMembers(typeName, m[:], 2)
	typ, name := m[0], m[1]
	if !ok || !name.set || name.start == name.end {
		return nil, false
	}
	ref := &AgentRef{Name: s.text(name)}
	if typ.set {
		ref.Type = s.text(typ)
	}
	return ref, true
}

// stringMembers reads the object at the position whose members named names are strings or
// null, each into spans[i] for names[i] (a name twice fails: see once); it skips the other
// members, values inside depth containers (a key that encoding/json would take for one of
// names fails: see foldsTo).
func (s *scanner) stringMembers(names []string, spans []span, depth int) bool {
	var have uint16
	return s.object(func(k []byte) bool {
		if i := matchKey(k, names); i >= 0 {
			return once(&have, 1<<i) && s.optString(&spans[i])
		}
		return !foldsTo(k, names) && s.Value(depth)
	})
}

// matchKey is the index of key in names, -1 when it is none of them.
func matchKey(key []byte, names []string) int {
	for i, n := range names {
		if string(key) == n {
			return i
		}
	}
	return -1
}

// once marks bit in *have and says whether it was clear: a known member seen twice sends the
// row to parseCareful (encoding/json keeps the last one; rows do not do that).
func once(have *uint16, bit uint16) bool {
	if *have&bit != 0 {
		return false
	}
	*have |= bit
	return true
}

// params reads responses_create_params (the position at its '{') as parseParams does.
func (s *scanner) params() *Params {
	start := s.Pos()
	var keys [32][]byte
	nkeys := 0
	box := &paramsBox{}
	p := &box.Params
	var input, tools, temperature, topP, maxTokens, parallel, choice []byte
	ok := s.object(func(k []byte) bool {
		for _, o := range keys[:nkeys] {
			if string(o) == string(k) {
				return false // a duplicate member
			}
		}
		if nkeys == len(keys) {
			return false // many members: parseCareful finds duplicates with a map
		}
		keys[nkeys] = k
		nkeys++
		vs := s.Pos()
		var ok bool
		switch string(k) {
		case "input":
			ok = s.input(p)
			input = s.Since(vs)
		case "tools":
			ok = s.tools(p)
			tools = s.Since(vs)
		case "instructions":
			var sp span
			if ok = s.optString(&sp); ok && sp.set {
				p.Instructions = s.text(sp)
			}
		default:
			ok = s.Value(2)
			v := s.Since(vs)
			switch string(k) {
			case "temperature":
				temperature = v
			case "top_p":
				topP = v
			case "max_output_tokens":
				maxTokens = v
			case "parallel_tool_calls":
				parallel = v
			case "tool_choice":
				choice = v
			}
		}
		return ok
	})
	if !ok {
		return nil
	}
	p.Raw = s.Since(start)
	if input == nil || input[0] == 'n' {
		return nil
	}
	if tools != nil && tools[0] != 'n' {
		p.ToolsRaw = tools
	}
	if !optFloat(temperature, 0, 2, &box.temperature, &p.Temperature) || !optFloat(topP, 0, 1, &box.topP, &p.TopP) {
		return nil
	}
	if maxTokens != nil && maxTokens[0] != 'n' {
		if !isNumber(maxTokens) {
			return nil
		}
		n, err := strconv.ParseInt(string(maxTokens), 10, strconv.IntSize)
		if err != nil || n <= 0 {
			return nil
		}
		box.maxTokens = int(n)
		p.MaxOutputTokens = &box.maxTokens
	}
	if parallel != nil {
		switch parallel[0] {
		case 't', 'f':
			box.parallel = parallel[0] == 't'
			p.ParallelToolCalls = &box.parallel
		case 'n':
		default:
			return nil
		}
	}
	if choice != nil && choice[0] != 'n' {
		if !toolChoiceOK(choice) {
			return nil
		}
		p.ToolChoice = choice
	}
	return p
}

func isNumber(v []byte) bool { return v[0] == '-' || jsonfast.IsDigit(v[0]) }

// paramsBox holds Params and the values its pointers point to, in one allocation.
type paramsBox struct {
	Params
	temperature, topP float64
	maxTokens         int
	parallel          bool
}

// optFloat reads an optional number within [lo, hi] into *f, and points *dst at it (null or
// absent: nil).
func optFloat(v []byte, lo, hi float64, f *float64, dst **float64) bool {
	if v == nil || v[0] == 'n' {
		return true
	}
	if !isNumber(v) {
		return false
	}
	x, err := strconv.ParseFloat(string(v), 64)
	if err != nil || x < lo || x > hi {
		return false
	}
	*f = x
	*dst = f
	return true
}

// toolChoiceOK says whether tool_choice (valid, not null) is accepted as checkToolChoice does.
func toolChoiceOK(v []byte) bool {
	s := newScanner(v)
	switch v[0] {
	case '"':
		switch s.wholeText() {
		case "auto", "none", "required":
			return true
		}
		return false
	case '{':
		var m [2]span
		ok := s.stringMembers(typeName, m[:], 3)
		typ, name := m[0], m[1]
		return ok && typ.set && s.is(typ, "function") && name.set && name.start != name.end
	}
	return false
}

var itemKeys = []string{"type", "role", "content", "name", "arguments", "call_id", "output"}

// input reads responses_create_params.input (the position at its value) as parseInput does.
func (s *scanner) input(p *Params) bool {
	switch s.Peek() {
	case '"':
		sp, ok := s.str()
		if ok {
			p.Input = []Item{{Type: ItemMessage, Role: "user", Content: s.text(sp)}}
		}
		return ok
	case '[':
	default:
		return false
	}
	items := make([]Item, 0, 4)
	n := 0
	ok := s.Items(func() bool {
		n++
		it, keep, ok := s.item()
		if ok && keep {
			items = append(items, it)
		}
		return ok
	})
	if !ok || n == 0 {
		return false
	}
	p.Input = items
	return true
}

// content kinds of an item
const (
	contentNone   = iota // absent or null
	contentString        // a string
	contentParts         // a list of text parts
	contentOther         // anything else (an error for a message)
)

// item reads one input item; keep is false for the items parseInput leaves out (reasoning).
func (s *scanner) item() (it Item, keep, ok bool) {
	var typ, role, name, callID, args, output span
	var have uint16
	var argsNull, outputNull, argsOther, outputOther bool
	contentKind := contentNone
	var content span
	var parts []span
	ok = s.object(func(k []byte) bool {
		switch string(k) {
		case "type":
			return once(&have, 1) && s.optString(&typ)
		case "role":
			return once(&have, 2) && s.optString(&role)
		case "name":
			return once(&have, 4) && s.optString(&name)
		case "call_id":
			return once(&have, 8) && s.optString(&callID)
		case "content":
			if !once(&have, 16) {
				return false
			}
			switch s.Peek() {
			case '"':
				var ok bool
				content, ok = s.str()
				contentKind = contentString
				return ok
			case 'n':
				return s.Literal("null")
			case '[':
				var ok bool
				parts, ok = s.parts()
				contentKind = contentParts
				if parts == nil {
					contentKind = contentOther
				}
				return ok
			}
			contentKind = contentOther
			return s.Value(4)
		case "arguments":
			if !once(&have, 32) {
				return false
			}
			return s.rawString(&args, &argsNull, &argsOther)
		case "output":
			if !once(&have, 64) {
				return false
			}
			return s.rawString(&output, &outputNull, &outputOther)
		}
		return !foldsTo(k, itemKeys) && s.Value(4)
	})
	if !ok {
		return it, false, false
	}
	switch {
	case !typ.set || s.is(typ, ItemMessage):
		if !role.set {
			return it, false, false
		}
		r := roleName(s, role)
		if r == "" {
			return it, false, false
		}
		it = Item{Type: ItemMessage, Role: r}
		switch contentKind {
		case contentString:
			it.Content = s.text(content)
		case contentParts:
			it.Content = s.joinText(parts)
		default:
			return it, false, false
		}
		return it, true, true
	case s.is(typ, ItemFunctionCall):
		if !name.set || name.start == name.end || !callID.set || callID.start == callID.end || (!args.set && !argsNull) || argsOther {
			return it, false, false
		}
		it = Item{Type: ItemFunctionCall, Name: s.text(name), CallID: s.text(callID)}
		if args.set {
			it.Arguments = s.text(args)
		}
		return it, true, true
	case s.is(typ, ItemFunctionCallOutput):
		if !callID.set || callID.start == callID.end || (!output.set && !outputNull) || outputOther {
			return it, false, false
		}
		it = Item{Type: ItemFunctionCallOutput, CallID: s.text(callID)}
		if output.set {
			it.Output = s.text(output)
		}
		return it, true, true
	case s.is(typ, "reasoning"):
		return it, false, true
	}
	return it, false, false
}

// rawString reads a value that must be a string where it is used (arguments, output): a
// string goes to sp, null sets *null, anything else *other.
func (s *scanner) rawString(sp *span, null, other *bool) bool {
	switch s.Peek() {
	case '"':
		v, ok := s.str()
		*sp = v
		return ok
	case 'n':
		*null = true
		return s.Literal("null")
	}
	*other = true
	return s.Value(4)
}

// roleName is a message role as a constant string, or "" when it is not one.
func roleName(s *scanner, sp span) string {
	for _, r := range roleNames {
		if s.is(sp, r) {
			return r
		}
	}
	return ""
}

var roleNames = []string{"system", "developer", "user", "assistant"}

var partKeys = []string{"type", "text"}

// parts reads a content list at the position. It returns the parts' text spans, or nil (with ok true)
// when the list is valid JSON but not all text parts: an error for a message only.
func (s *scanner) parts() (texts []span, ok bool) {
	good := true
	texts = make([]span, 0, 2)
	ok = s.Items(func() bool {
		if !good || s.Peek() != '{' {
			good = false
			return s.Value(5)
		}
		var m [2]span
		ok := s.stringMembers(partKeys, m[:], 6)
		typ, text := m[0], m[1]
		if !ok || !typ.set || !text.set || !(s.is(typ, "input_text") || s.is(typ, "output_text") || s.is(typ, "text")) {
			return false
		}
		texts = append(texts, text)
		return true
	})
	if !good {
		return nil, ok
	}
	return texts, ok
}

func (s *scanner) joinText(parts []span) string {
	if len(parts) == 1 {
		return s.text(parts[0])
	}
	n := 0
	for _, p := range parts {
		n += p.end - p.start
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = jsonfast.AppendUnquoted(b, s.b[p.start:p.end])
	}
	return bytesString(b)
}

var toolKeys = []string{"type", "name", "description", "parameters", "strict", "function"}

// tools reads responses_create_params.tools (the position at its value) as parseTools does.
func (s *scanner) tools(p *Params) bool {
	switch s.Peek() {
	case 'n':
		return s.Literal("null")
	case '[':
	default:
		return false
	}
	tools := make([]Tool, 0, 4)
	var names map[string]bool
	ok := s.Items(func() bool {
		var typ, name, desc span
		var params []byte
		var strict *bool
		var have uint16
		ok := s.object(func(k []byte) bool {
			switch string(k) {
			case "type":
				return once(&have, 1) && s.optString(&typ)
			case "name":
				return once(&have, 2) && s.optString(&name)
			case "description":
				return once(&have, 4) && s.optString(&desc)
			case "parameters":
				vs := s.Pos()
				if !once(&have, 8) || !s.Value(4) {
					return false
				}
				params = s.Since(vs)
				return true
			case "strict":
				if !once(&have, 16) {
					return false
				}
				switch s.Peek() {
				case 't':
					v := true
					strict = &v
					return s.Literal("true")
				case 'f':
					v := false
					strict = &v
					return s.Literal("false")
				case 'n':
					return s.Literal("null")
				}
				return false
			case "function":
				return once(&have, 32) && s.Value(4)
			}
			return !foldsTo(k, toolKeys) && s.Value(4)
		})
		if !ok || !typ.set || !s.is(typ, "function") || !name.set || name.start == name.end {
			return false
		}
		t := Tool{Name: s.text(name), Strict: strict}
		if len(tools) < 16 {
			for i := range tools {
				if tools[i].Name == t.Name {
					return false
				}
			}
		} else {
			if names == nil {
				names = make(map[string]bool, 64)
				for i := range tools {
					names[tools[i].Name] = true
				}
			}
			if names[t.Name] {
				return false
			}
			names[t.Name] = true
		}
		if desc.set {
			t.Description = s.text(desc)
		}
		if params != nil && params[0] != 'n' {
			if params[0] != '{' {
				return false
			}
			t.Parameters = params
		}
		tools = append(tools, t)
		return true
	})
	if ok {
		p.Tools = tools
	}
	return ok
}
