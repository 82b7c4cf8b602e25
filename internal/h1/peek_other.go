//go:build !linux

package h1

// Elsewhere a connection keeps its read buffer and is not checked before reuse.
const peekSupported = false

func peek(fd uintptr) (bool, error) { return true, nil }

func peekData(fd uintptr) int { return 0 }
