package filestamp

// WatchWith is Watch with stat in place of Of, so that a test counts and controls the
// looks at the files.
func WatchWith[T any](file1, file2 string, load func() (T, error), opts Options[T], stat func(string) Stamp) (*Watched[T], error) {
	return watch(file1, file2, load, opts, stat)
}

// SizeStamp is the stamp of an existing file of size bytes, for a fake stat.
func SizeStamp(size int64) Stamp { return Stamp{size: size} }
