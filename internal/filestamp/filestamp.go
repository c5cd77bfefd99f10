// Package filestamp tells whether a file on disk changed: one os.Stat, compared by
// modification time, size and inode. Watched builds on it to keep a value loaded from files
// and load it again when they change, looking at the files at most once per interval.
package filestamp

import "os"

// Stamp identifies one version of a file on disk; any difference means the file was
// rewritten or replaced. Stamps compare with ==. os.Stat follows symbolic links, so a
// Kubernetes Secret volume, which swaps a symlinked directory, shows up as a new inode
// even when time and size are the same.
type Stamp struct {
	mtime   int64  // modification time, Unix nanoseconds
	size    int64  // bytes
	inode   uint64 // 0 where the platform does not report one
	missing bool   // os.Stat failed
}

// Of returns the stamp of the file at path; the zero Stamp when path is empty.
func Of(path string) Stamp {
	if path == "" {
		return Stamp{}
	}
	fi, err := os.Stat(path)
	if err != nil {
		return Stamp{missing: true}
	}
	return Stamp{mtime: fi.ModTime().UnixNano(), size: fi.Size(), inode: inodeOf(fi)}
}
