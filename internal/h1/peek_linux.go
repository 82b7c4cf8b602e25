package h1

import (
	"syscall"
	"unsafe"
)

const peekSupported = true

// peek looks at the socket without taking a byte and without blocking: ready is true when
// there is a byte to read (then n is 1), the end of the stream, or an error (err, unless it
// is the end).
func peek(fd uintptr) (n int, ready bool, err error) {
	var b [1]byte
	r, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	switch errno {
	case 0:
		return int(r), true, nil
	case syscall.EAGAIN:
		return 0, false, nil
	case syscall.EINTR:
		// Let the read that follows find out; for an idle connection this reads as not alive.
		return 0, true, nil
	}
	return 0, true, errno
}
