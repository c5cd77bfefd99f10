package filestamp_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/internal/filestamp"
)

// fakeFile is a file whose stamp and content the test sets, and which counts the stats.
type fakeFile struct {
	size    atomic.Int64 // the stamp: a new size is a new version
	content atomic.Pointer[string]
	stats   atomic.Int64
	loads   atomic.Int64
}

// newFakeFile returns a file holding "one".
func newFakeFile() *fakeFile {
	f := &fakeFile{}
	f.set(1, "one")
	return f
}

func (f *fakeFile) set(size int64, content string) {
	f.content.Store(&content)
	f.size.Store(size)
}

func (f *fakeFile) stat(path string) filestamp.Stamp {
	if path == "" {
		return filestamp.Stamp{}
	}
	f.stats.Add(1)
	return filestamp.SizeStamp(f.size.Load())
}

func (f *fakeFile) load() (string, error) {
	f.loads.Add(1)
	c := *f.content.Load()
	if c == "" {
		return "", errors.New("empty")
	}
	return c, nil
}

func watchFake(t *testing.T, f *fakeFile, opts filestamp.Options[string]) *filestamp.Watched[string] {
	t.Helper()
	w, err := filestamp.WatchWith("token", "", f.load, opts, f.stat)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// Within the interval Get looks at nothing; the first Get once it has passed looks, and a
// change made at any time inside the interval is served from then on.
func TestGetLooksAtMostOncePerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		f := newFakeFile()
		w := watchFake(t, f, filestamp.Options[string]{Interval: interval})
		f.stats.Store(0)

		for range 1000 {
			if got := w.Get(); got != "one" {
				t.Fatalf("Get = %q, want one", got)
			}
		}
		time.Sleep(interval / 2)
		f.set(2, "two") // rotated half-way through the interval
		for range 1000 {
			w.Get()
		}
		if n := f.stats.Load(); n != 0 {
			t.Fatalf("%d stats within the interval, want 0", n)
		}
		if got := w.Get(); got != "one" {
			t.Errorf("Get before the interval ended = %q, want the old one (no look yet)", got)
		}

		time.Sleep(interval / 2) // the interval since the last look has passed
		if got := w.Get(); got != "two" {
			t.Errorf("Get once the interval passed = %q, want two", got)
		}
		if n := f.loads.Load(); n != 2 {
			t.Errorf("%d loads, want 2 (start and the change)", n)
		}
		stats := f.stats.Load()
		if stats == 0 {
			t.Fatal("no stat once the interval passed")
		}
		for range 1000 {
			if got := w.Get(); got != "two" {
				t.Fatalf("Get = %q, want two", got)
			}
		}
		if n := f.stats.Load(); n != stats {
			t.Errorf("%d more stats right after a look, want 0", n-stats)
		}

		// Unchanged: a look every interval, one stat each, no load.
		for range 3 {
			time.Sleep(interval)
			w.Get()
			w.Get()
		}
		if n := f.stats.Load() - stats; n != 3 {
			t.Errorf("%d stats over three intervals with two Gets each, want 3", n)
		}
		if n := f.loads.Load(); n != 2 {
			t.Errorf("%d loads of an unchanged file, want 2", n)
		}
	})
}

// After a long quiet time (no Gets), the next Get looks at once: the interval is the
// least time between looks, not a schedule.
func TestGetAfterQuietTimeLooksAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFile()
		w := watchFake(t, f, filestamp.Options[string]{Interval: time.Second})
		time.Sleep(time.Hour)
		f.set(2, "two")
		if got := w.Get(); got != "two" {
			t.Errorf("first Get after an hour = %q, want two", got)
		}
	})
}

// Interval 0 looks on every Get.
func TestZeroIntervalLooksEveryGet(t *testing.T) {
	f := newFakeFile()
	w := watchFake(t, f, filestamp.Options[string]{})
	f.stats.Store(0)
	for range 5 {
		w.Get()
	}
	if n := f.stats.Load(); n != 5 {
		t.Errorf("%d stats for 5 Gets, want 5", n)
	}
	f.set(2, "two")
	if got := w.Get(); got != "two" {
		t.Errorf("Get after a change = %q, want two", got)
	}
}

// Many goroutines due for a look at the same moment: one of them stats, the others keep
// the current value.
func TestConcurrentGetsShareOneLook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFile()
		w := watchFake(t, f, filestamp.Options[string]{Interval: time.Second})
		time.Sleep(time.Second)
		f.stats.Store(0)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 100 {
					w.Get()
				}
			})
		}
		wg.Wait()
		if n := f.stats.Load(); n != 1 {
			t.Errorf("%d stats by 8 goroutines at one instant, want 1", n)
		}
	})
}

// A failed reload keeps the last value, is reported once per new state of the file, and a
// later good version is loaded.
func TestFailedReloadKeepsValue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFile()
		var failed, reloaded atomic.Int64
		w := watchFake(t, f, filestamp.Options[string]{
			Interval: time.Second,
			Failed:   func(error) { failed.Add(1) },
			Reloaded: func(prev, next string) {
				if prev != "one" || next != "two" {
					t.Errorf("Reloaded(%q, %q), want (one, two)", prev, next)
				}
				reloaded.Add(1)
			},
		})
		f.set(2, "")
		for range 3 {
			time.Sleep(time.Second)
			if got := w.Get(); got != "one" {
				t.Fatalf("Get after a bad rewrite = %q, want one", got)
			}
		}
		if n := failed.Load(); n != 1 {
			t.Errorf("%d failures reported for one bad state, want 1", n)
		}
		f.set(3, "two")
		time.Sleep(time.Second)
		if got := w.Get(); got != "two" {
			t.Errorf("Get after a good rewrite = %q, want two", got)
		}
		if n := reloaded.Load(); n != 1 {
			t.Errorf("%d reloads reported, want 1", n)
		}
	})
}

// With the real stat: a rewritten file is seen once the interval has passed.
func TestWatchRealFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		w, err := filestamp.Watch(path, "", func() (string, error) {
			b, err := os.ReadFile(path)
			return string(b), err
		}, filestamp.Options[string]{Interval: filestamp.DefaultInterval})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("three"), 0o600); err != nil {
			t.Fatal(err)
		}
		time.Sleep(filestamp.DefaultInterval)
		if got := w.Get(); got != "three" {
			t.Errorf("Get = %q after a rewrite and an interval, want three", got)
		}
	})
}
