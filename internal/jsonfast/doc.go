// Package jsonfast holds the hand-written JSON fast paths that the rest of rollout shares: a
// one-pass validating scanner (Scanner, Valid), string and float encoding exactly as
// encoding/json writes them (AppendString, AppendStringHTML, AppendFloat), and string
// decoding exactly as encoding/json reads them (Unquote, AppendUnquoted).
//
// The contract of every fast path here: accept exactly what encoding/json accepts, produce
// the same bytes or values, and report (an ok of false, a -1 index) whatever it is not sure
// of, so that the caller hands that input to encoding/json, which decides and words the error.
package jsonfast
