package extsort

import (
	"cmp"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var intCodec = Codec[int64]{
	Size:   8,
	Encode: func(b []byte, v *int64) { binary.LittleEndian.PutUint64(b, uint64(*v)) },
	Decode: func(b []byte, v *int64) { *v = int64(binary.LittleEndian.Uint64(b)) },
}

func collect(t *testing.T, s *Sorter[int64]) []int64 {
	t.Helper()
	var got []int64
	if err := s.Each(cmp.Compare[int64], func(v *int64) { got = append(got, *v) }); err != nil {
		t.Fatal(err)
	}
	return got
}

// Values come back in order, twice, whether they stayed in memory, went to runs of any size,
// or (the file could not be made) stayed in memory after all; Buf never holds more than Max.
func TestSorterGivesEveryValueInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		dir  string
		max  int
		runs int
	}{
		{"memory", "", 10, 0},
		{"runs of 7", t.TempDir(), 7, 142},
		{"runs of 1", t.TempDir(), 1, 1000},
		{"one run", t.TempDir(), 999, 1},
		{"no file", filepath.Join(t.TempDir(), "missing"), 7, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(tc.dir, tc.max, intCodec)
			defer s.Close()
			var want []int64
			for range 1000 {
				v := rng.Int64N(300) - 150 // duplicates and negatives
				want = append(want, v)
				s.Buf = append(s.Buf, v)
				if s.Full() {
					s.Spill(cmp.Compare[int64])
				}
				if s.Spilling() && len(s.Buf) > tc.max {
					t.Fatalf("%d values in memory, max %d", len(s.Buf), tc.max)
				}
			}
			if s.Runs() != tc.runs {
				t.Errorf("%d runs, want %d", s.Runs(), tc.runs)
			}
			slices.Sort(want)
			for range 2 {
				if got := collect(t, s); !slices.Equal(got, want) {
					t.Fatalf("got %v\nwant %v", got, want)
				}
			}
		})
	}
}

// The file is gone from its directory at once, and its runs cannot be read after Close; a file
// that cannot be read back is an error, not fewer values in silence.
func TestSorterFile(t *testing.T) {
	dir := t.TempDir()
	s := New(dir, 4, intCodec)
	for i := range 10 {
		s.Buf = append(s.Buf, int64(10-i))
		if s.Full() {
			s.Spill(cmp.Compare[int64])
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left in the directory: %v", left)
	}
	s.f.Close()
	err := s.Each(cmp.Compare[int64], func(*int64) {})
	if err == nil || !strings.Contains(err.Error(), "reading back a temporary file") {
		t.Errorf("Each over a closed file: %v", err)
	}
}
