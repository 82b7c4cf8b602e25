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
