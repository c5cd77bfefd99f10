package fleet

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc/PID/stat's times (USER_HZ, 100 on every Linux
// architecture Go supports).
const clockTick = 10 * time.Millisecond

var errStatFormat = errors.New("unexpected /proc/PID/stat format")

// statFields returns the fields of a /proc/PID/stat line from field 3 (state) on. The
// command name (field 2) is in parentheses and may hold spaces or parentheses itself, so
// fields are counted from the last ')'; at least want of them are required.
func statFields(s string, want int) ([]string, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, errStatFormat
	}
	f := strings.Fields(s[i+1:])
	if len(f) < want {
		return nil, errStatFormat
	}
	return f, nil
}

// parseStatPPID returns the parent pid (field 4) of a /proc/PID/stat line.
func parseStatPPID(s string) (int, error) {
	f, err := statFields(s, 2)
	if err != nil {
		return 0, err
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, errStatFormat
	}
	return ppid, nil
}

// parseStatCPU returns utime + stime (fields 14 and 15) of a /proc/PID/stat line.
func parseStatCPU(s string) (time.Duration, error) {
	f, err := statFields(s, 13)
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, v := range f[11:13] {
		n, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			return 0, errStatFormat
		}
		total += time.Duration(n) * clockTick
	}
	return total, nil
}
