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

// parseStatPPID returns the parent pid (field 4) of a /proc/PID/stat line.
func parseStatPPID(s string) (int, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errStatFormat
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, errStatFormat
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, errStatFormat
	}
	return ppid, nil
}

// parseStatCPU returns utime + stime of a /proc/PID/stat line. The command name (field 2)
// is in parentheses and may hold spaces or parentheses itself, so fields are counted from
// the last ')'.
func parseStatCPU(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errStatFormat
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, errStatFormat
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
