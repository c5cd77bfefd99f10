package tlsx

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/switchyard/switchyard/internal/filestamp"
)

// stamps covers the (at most two) files a value is loaded from; an unused slot stays zero.
// It is an array so that two versions compare with == and checking costs no allocation.
type stamps [2]filestamp.Stamp

// version is a loaded value and the stamps of the files it was loaded from.
type version[T any] struct {
	stamps stamps
	val    T
}

// watched holds a value loaded from one or two files and loads it again when either file
// changes on disk. get is cheap when nothing changed (one os.Stat per file and an atomic
// load), so it can run on every TLS handshake. A reload that fails keeps the last good
// value, and the failure is logged once for each new state of the files, not on every
// handshake.
type watched[T any] struct {
	what  string // what the files hold, for log lines ("certificate", "client CA bundle")
	files [2]string
	load  func() (T, error)
	log   *slog.Logger

	cur atomic.Pointer[version[T]]

	mu         sync.Mutex // serialises reloads and guards the fields below
	failed     stamps     // the files' state when the last reload failed
	failedSeen bool       // failed is set
}

// newWatched loads the value once and returns the error of that first load, so that a
// misconfigured binary fails at start rather than on its first connection.
func newWatched[T any](what string, log *slog.Logger, load func() (T, error), file1, file2 string) (*watched[T], error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &watched[T]{what: what, files: [2]string{file1, file2}, load: load, log: log}
	st := w.stamp() // before loading: if a file changes meanwhile, the next get loads it again
	v, err := load()
	if err != nil {
		return nil, err
	}
	w.cur.Store(&version[T]{stamps: st, val: v})
	return w, nil
}

func (w *watched[T]) stamp() stamps {
	return stamps{filestamp.Of(w.files[0]), filestamp.Of(w.files[1])}
}

// get returns the current value, reloading it first when the files changed since it was
// loaded.
func (w *watched[T]) get() T {
	cur := w.cur.Load()
	if w.stamp() == cur.stamps {
		return cur.val
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// Look again under the lock: another connection may have reloaded already.
	cur = w.cur.Load()
	st := w.stamp()
	if st == cur.stamps || (w.failedSeen && st == w.failed) {
		return cur.val
	}
	v, err := w.load()
	if err != nil {
		w.failed, w.failedSeen = st, true
		w.log.Warn("tls files changed on disk but did not load; still using the previous version",
			"what", w.what, "files", w.names(), "err", err)
		return cur.val
	}
	w.failedSeen = false
	w.cur.Store(&version[T]{stamps: st, val: v})
	w.log.Info("tls files reloaded", "what", w.what, "files", w.names())
	return v
}

func (w *watched[T]) names() []string {
	if w.files[1] == "" {
		return w.files[:1]
	}
	return w.files[:]
}
