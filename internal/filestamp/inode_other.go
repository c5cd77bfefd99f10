//go:build !unix

package filestamp

import "os"

// inodeOf reports no inode where os.Stat does not expose one; mtime and size still apply.
func inodeOf(os.FileInfo) uint64 { return 0 }
