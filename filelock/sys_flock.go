//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/dlockgo/dlock/internal/privdir"
)

// supported reports whether this platform has flock.
const supported = true

// fileID identifies a file: its device and inode numbers.
type fileID struct{ dev, ino uint64 }

// openFile opens the lock file at path for reading and writing, creating
// it with exactly mode (no umask) if missing. It follows no symbolic link
// and accepts only a regular file, so that a planted link cannot make the
// driver write elsewhere.
func openFile(path string, mode uint32) (int, fileID, error) {
	const flags = syscall.O_RDWR | syscall.O_CLOEXEC | syscall.O_NOFOLLOW
	for {
		fd, err := syscall.Open(path, flags, 0)
		created := false
		if err == syscall.ENOENT {
			fd, err = syscall.Open(path, flags|syscall.O_CREAT|syscall.O_EXCL, mode)
			if err == syscall.EEXIST {
				continue // created by someone else meanwhile: open theirs
			}
			created = err == nil
		}
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			if err == syscall.ELOOP || err == syscall.EMLINK {
				return -1, fileID{}, fmt.Errorf("filelock: %s is a symbolic link; lock files must be regular files", path)
			}
			return -1, fileID{}, &os.PathError{Op: "open", Path: path, Err: err}
		}
		if created {
			if err := syscall.Fchmod(fd, mode); err != nil {
				_ = syscall.Close(fd)
				return -1, fileID{}, &os.PathError{Op: "chmod", Path: path, Err: err}
			}
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			_ = syscall.Close(fd)
			return -1, fileID{}, &os.PathError{Op: "fstat", Path: path, Err: err}
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			_ = syscall.Close(fd)
			return -1, fileID{}, fmt.Errorf("filelock: %s is not a regular file", path)
		}
		return fd, fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
	}
}

// pathID identifies the file path names, following no link; a missing
// file is an error matching fs.ErrNotExist.
func pathID(path string) (fileID, error) {
	var st syscall.Stat_t
	for {
		err := syscall.Lstat(path, &st)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fileID{}, &os.PathError{Op: "lstat", Path: path, Err: err}
		}
		return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
	}
}

// tryFlock takes (or converts to) a shared or exclusive flock on fd without
// blocking: false when another open file description holds a conflicting one.
func tryFlock(fd int, shared bool) (bool, error) {
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	for {
		err := syscall.Flock(fd, how|syscall.LOCK_NB)
		switch err {
		case nil:
			return true, nil
		case syscall.EWOULDBLOCK:
			return false, nil
		case syscall.EINTR:
			continue
		}
		return false, fmt.Errorf("filelock: flock: %w", err)
	}
}

// unlockClose drops the flock on fd, then closes it: a close alone drops
// it only with the last reference to the open file description, which a
// child forked meanwhile may share until it execs.
func unlockClose(fd int) {
	_ = syscall.Flock(fd, syscall.LOCK_UN)
	_ = syscall.Close(fd)
}

// funlock drops the flock on fd, which stays open.
func funlock(fd int) { _ = syscall.Flock(fd, syscall.LOCK_UN) }

// closeFD closes fd; the kernel drops its flocks, as when a process dies.
func closeFD(fd int) { _ = syscall.Close(fd) }

// readAt reads up to len(b) bytes at offset 0.
func readAt(fd int, b []byte) (int, error) {
	for {
		n, err := syscall.Pread(fd, b, 0)
		if err == syscall.EINTR {
			continue
		}
		return n, err
	}
}

// writeAt writes b at offset 0, then fsyncs if sync is set.
func writeAt(fd int, b []byte, sync bool) error {
	for {
		n, err := syscall.Pwrite(fd, b, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n != len(b) {
			return errors.New("short write")
		}
		break
	}
	if sync {
		return syscall.Fsync(fd)
	}
	return nil
}

// checkPrivate makes sure dir is a directory (not a link) of the current
// user's, writable by nobody else: the default directory may be in a
// shared temporary directory, where another user could create it first.
func checkPrivate(dir string) error {
	if err := privdir.Check(dir, 0o022); err != nil {
		return fmt.Errorf("filelock: %w", err)
	}
	return nil
}
