package filestamp

import (
	"sync"
	"sync/atomic"
)

// Hooks tell the owner of a Watched value about reloads, for its log lines. Either may be
// nil.
type Hooks[T any] struct {
	// Failed is called when the files changed but did not load; once for each new state
	// of the files, not on every Get.
	Failed func(err error)
	// Reloaded is called after a changed version loaded and replaced prev.
	Reloaded func(prev, next T)
}

// Watched holds a value loaded from one or two files and loads it again when either file
// changes on disk. Get is cheap when nothing changed (one os.Stat per file and an atomic
// load), so it can run on every use. A reload that fails keeps the last good value. A
// Watched is safe for concurrent use.
type Watched[T any] struct {
	files [2]string
	load  func() (T, error)
	hooks Hooks[T]

	cur atomic.Pointer[version[T]]

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
func Watch[T any](file1, file2 string, load func() (T, error), hooks Hooks[T]) (*Watched[T], error) {
	w := &Watched[T]{files: [2]string{file1, file2}, load: load, hooks: hooks}
	st := w.stamp() // before loading: if a file changes meanwhile, the next Get loads it again
	v, err := load()
	if err != nil {
		return nil, err
	}
	w.cur.Store(&version[T]{stamps: st, val: v})
	return w, nil
}

func (w *Watched[T]) stamp() stamps {
	return stamps{Of(w.files[0]), Of(w.files[1])}
}

// Get returns the current value, reloading it first when the files changed since it was
// loaded.
func (w *Watched[T]) Get() T {
	cur := w.cur.Load()
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
		if w.hooks.Failed != nil {
			w.hooks.Failed(err)
		}
		return cur.val
	}
	w.failedSeen = false
	w.cur.Store(&version[T]{stamps: st, val: v})
	if w.hooks.Reloaded != nil {
		w.hooks.Reloaded(cur.val, v)
	}
	return v
}
