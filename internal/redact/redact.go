// Package redact holds what every writer of a run's output agrees on about secrets (API keys
// given on the command line or in a URL): the placeholder they are replaced by and the length
// under which a "secret" is left alone.
package redact

import "strings"

// Placeholder is what a secret is replaced by in everything a run writes.
const Placeholder = "[REDACTED]"

// MinLength: shorter secrets are not looked for (replacing "x" or "EMPTY", what local servers
// are given as keys, would mangle ordinary text).
const MinLength = 8

// Secrets returns the secrets long enough to be looked for, in order.
func Secrets(secrets []string) []string {
	var keep []string
	for _, s := range secrets {
		if len(s) >= MinLength {
			keep = append(keep, s)
		}
	}
	return keep
}

// Replacer replaces each of secrets (those of at least MinLength bytes) by Placeholder; nil
// when there is none to look for.
func Replacer(secrets []string) *strings.Replacer {
	var pairs []string
	for _, s := range Secrets(secrets) {
		pairs = append(pairs, s, Placeholder)
	}
	if len(pairs) == 0 {
		return nil
	}
	return strings.NewReplacer(pairs...)
}
