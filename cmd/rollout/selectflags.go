package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/rollout-dev/rollout/pkg/dataset"
)

// Which tasks run: --sample-id picks rows by their "id" field, --limit keeps the first N of
// them, or a fraction of them (0.1: the first 10%, rounded up, as lm-evaluation-harness's
// --limit 0.1 does). The manifest keeps the resolved count and the ids, so that a resume runs
// the same rows.

// limitFlag is --limit: a whole number of tasks, or a fraction in (0, 1).
type limitFlag struct{ f *runFlags }

func (l limitFlag) String() string {
	if l.f == nil {
		return "0"
	}
	if l.f.limitFrac > 0 {
		return strconv.FormatFloat(l.f.limitFrac, 'g', -1, 64)
	}
	return strconv.Itoa(l.f.limit)
}

func (l limitFlag) Set(v string) error {
	v = strings.TrimSpace(v)
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return fmt.Errorf("want a number of tasks >= 0 or a fraction in (0, 1), got %d", n)
		}
		l.f.limit, l.f.limitFrac = n, 0
		return nil
	}
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(x) || x <= 0 || x >= 1 {
		return fmt.Errorf("want a number of tasks (10) or a fraction in (0, 1) (0.1: the first 10%% of the tasks), got %q", v)
	}
	l.f.limit, l.f.limitFrac = 0, x
	return nil
}

// idsFlag is --sample-id: ids separated by commas, repeatable.
type idsFlag struct{ ids *[]string }

func (s idsFlag) String() string {
	if s.ids == nil {
		return ""
	}
	return strings.Join(*s.ids, ",")
}

func (s idsFlag) Set(v string) error {
	for _, id := range strings.Split(v, ",") {
		if id = strings.TrimSpace(id); id == "" {
			return fmt.Errorf("an empty id in %q", v)
		}
		if !contains(*s.ids, id) {
			*s.ids = append(*s.ids, id)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func selectFlags(fs *flag.FlagSet, f *runFlags) {
	fs.Var(limitFlag{f}, "limit", "run only the first `N` tasks, or a fraction (0.1: the first 10%) (0: all)")
	fs.Var(idsFlag{&f.sampleIDs}, "sample-id", "run only the rows whose \"id\" is one of `IDS` (a,b,c; repeatable)")
}

// resolveSelection checks --sample-id against the input (every id must be a row's "id") and
// turns a --limit fraction into its number of tasks, saying so on stderr. It returns the ids
// as the runner takes them (nil: every row).
func resolveSelection(f *runFlags, stderr io.Writer) (map[string]bool, error) {
	var ids map[string]bool
	selected := -1
	if len(f.sampleIDs) > 0 {
		if f.input == "-" {
			return nil, badUsage("--sample-id: the input is read twice (to check the ids, then to run); give a file, not -")
		}
		found := map[string]bool{}
		rows, withID := 0, 0
		err := dataset.ReadFile(f.input, func(t *dataset.Task) error {
			rows++
			if t.ID != "" {
				withID++
				found[t.ID] = true
			}
			return nil
		})
		if err != nil {
			return nil, badUsage("--input %s: %v", f.input, err)
		}
		if withID == 0 {
			return nil, badUsage("--sample-id: no row of %s has an \"id\" field (--sample-id picks rows by their top-level \"id\"); use --limit, or add ids", f.input)
		}
		var unknown []string
		for _, id := range f.sampleIDs {
			if !found[id] {
				unknown = append(unknown, id)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return nil, badUsage("--sample-id: no row of %s has \"id\" %s (%d of its %d rows have an id)", f.input, strings.Join(quoteAll(unknown), ", "), withID, rows)
		}
		ids = make(map[string]bool, len(f.sampleIDs))
		for _, id := range f.sampleIDs {
			ids[id] = true
		}
		selected = len(ids)
	}
	if f.limitFrac > 0 {
		if selected < 0 {
			if f.input == "-" {
				return nil, badUsage("--limit %g: a fraction needs the number of tasks; give a file, not -", f.limitFrac)
			}
			n, err := dataset.Count(f.input)
			if err != nil {
				return nil, badUsage("--input %s: %v", f.input, err)
			}
			selected = n
		}
		f.limit = max(1, int(math.Ceil(f.limitFrac*float64(selected)-1e-9)))
		fmt.Fprintf(stderr, "rollout: --limit %g: the first %d of %d tasks\n", f.limitFrac, f.limit, selected)
		f.limitFrac = 0
	}
	return ids, nil
}

func quoteAll(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = strconv.Quote(s)
	}
	return out
}
