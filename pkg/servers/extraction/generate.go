package extraction

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/rollout-dev/rollout/pkg/plan"
)

// Task generation for the extraction server: Generate writes task rows, each with its
// own world, question, expectations and reference plan.

// extractionCategories are the task shapes.
//
//   - lookup: one product, one quarter, one region.
//   - cross_source: one product and quarter in 2-4 regions, answered in the order the question
//     lists the regions.
//   - filter: every active record of one product in 1-2 regions (all quarters on file), answered
//     in ascending order of record id.
//   - ordered_aggregate: 2-3 products in one quarter in 1-2 regions, answered from the smallest
//     figure to the largest.
var extractionCategories = []string{"lookup", "cross_source", "filter", "ordered_aggregate"}

// extractionDifficulties scale the world (2, 3-4 or 5-6 regions), the number of figures asked for
// and the distractors (forecast databases, archived revisions, regions not asked about).
var extractionDifficulties = []string{"easy", "medium", "hard"}

var extractionRegionNames = []string{"North", "South", "East", "West", "Central", "Coastal", "Highland", "Metro"}

var extractionProducts = []string{"Widgets", "Gaskets", "Sprockets", "Flanges", "Bearings", "Valves", "Hinges",
	"Brackets", "Rivets", "Couplings", "Pulleys", "Springs", "Washers", "Dowels", "Clamps", "Fittings"}

var extractionQuarters = func() []string {
	var qs []string
	for y := 2023; y <= 2025; y++ {
		for q := 1; q <= 4; q++ {
			qs = append(qs, fmt.Sprintf("%d-Q%d", y, q))
		}
	}
	return qs
}()

const extractionInstructions = "You are a sales data analyst. Sales figures (in thousands of USD) are spread over " +
	"regional databases: find them with the tools, one step at a time, and report them with submit_answer."

// extractionToolsJSON are the task rows' tools: flat Responses-style function tools.
var extractionToolsJSON = func() json.RawMessage {
	const tools = `[
{"type":"function","name":"list_sources","description":"Step 1: list a region's sales databases. Each has a name (for find_record_ids) and a kind: 'actuals' (booked sales) or 'forecast' (projections).","parameters":{"type":"object","properties":{"region":{"type":"string","description":"Region name, e.g. North."}},"required":["region"],"additionalProperties":false},"strict":true},
{"type":"function","name":"find_record_ids","description":"Step 2: ids of a product's records in one database, optionally for one quarter, ascending. Archived revisions are included: check each record's status with get_record.","parameters":{"type":"object","properties":{"source":{"type":"string","description":"Source name from list_sources."},"product":{"type":"string","description":"Product, e.g. Widgets."},"quarter":{"type":["string","null"],"description":"YYYY-QN, e.g. 2024-Q3, or null for all quarters."}},"required":["source","product","quarter"],"additionalProperties":false},"strict":true},
{"type":"function","name":"get_record","description":"Step 3: fetch a record by source and id. Returns product, quarter, status ('active', or 'archived': superseded) and value_key; read the figure with read_value.","parameters":{"type":"object","properties":{"source":{"type":"string","description":"Source of the id."},"id":{"type":"string","description":"Id from find_record_ids."}},"required":["source","id"],"additionalProperties":false},"strict":true},
{"type":"function","name":"read_value","description":"Step 4: read a sales figure (thousands of USD) by a record's value_key.","parameters":{"type":"object","properties":{"value_key":{"type":"string","description":"value_key from get_record."}},"required":["value_key"],"additionalProperties":false},"strict":true},
{"type":"function","name":"submit_answer","description":"Last step: submit the figures asked for, in the order asked. Only the last submission counts.","parameters":{"type":"object","properties":{"values":{"type":"array","items":{"type":"number"},"description":"Figures in the asked order."}},"required":["values"],"additionalProperties":false},"strict":true}
]`
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(tools)); err != nil {
		panic("extraction: tools: " + err.Error())
	}
	return b.Bytes()
}()

