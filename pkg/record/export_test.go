package record

// Internals the external tests of this package reach.

// DecodeFast is the decoder's fast path alone: false where it leaves the line to encoding/json.
func (d *Decoder) DecodeFast(b []byte, r *Record) bool { return d.decode(b, r) }
