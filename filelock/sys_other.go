//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package filelock

// supported reports whether this platform has flock.
const supported = false

type fileID struct{ dev, ino uint64 }

func openFile(string, uint32) (int, fileID, error) { return -1, fileID{}, errUnsupported }
func pathID(string) (fileID, error)                { return fileID{}, errUnsupported }
func tryFlock(int, bool) (bool, error)             { return false, errUnsupported }
func funlock(int)                                  {}
func unlockClose(int)                              {}
func closeFD(int)                                  {}
func readAt(int, []byte) (int, error)              { return 0, errUnsupported }
func writeAt(int, []byte, bool) error              { return errUnsupported }
func checkPrivate(string) error                    { return nil }
