package view

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
)

// ReportOptions say which transcripts the one-file report carries.
type ReportOptions struct {
	PerArm    int // the first PerArm rollouts of each arm (in task order)
	MaxFailed int // every failed rollout, up to MaxFailed
}

// ReportPage is the one-file report's data.
type ReportPage struct {
	Overview    *Overview
	Compares    []*Comparison
	Sample      []Key
	SampleNote  string
	Table       *RolloutsPage
	Transcripts []*Transcript
}

// staticLinks are the report's links: anchors of what it holds, "" for the rest.
type staticLinks struct {
	rolloutsIn map[Key]bool
	comparesIn map[[2]Side]bool
}

func anchor(k Key) string {
	return fmt.Sprintf("r-%d-%d-%d-%s", k.Run, k.Task, k.Rollout, hex.EncodeToString([]byte(k.Arm)))
}

func compareAnchor(a, b Side) string {
	return "cmp-" + hex.EncodeToString([]byte(a.String()+"|"+b.String()))
}

func (l staticLinks) rollouts(Query) string { return "#sample" }

func (l staticLinks) trajectory(k Key) string {
	if l.rolloutsIn[k] {
		return "#" + anchor(k)
	}
	return ""
}

func (l staticLinks) compare(a, b Side) string {
	if l.comparesIn[[2]Side{a, b}] {
		return "#" + compareAnchor(a, b)
	}
	return ""
}

func (l staticLinks) pair(Key, Key) string { return "" }

// maxReportCompares bounds the comparisons of a report.
const maxReportCompares = 8

// WriteHTML writes the overview, the comparisons (each later arm against the first, each
// later run against the first) and the transcripts of a sample of rollouts as one HTML file:
// styles inline, charts as inline SVG, no script and no link outside the file.
func WriteHTML(w io.Writer, d *Data, o ReportOptions) error {
	l := staticLinks{rolloutsIn: map[Key]bool{}, comparesIn: map[[2]Side]bool{}}
	pairs := d.defaultPairs()
	if len(pairs) > maxReportCompares {
		pairs = pairs[:maxReportCompares]
	}
	for _, p := range pairs {
		l.comparesIn[p] = true
	}
	// The sample: failed rollouts first, then the first of each arm, in key order.
	var sample []int
	failed, perArm := 0, map[uint32]int{}
	for _, i := range d.keyOrder() {
		r := &d.rows[i]
		switch {
		case r.fail != 0 && failed < o.MaxFailed:
			failed++
		case perArm[r.arm] < o.PerArm && r.fail == 0:
			perArm[r.arm]++
		default:
			continue
		}
		sample = append(sample, int(i))
		l.rolloutsIn[d.key(int(i))] = true
	}
	p := &ReportPage{Overview: d.overview(l)}
	p.SampleNote = fmt.Sprintf("%d failed (at most %d), the first %d of each arm", failed, o.MaxFailed, o.PerArm)
	for _, pr := range pairs {
		c := d.comparison(pr[0], pr[1], l)
		c.Sides, c.Anchor = nil, compareAnchor(pr[0], pr[1])
		p.Compares = append(p.Compares, c)
	}
	p.Table = &RolloutsPage{Total: len(sample), To: len(sample), Pages: 1, GroupBy: d.groupField}
	for i, r := range d.Runs {
		p.Table.Runs = append(p.Table.Runs, RunInfo{Index: i, Dir: r.Dir})
	}
	for _, k := range sortKeys {
		p.Table.Sorts = append(p.Table.Sorts, Link{Label: k})
	}
	for _, i := range sample {
		k := d.key(i)
		p.Sample = append(p.Sample, k)
		p.Table.Rows = append(p.Table.Rows, d.tableRow(i, l))
		t, err := d.transcript(k, l)
		if err != nil {
			return err
		}
		t.Anchor = anchor(k)
		p.Transcripts = append(p.Transcripts, t)
	}
	t, err := templates()
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, "layout", Page{Title: "Report", Kind: "report", Static: true, Data: p}); err != nil {
		return err
	}
	_, err = w.Write(b.Bytes())
	return err
}
