package filelock

import (
	"encoding/binary"
	"errors"
	"os"
	"syscall"
)

// The kernel watcher: one inotify instance per process (a scarce per-user
// resource, 128 by default) watching the lock directories that have
// waiters, and one goroutine reading its events, alive while a waiter or
// a Driver that has waited holds a reference; reg.mu guards it. A
// directory watch reports by file name a close (a holder releasing, or
// dying: the kernel closes a dead process's files), a removal, a creation
// or rename (the file replaced); not flock or funlock, but holders close
// the file when they release it.
var watcher *inotify

const watchMask = syscall.IN_CLOSE_WRITE | syscall.IN_CLOSE_NOWRITE |
	syscall.IN_DELETE | syscall.IN_CREATE | syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO |
	syscall.IN_ONLYDIR

type inotify struct {
	fd     int
	file   *os.File // fd, read through the runtime's poller
	done   chan struct{}
	refs   int
	broken bool                     // the reader failed: no more events
	byWD   map[int32]map[string]int // directories (and their waiters) of a watch
	byDir  map[string]int32         // watch of a directory
}

// watchRefLocked takes a reference on the watcher, starting it if need be.
func watchRefLocked() bool {
	if watcher == nil {
		fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
		if err != nil {
			return false // out of inotify instances: waiters fall back on the backstop
		}
		in := &inotify{
			fd:    fd,
			file:  os.NewFile(uintptr(fd), "inotify"),
			done:  make(chan struct{}),
			byWD:  map[int32]map[string]int{},
			byDir: map[string]int32{},
		}
		go in.read()
		watcher = in
	}
	watcher.refs++
	return true
}

// watchUnrefLocked drops a reference; the last detaches the watcher and
// returns its stop, to call without reg.mu (the reader may wait for it).
func watchUnrefLocked() func() {
	in := watcher
	if in == nil {
		return nil
	}
	if in.refs--; in.refs > 0 {
		return nil
	}
	watcher = nil
	return func() {
		_ = in.file.Close()
		<-in.done
	}
}

// watchAddDirLocked watches dir for one more waiter; false if it cannot.
func watchAddDirLocked(dir string) bool {
	in := watcher
	if in == nil || in.broken {
		return false
	}
	if wd, ok := in.byDir[dir]; ok {
		in.byWD[wd][dir]++
		return true
	}
	wd, err := syscall.InotifyAddWatch(in.fd, dir, watchMask)
	if err != nil {
		return false
	}
	w := int32(wd)
	in.byDir[dir] = w
	if in.byWD[w] == nil {
		// Another spelling of a watched directory (a bind mount) shares it.
		in.byWD[w] = map[string]int{}
	}
	in.byWD[w][dir]++
	return true
}

// watchRemoveDirLocked undoes one watchAddDirLocked.
func watchRemoveDirLocked(dir string) {
	in := watcher
	if in == nil {
		return
	}
	w, ok := in.byDir[dir]
	if !ok {
		return // the watch ended (its directory was removed)
	}
	dirs := in.byWD[w]
	if dirs[dir]--; dirs[dir] > 0 {
		return
	}
	delete(dirs, dir)
	delete(in.byDir, dir)
	if len(dirs) == 0 {
		delete(in.byWD, w)
		_, _ = syscall.InotifyRmWatch(in.fd, uint32(w))
	}
}

// read, the watcher's goroutine, wakes the waiters of the files events name.
func (in *inotify) read() {
	defer close(in.done)
	buf := make([]byte, 64<<10)
	var path []byte
	for {
		n, err := in.file.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				reg.mu.Lock()
				in.broken = true
				wakeDirLocked("") // to their backstops
				reg.mu.Unlock()
			}
			return
		}
		reg.mu.Lock()
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			size := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := buf[off+syscall.SizeofInotifyEvent : min(n, off+syscall.SizeofInotifyEvent+size)]
			off += syscall.SizeofInotifyEvent + size
			for len(name) > 0 && name[len(name)-1] == 0 {
				name = name[:len(name)-1]
			}
			switch {
			case mask&syscall.IN_Q_OVERFLOW != 0:
				wakeDirLocked("") // events were lost: everyone tries again
			case mask&syscall.IN_IGNORED != 0:
				// The directory is gone: let its waiters find out.
				for dir := range in.byWD[wd] {
					wakeDirLocked(dir)
					delete(in.byDir, dir)
				}
				delete(in.byWD, wd)
			case len(name) > 0:
				for dir := range in.byWD[wd] {
					path = append(append(append(path[:0], dir...), os.PathSeparator), name...)
					wakeLocked(reg.byPath[string(path)])
				}
			}
		}
		reg.mu.Unlock()
	}
}

// watcherActive reports whether the watcher exists. reg.mu must be held.
func watcherActive() bool { return watcher != nil }
