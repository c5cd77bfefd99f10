package fleet

import (
	"bytes"
	"errors"
	"os"
	"strconv"
)

var errNoRSSLine = errors.New("no VmRSS line in /proc/PID/status")

// RSS returns the resident set size of process pid in bytes (VmRSS of /proc/PID/status;
// Linux only).
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err //nolint:wrapcheck // names the file
	}
	return parseStatusRSS(b)
}

// parseStatusRSS reads the "VmRSS:   1234 kB" line of a /proc/PID/status text.
func parseStatusRSS(status []byte) (int64, error) {
	for line := range bytes.Lines(status) {
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, errNoRSSLine
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, errNoRSSLine
		}
		return kb << 10, nil
	}
	return 0, errNoRSSLine
}
