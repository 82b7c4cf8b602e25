package record

import "testing"

func TestClip(t *testing.T) {
	if got := Clip("  short  ", 10); got != "short" {
		t.Errorf("Clip = %q", got)
	}
	if got := Clip("ééé", 3); got != "é…" { // 3 bytes would cut the second é
		t.Errorf("Clip = %q", got)
	}
}
