package filestamp

import (
	"sync"
	"sync/atomic"
	"time"
)

// DefaultInterval is the Interval of the control-plane secrets (the control token and the
// worker credentials): a rotated file is picked up within a second, and a busy admin
// listener stats the file once a second instead of once per request.
const DefaultInterval = time.Second

// Options tell Watch how often to look at the files and whom to tell about reloads.
type Options[T any] struct {
	// Interval is the least time between two looks at the files (one os.Stat each): a Get
	// within Interval of the last look returns the current value without a system call,
	// so a change is seen by the first Get at least Interval after the previous look.
	// 0 looks on every Get (for uses far costlier than a stat, such as a TLS handshake).
	Interval time.Duration
	// Failed is called when the files changed but did not load; once for each new state
	// of the files, not on every Get. May be nil.
	Failed func(err error)
	// Reloaded is called after a changed version loaded and replaced prev. May be nil.
	Reloaded func(prev, next T)
}

// Watched holds a value loaded from one or two files and loads it again when either file
// changes on disk. Get is cheap when nothing changed: within Options.Interval of the last
// look it is two atomic loads and a reading of the monotonic clock; after that, one
// os.Stat per file. A reload that fails keeps the last good value. A Watched is safe for
// concurrent use.
type Watched[T any] struct {
	files [2]string
	load  func() (T, error)
	opts  Options[T]
	stat  func(path string) Stamp // Of; replaced in tests
	epoch time.Time               // the clock's origin for next

	cur  atomic.Pointer[version[T]]
	next atomic.Int64 // when the files are due for a look, nanoseconds since epoch

	mu         sync.Mutex // serialises reloads and guards the fields below
	failed     stamps     // the files' state when the last reload failed
	failedSeen bool       // failed is set
}

// stamps covers the (at most two) files a value is loaded from; an unused slot stays zero.
// It is an array so that two versions compare with == and checking costs no allocation.
type stamps [2]Stamp

// version is a loaded value and the stamps of the files it was loaded from.
type version[T any] struct {
	stamps stamps
	val    T
}

// Watch loads the value from file1 and file2 ("" when there is only one) once, and
// returns the error of that first load, so that a misconfigured binary fails at start
// rather than on first use.
func Watch[T any](file1, file2 string, load func() (T, error), opts Options[T]) (*Watched[T], error) {
	return watch(file1, file2, load, opts, Of)
}

func watch[T any](file1, file2 string, load func() (T, error), opts Options[T], stat func(string) Stamp) (*Watched[T], error) {
	w := &Watched[T]{files: [2]string{file1, file2}, load: load, opts: opts, stat: stat, epoch: time.Now()}
	st := w.stamp() // before loading: if a file changes meanwhile, the next look loads it again
	v, err := load()
	if err != nil {
		return nil, err
	}
	w.cur.Store(&version[T]{stamps: st, val: v})
	w.next.Store(int64(opts.Interval))
	return w, nil
}

func (w *Watched[T]) stamp() stamps {
	return stamps{w.stat(w.files[0]), w.stat(w.files[1])}
}

// Get returns the current value, reloading it first when the files are due for a look and
// changed since it was loaded.
func (w *Watched[T]) Get() T {
	cur := w.cur.Load()
	if iv := w.opts.Interval; iv > 0 {
		now := int64(time.Since(w.epoch))
		next := w.next.Load()
		// Not due, or another caller has just claimed this look: the current value stands.
		if now < next || !w.next.CompareAndSwap(next, now+int64(iv)) {
			return cur.val
		}
	}
	if w.stamp() == cur.stamps {
		return cur.val
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// Look again under the lock: another caller may have reloaded already.
	cur = w.cur.Load()
	st := w.stamp()
	if st == cur.stamps || (w.failedSeen && st == w.failed) {
		return cur.val
	}
	v, err := w.load()
	if err != nil {
		w.failed, w.failedSeen = st, true
		if w.opts.Failed != nil {
			w.opts.Failed(err)
		}
		return cur.val
	}
	w.failedSeen = false
	w.cur.Store(&version[T]{stamps: st, val: v})
	if w.opts.Reloaded != nil {
		w.opts.Reloaded(cur.val, v)
	}
	return v
}
