package tlsx

import (
	"log/slog"

	"github.com/switchyard/switchyard/internal/filestamp"
)

// newWatched loads a value from one or two files and watches them (see filestamp.Watched),
// looking at them on every use: a value that fails to reload keeps the previous one and is
// logged as a warning once for each new state of the files; a reload is logged. what names what the files hold, for
// log lines ("certificate", "client CA bundle").
func newWatched[T any](what string, log *slog.Logger, load func() (T, error), file1, file2 string) (*filestamp.Watched[T], error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	names := []string{file1}
	if file2 != "" {
		names = append(names, file2)
	}
	return filestamp.Watch(file1, file2, load, filestamp.Options[T]{
		// Interval 0: the files are looked at on every handshake, which costs far more
		// than the stat, so a rotated certificate serves the very next connection.
		Failed: func(err error) {
			log.Warn("tls_reload_failed", "what", what, "files", names, "err", err,
				"detail", "the files changed on disk but did not load; still using the previous version")
		},
		Reloaded: func(T, T) { log.Info("tls_reloaded", "what", what, "files", names) },
	})
}