// extractionMatchIDs is what find_record_ids answers: the ids of the source's records of the
// product (and quarter, when hasQuarter), sorted. Shared by the tool and the generator's plans.
func extractionMatchIDs(w *extractionWorld, source, product, quarter string, hasQuarter bool) []string {
	ids := []string{}
	for _, r := range w.Records {
		if r.Source != source || !strings.EqualFold(r.Product, strings.TrimSpace(product)) {
			continue
		}
		if hasQuarter && !strings.EqualFold(r.Quarter, strings.TrimSpace(quarter)) {
			continue
		}
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	return ids
}

// extractionRow is one task row as written.
type extractionRow struct {
	ID         string             `json:"id"`
	Category   string             `json:"category"`
	Difficulty string             `json:"difficulty"`
	Params     extractionParams   `json:"responses_create_params"`
	World      extractionWorld    `json:"world"`
	Expected   []json.Number      `json:"expected_values"`
	Minefield  []json.Number      `json:"minefield_values"`
	Steps      []string           `json:"required_steps"`
	Plan       plan.Plan          `json:"reference_plan"`
	AgentRef   extractionAgentRef `json:"agent_ref"`
}

// extractionAgentRef names the server that runs the row (NeMo Gym's agent_ref).
type extractionAgentRef struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

type extractionParams struct {
	Input             []extractionMessage `json:"input"`
	Instructions      string              `json:"instructions"`
	Tools             json.RawMessage     `json:"tools"`
	ParallelToolCalls bool                `json:"parallel_tool_calls"`
}

type extractionMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Generate writes n task rows for the extraction server as JSONL. The output depends
// only on seed: the same seed gives the same bytes. Categories cycle row by row and difficulties
// every four rows, so any 12 consecutive rows hold every combination; questions are unique.
func Generate(w io.Writer, seed int64, n int) error {
	r := rand.New(rand.NewPCG(uint64(seed), 0x6578747261637431))
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	seen := map[string]bool{}
	for i := 0; i < n; i++ {
		cat := extractionCategories[i%len(extractionCategories)]
		diff := extractionDifficulties[(i/len(extractionCategories))%len(extractionDifficulties)]
		var row *extractionRow
		for attempt := 0; ; attempt++ {
			if attempt == 1000 {
				return fmt.Errorf("extraction: no unique question for row %d after %d attempts", i+1, attempt)
			}
			row = extractionTask(r, cat, diff)
			q := row.Params.Input[0].Content
			if !seen[q] {
				seen[q] = true
				break
			}
		}
		row.ID = fmt.Sprintf("extraction-%04d", i+1)
		if err := enc.Encode(row); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// extractionBuilder builds one task's world.
type extractionBuilder struct {
	r      *rand.Rand
	world  extractionWorld
	ids    map[string]bool
	keys   map[string]bool
	values map[int]bool
	used   map[string]bool // source|product|quarter of the records made
}

func (b *extractionBuilder) hex(n int) string {
	const digits = "0123456789abcdef"
	out := make([]byte, n)
	for i := range out {
		out[i] = digits[b.r.IntN(16)]
	}
	return string(out)
}

// value is a new figure, near base when base > 0 (within ±lo..hi of it), unique in the world.
func (b *extractionBuilder) value(base int, lo, hi float64) int {
	for {
		v := 1500 + b.r.IntN(58500)
		if base > 0 {
			d := lo + (hi-lo)*b.r.Float64()
			if b.r.IntN(2) == 0 {
				d = -d
			}
			v = int(float64(base)*(1+d) + 0.5)
		}
		if v > 0 && !b.values[v] {
			b.values[v] = true
			return v
		}
	}
}

func (b *extractionBuilder) addSource(region, kind string) string {
	name := strings.ToLower(region) + "-" + kind + "-" + b.hex(4)
	b.world.Sources = append(b.world.Sources, extractionSource{Name: name, Region: region, Kind: kind})
	return name
}

// add makes a record and returns its index in world.Records.
func (b *extractionBuilder) add(source, product, quarter, status string, value int) int {
	id := ""
	for id == "" || b.ids[id] {
		id = fmt.Sprintf("R-%04d", 1000+b.r.IntN(9000))
	}
	key := ""
	for key == "" || b.keys[key] {
		key = "v-" + b.hex(6)
	}
	b.ids[id], b.keys[key] = true, true
	b.used[source+"|"+product+"|"+quarter] = true
	b.world.Records = append(b.world.Records, extractionRecord{ID: id, Source: source, Product: product,
		Quarter: quarter, Status: status, ValueKey: key, Value: json.Number(strconv.Itoa(value))})
	return len(b.world.Records) - 1
}

func (b *extractionBuilder) pick(list []string, n int) []string {
	out := make([]string, n)
	for i, j := range b.r.Perm(len(list))[:n] {
		out[i] = list[j]
	}
	return out
}

// extractionTarget is one figure the question asks for.
type extractionTarget struct {
	region, product, quarter string
	rec                      int // index in world.Records
}

// extractionTask generates one task (without its id).
func extractionTask(r *rand.Rand, cat, diff string) *extractionRow {
	b := &extractionBuilder{r: r, ids: map[string]bool{}, keys: map[string]bool{}, values: map[int]bool{}, used: map[string]bool{}}
	level := slices.Index(extractionDifficulties, diff) // 0, 1, 2

	nWorld := []int{2, 3 + r.IntN(2), 5 + r.IntN(2)}[level]
	regions := b.pick(extractionRegionNames, nWorld) // the question's order
	var nAsked int
	switch cat {
	case "lookup":
		nAsked = 1
	case "cross_source":
		nAsked = level + 2
	case "filter":
		nAsked = []int{1, 1, 2}[level]
	case "ordered_aggregate":
		nAsked = []int{1, 1 + r.IntN(2), 2}[level]
	}
	asked, others := regions[:nAsked], regions[nAsked:]

	actuals := map[string]string{}
	forecast := map[string]string{}
	forecastP := []float64{0.35, 0.6, 0.85}[level]
	for _, reg := range regions {
		actuals[reg] = b.addSource(reg, extractionActuals)
		if r.Float64() < forecastP {
			forecast[reg] = b.addSource(reg, extractionForecast)
		}
	}

	// The figures asked for.
	var targets []extractionTarget
	var products []string
	quarter := extractionQuarters[r.IntN(len(extractionQuarters))]
	switch cat {
	case "lookup", "cross_source":
		products = b.pick(extractionProducts, 1)
		for _, reg := range asked {
			targets = append(targets, extractionTarget{region: reg, product: products[0], quarter: quarter})
		}
	case "filter":
		products = b.pick(extractionProducts, 1)
		for _, reg := range asked {
			nq := []int{2, 3, 2 + r.IntN(2)}[level]
			qs := b.pick(extractionQuarters, nq)
			slices.Sort(qs)
			for _, q := range qs {
				targets = append(targets, extractionTarget{region: reg, product: products[0], quarter: q})
			}
		}
	case "ordered_aggregate":
		np := 2
		if level == 2 || (level == 1 && nAsked == 1) {
			np = 3
		}
		products = b.pick(extractionProducts, np)
		for _, reg := range asked {
			for _, p := range products {
				targets = append(targets, extractionTarget{region: reg, product: p, quarter: quarter})
			}
		}
	}
	for i := range targets {
		t := &targets[i]
		t.rec = b.add(actuals[t.region], t.product, t.quarter, extractionActive, b.value(0, 0, 0))
	}
	targetValue := func(t extractionTarget) int {
		v, _ := strconv.Atoi(string(b.world.Records[t.rec].Value))
		return v
	}

	// Distractors: archived revisions of asked records, forecasts of them, and the same figures
	// in regions not asked about.
	var minefield []int
	addMine := func(source, product, quarter, status string, v int) {
		b.add(source, product, quarter, status, v)
		minefield = append(minefield, v)
	}
	nArchived := []int{r.IntN(2), 1 + r.IntN(2), 2 + r.IntN(3)}[level]
	for range nArchived {
		t := targets[r.IntN(len(targets))]
		addMine(actuals[t.region], t.product, t.quarter, extractionArchived, b.value(targetValue(t), 0.02, 0.12))
	}
	for _, t := range targets {
		if fc, ok := forecast[t.region]; ok {
			addMine(fc, t.product, t.quarter, extractionActive, b.value(targetValue(t), 0.05, 0.2))
		}
	}
	for _, reg := range others {
		if level == 0 && r.Float64() < 0.3 {
			continue
		}
		t := targets[r.IntN(len(targets))]
		addMine(actuals[reg], t.product, t.quarter, extractionActive, b.value(0, 0, 0))
	}
	if len(minefield) == 0 {
		t := targets[r.IntN(len(targets))]
		addMine(actuals[t.region], t.product, t.quarter, extractionArchived, b.value(targetValue(t), 0.02, 0.12))
	}

	// Noise: other products and quarters in every source. A filter question's product stays out
	// of the asked regions' actuals, where every record of it is asked for or archived.
	nNoise := []int{1, 2, 2 + r.IntN(2)}[level]
	for _, src := range b.world.Sources {
		for range nNoise {
			for {
				p := extractionProducts[r.IntN(len(extractionProducts))]
				q := extractionQuarters[r.IntN(len(extractionQuarters))]
				if b.used[src.Name+"|"+p+"|"+q] {
					continue
				}
				if cat == "filter" && p == products[0] && src.Kind == extractionActuals && slices.Contains(asked, src.Region) {
					continue
				}
				status := extractionActive
				if r.IntN(5) == 0 {
					status = extractionArchived
				}
				b.add(src.Name, p, q, status, b.value(0, 0, 0))
				break
			}
		}
	}

	// Shuffle the world; regions are listed alphabetically.
	r.Shuffle(len(b.world.Sources), func(i, j int) {
		b.world.Sources[i], b.world.Sources[j] = b.world.Sources[j], b.world.Sources[i]
	})
	order := r.Perm(len(b.world.Records)) // order[i]: new position of record i
	recs := make([]extractionRecord, len(b.world.Records))
	for i, rec := range b.world.Records {
		recs[order[i]] = rec
	}
	b.world.Records = recs
	for i := range targets {
		targets[i].rec = order[targets[i].rec]
	}
	b.world.Regions = slices.Sorted(slices.Values(regions))

	// The answer order.
	switch cat {
	case "filter":
		slices.SortFunc(targets, func(a, c extractionTarget) int {
			return strings.Compare(b.world.Records[a.rec].ID, b.world.Records[c.rec].ID)
		})
	case "ordered_aggregate":
		slices.SortFunc(targets, func(a, c extractionTarget) int { return targetValue(a) - targetValue(c) })
	}

	row := &extractionRow{
		Category:   cat,
		Difficulty: diff,
		Params: extractionParams{
			Input:             []extractionMessage{{Role: "user", Content: extractionQuestion(cat, asked, products, quarter)}},
			Instructions:      extractionInstructions,
			Tools:             extractionToolsJSON,
			ParallelToolCalls: true,
		},
		World:    b.world,
		AgentRef: extractionAgentRef{Type: "responses_api_agents", Name: "extraction"},
	}
	for _, t := range targets {
		row.Expected = append(row.Expected, b.world.Records[t.rec].Value)
	}
	for _, v := range minefield {
		row.Minefield = append(row.Minefield, json.Number(strconv.Itoa(v)))
	}
	row.Plan, row.Steps = extractionPlan(&b.world, cat, asked, actuals, quarter, products, targets)
	return row
}

// extractionList writes "A", "A and B", "A, B and C".
func extractionList(items []string) string {
	if len(items) == 1 {
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

func extractionQuestion(cat string, regions, products []string, quarter string) string {
	regionPhrase := "the " + extractionList(regions) + " region"
	if len(regions) > 1 {
		regionPhrase += "s"
	}
	switch cat {
	case "lookup":
		return fmt.Sprintf("What was the actual %s sales figure for %s in %s? Use the region's actuals database, not the forecast, "+
			"and ignore archived records. Submit it with submit_answer as a one-element list.", quarter, products[0], regionPhrase)
	case "cross_source":
		return fmt.Sprintf("Get the actual %s sales figures for %s in these regions: %s. Use each region's actuals database, "+
			"not forecasts, and skip archived records. Submit the figures with submit_answer in the order the regions are listed here.",
			quarter, products[0], extractionList(regions))
	case "filter":
		return fmt.Sprintf("Find every active (non-archived) actual sales record for %s in %s, across all quarters on file; "+
			"ignore forecasts. Submit their figures with submit_answer in ascending order of record id.", products[0], regionPhrase)
	default: // ordered_aggregate
		return fmt.Sprintf("For %s, collect the actual sales figures of %s in %s (actuals databases only: no forecasts, "+
			"no archived records). Submit all %d figures with submit_answer, sorted from smallest to largest.",
			quarter, extractionList(products), regionPhrase, len(regions)*len(products))
	}
}

// extractionRef is a plan reference {"$ref": "N/POINTER"}.
func extractionRef(call int, pointer ...any) map[string]any {
	s := strconv.Itoa(call)
	for _, p := range pointer {
		s += "/" + fmt.Sprint(p)
	}
	return map[string]any{"$ref": s}
}

// extractionPlan is the reference plan that solves the task, and the steps verify requires:
//
//	round 1: list_sources for each asked region
//	round 2: find_record_ids for each (region, product) query, its source taken from round 1
//	round 3: get_record for each id found (records that are not asked for are optional)
//	round 4: read_value for each asked record, its value_key taken from round 3
//	round 5: submit_answer with the values of round 4, in the asked order
func extractionPlan(w *extractionWorld, cat string, asked []string, actuals map[string]string, quarter string,
	products []string, targets []extractionTarget) (plan.Plan, []string) {
	var p plan.Plan
	n := 0
	call := func(round int, name string, args map[string]any, optional bool) int {
		raw, err := json.Marshal(args)
		if err != nil {
			panic("extraction: plan: " + err.Error())
		}
		for len(p.Rounds) <= round {
			p.Rounds = append(p.Rounds, nil)
		}
		p.Rounds[round] = append(p.Rounds[round], plan.Call{Name: name, Arguments: raw, Optional: optional})
		n++
		return n - 1
	}
	var steps []string

	listCall := map[string]int{}
	for _, reg := range asked {
		listCall[reg] = call(0, "list_sources", map[string]any{"region": reg}, false)
		steps = append(steps, extractionStepListed(actuals[reg]))
	}

	type query struct {
		region, product string
		ids             []string
		call            int
	}
	var queries []query
	for _, reg := range asked {
		k := 0
		for _, s := range w.Sources {
			if s.Region == reg {
				if s.Name == actuals[reg] {
					break
				}
				k++
			}
		}
		qProducts := products
		if cat != "ordered_aggregate" {
			qProducts = products[:1]
		}
		for _, prod := range qProducts {
			args := map[string]any{"source": extractionRef(listCall[reg], "sources", k, "name"), "product": prod, "quarter": quarter}
			ids := extractionMatchIDs(w, actuals[reg], prod, quarter, true)
			if cat == "filter" {
				args["quarter"] = nil
				ids = extractionMatchIDs(w, actuals[reg], prod, "", false)
			}
			queries = append(queries, query{reg, prod, ids, call(1, "find_record_ids", args, false)})
		}
	}

	getCall := map[string]int{} // record id → its get_record call
	isTarget := map[string]bool{}
	for _, t := range targets {
		isTarget[w.Records[t.rec].ID] = true
	}
	for _, q := range queries {
		for j, id := range q.ids {
			getCall[id] = call(2, "get_record", map[string]any{"source": extractionRef(q.call, "source"), "id": extractionRef(q.call, "ids", j)}, !isTarget[id])
		}
	}

	var values []any
	for _, t := range targets {
		rec := w.Records[t.rec]
		gc, ok := getCall[rec.ID]
		if !ok {
			panic("extraction: plan: asked record " + rec.ID + " not found by any query")
		}
		rc := call(3, "read_value", map[string]any{"value_key": extractionRef(gc, "value_key")}, false)
		values = append(values, extractionRef(rc, "value"))
	}
	call(4, "submit_answer", map[string]any{"values": values}, false)
	p.Final = json.RawMessage(`"Submitted the values."`)

	for _, t := range targets {
		steps = append(steps, extractionStepFound(w.Records[t.rec].Source, w.Records[t.rec].ID))
	}
	for _, t := range targets {
		steps = append(steps, extractionStepFetched(w.Records[t.rec].Source, w.Records[t.rec].ID))
	}
	for _, t := range targets {
		steps = append(steps, extractionStepRead(w.Records[t.rec].ValueKey))
	}
	return p, steps
}
