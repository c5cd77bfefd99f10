package fleet

import (
	"os"
	"testing"
)

func TestParseStatusRSS(t *testing.T) {
	got, err := parseStatusRSS([]byte("Name:\tgateway\nVmPeak:\t  900 kB\nVmRSS:\t   12345 kB\nRssAnon:\t 1 kB\n"))
	if err != nil || got != 12345<<10 {
		t.Fatalf("parseStatusRSS = %d, %v; want %d", got, err, 12345<<10)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tlots kB\n"} {
		if _, err := parseStatusRSS([]byte(bad)); err == nil {
			t.Errorf("parseStatusRSS(%q) succeeded", bad)
		}
	}
}

func TestRSSOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc")
	}
	got, err := RSS(os.Getpid())
	if err != nil || got < 1<<20 {
		t.Fatalf("RSS(self) = %d, %v; want over 1 MiB", got, err)
	}
}
