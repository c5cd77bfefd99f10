package secret

import "os"

// fileStamp identifies one version of a file on disk; any difference means the file was
// rewritten or replaced.
type fileStamp struct {
	mtime   int64  // modification time, Unix nanoseconds
	size    int64  // bytes
	inode   uint64 // 0 where the platform does not report one
	missing bool   // os.Stat failed
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{missing: true}
	}
	return fileStamp{mtime: fi.ModTime().UnixNano(), size: fi.Size(), inode: inodeOf(fi)}
}
