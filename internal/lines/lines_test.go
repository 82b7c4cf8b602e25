package lines

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Scan gives the complete lines, in order, long ones too (longer than a block), each
// with what parse made of it on a worker; a torn last line is left out.
func TestScanLines(t *testing.T) {
	long := strings.Repeat("x", BlockSize+100)
	var in strings.Builder
	var want []string
	for i := range 50_000 {
		line := strconv.Itoa(i)
		switch i {
		case 7:
			line = ""
		case 30_000:
			line = long
		}
		want = append(want, line)
		in.WriteString(line + "\n")
	}
	in.WriteString("torn")
	for _, workers := range []int{1, 3} {
		var got []string
		complete, err := Scan(strings.NewReader(in.String()), workers, func(_ int, line []byte, res *int) {
			*res = len(line)
		}, func(line []byte, n int, res *int) error {
			if *res != len(line) || n != len(got)+1 {
				return fmt.Errorf("line %d: parsed %d, %d bytes", n, *res, len(line))
			}
			got = append(got, string(line))
			return nil
		})
		if err != nil || !slices.Equal(got, want) || complete != int64(in.Len()-len("torn")) {
			t.Errorf("%d workers: %d lines (want %d), complete %d, %v", workers, len(got), len(want), complete, err)
		}
		// consume's error ends the scan.
		stop := errors.New("stop")
		_, err = Scan(strings.NewReader(in.String()), workers, func(int, []byte, *int) {}, func(_ []byte, n int, _ *int) error {
			if n == 1000 {
				return stop
			}
			return nil
		})
		if err != stop {
			t.Errorf("%d workers: err %v", workers, err)
		}
	}
}

// ScanHeads gives each line's first head bytes and its whole length, in order, long lines
// (far longer than head and than a block) included; the offsets it adds up are the file's.
func TestScanHeads(t *testing.T) {
	long := strings.Repeat("y", 3*BlockSize+17)
	var in strings.Builder
	var want []string
	for i := range 20_000 {
		line := strconv.Itoa(i)
		switch i {
		case 3:
			line = ""
		case 5, 12_345:
			line = "k" + strconv.Itoa(i) + long
		}
		want = append(want, line)
		in.WriteString(line + "\n")
	}
	in.WriteString("torn" + long)
	const head = 8
	for _, workers := range []int{1, 3} {
		var got []string
		var offset int64
		complete, err := ScanHeads(strings.NewReader(in.String()), workers, head, func(_ int, line []byte, res *int) {
			*res = len(line)
		}, func(line []byte, length int64, n int, res *int) error {
			w := want[n-1]
			if *res != len(line) || n != len(got)+1 || string(line) != w[:min(len(w), head)] || length != int64(len(w)) {
				return fmt.Errorf("line %d: %q (%d bytes), want %q", n, line, length, w[:min(len(w), head)])
			}
			if !strings.HasPrefix(in.String()[offset:], w+"\n") {
				return fmt.Errorf("line %d: not at offset %d", n, offset)
			}
			offset += length + 1
			got = append(got, string(line))
			return nil
		})
		if err != nil || len(got) != len(want) || complete != int64(in.Len()-len("torn"+long)) {
			t.Errorf("%d workers: %d lines (want %d), complete %d, %v", workers, len(got), len(want), complete, err)
		}
	}
}
