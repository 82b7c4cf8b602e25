package h1

import (
	"syscall"
	"unsafe"
)

const peekSupported = true

// peek looks at the socket without taking a byte and without blocking: ready is true when
// there is a byte to read, the end of the stream, or an error (err, unless it is the end).
func peek(fd uintptr) (ready bool, err error) {
	var b [1]byte
	_, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	switch errno {
	case 0:
		return true, nil
	case syscall.EAGAIN:
		return false, nil
	case syscall.EINTR:
		// Let the read that follows find out; for an idle connection this reads as not alive.
		return true, nil
	}
	return true, errno
}

// peekData is the number of bytes (0 or 1) waiting to be read, without blocking.
func peekData(fd uintptr) int {
	var b [1]byte
	n, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0
	}
	return int(n)
}
