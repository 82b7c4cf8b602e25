package main

import (
	"cmp"
	"slices"
	"strings"
)

// closest returns the few candidates nearest to word, best first: the ones that contain it or
// that it contains (case aside: "Qwen3-8B" and "Qwen/Qwen3-8B"), then the ones within a small
// edit distance. None when nothing is near.
func closest(word string, candidates []string) []string {
	type scored struct {
		s string
		d int
	}
	var near []scored
	lw := strings.ToLower(word)
	for _, c := range candidates {
		lc := strings.ToLower(c)
		d := editDistance(lw, lc)
		switch {
		case lw == "" || lc == "":
			continue
		case strings.Contains(lc, lw) || strings.Contains(lw, lc):
			d = 0
		case d > max(2, len(word)/3):
			continue
		}
		near = append(near, scored{c, d})
	}
	slices.SortStableFunc(near, func(a, b scored) int { return cmp.Compare(a.d, b.d) })
	var out []string
	for _, n := range near[:min(len(near), 3)] {
		out = append(out, n.s)
	}
	return out
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
