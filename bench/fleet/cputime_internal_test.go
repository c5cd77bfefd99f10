package fleet

import "testing"

func TestParseStatCPU(t *testing.T) {
	t.Parallel()
	// A command name with spaces and a ')' must not shift the fields; utime 250 and stime
	// 75 ticks are fields 14 and 15.
	line := "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 123 456 789 0"
	got, err := parseStatCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 325 * clockTick; got != want {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"", "4242 (x S 1 2", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 nan 75 0"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseStatPPID(t *testing.T) {
	t.Parallel()
	got, err := parseStatPPID("4242 (my (odd) name) S 17 4242 4242 0 -1")
	if err != nil || got != 17 {
		t.Fatalf("got %d, %v; want 17", got, err)
	}
	for _, bad := range []string{"", "4242 (x S 1 2", "4242 (x) S", "4242 (x) S one"} {
		if _, err := parseStatPPID(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
