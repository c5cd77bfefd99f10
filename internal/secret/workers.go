package secret

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"unicode"

	"github.com/switchyard/switchyard/internal/filestamp"
)

const flagWorkers = "--worker-credentials-file"

// AnyWorker is the worker id of a credential any pylon may present.
const AnyWorker = "*"

// Workers are per-pylon credentials read from a file: each pylon (worker) registers with
// its own bearer token, so one leaked token admits one inference server id and rotating it
// touches one pylon. The file holds one credential per line, "<inference-server-id>
// <token>", where the id "*" admits any pylon; blank lines and lines starting with '#' are
// ignored, and an id may have several tokens (to rotate one without a gap). The file is
// checked at most once a second, on use (one os.Stat), and read again when it changed: a
// rotated credential takes effect within a second. A file that has become unreadable or
// invalid keeps the last good credentials (logged as a warning).
// Workers is safe for concurrent use; a nil *Workers is not configured.
type Workers struct {
	file *filestamp.Watched[*workerSet]
}

// workerSet is one version of the file: tokens by worker id.
type workerSet struct {
	tokens map[string][][]byte
	count  int
}

// NewWorkers reads the credentials file; "" means none configured (nil, nil). The file
// must exist and be valid when NewWorkers is called. log may be nil.
func NewWorkers(file string, log *slog.Logger) (*Workers, error) {
	if file == "" {
		return nil, nil //nolint:nilnil // not configured is no error
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w, err := filestamp.Watch(file, "", func() (*workerSet, error) { return readWorkers(file) }, filestamp.Options[*workerSet]{
		Interval: filestamp.DefaultInterval,
		Failed: func(err error) {
			log.Warn("worker_credentials_reload_failed", "file", file, "err", err,
				"detail", "the file changed but is not usable; still using the previous credentials")
		},
		Reloaded: func(_, next *workerSet) {
			log.Info("worker_credentials_reloaded", "file", file, "credentials", next.count)
		},
	})
	if err != nil {
		return nil, err //nolint:wrapcheck // readWorkers names the flag and the file
	}
	return &Workers{file: w}, nil
}

// Configured reports whether a credentials file was given.
func (w *Workers) Configured() bool { return w != nil && w.file != nil }

// Check reports whether authorization, the value of an Authorization header, carries a
// token of worker id (or of any worker): "Bearer <token>". Every listed token of the id and
// of "*" is compared in constant time. False when not configured.
func (w *Workers) Check(id string, authorization []byte) bool {
	if !w.Configured() {
		return false
	}
	if len(authorization) < len(bearer) || !bytes.EqualFold(authorization[:len(bearer)], bearer) {
		return false
	}
	got := authorization[len(bearer):]
	set := w.file.Get()
	ok := 0
	for _, key := range [2]string{id, AnyWorker} {
		for _, tok := range set.tokens[key] {
			ok |= subtle.ConstantTimeCompare(got, tok)
		}
	}
	return ok == 1
}

var errNoCredentials = errors.New("no credentials (want lines of <inference-server-id> <token>)")

func readWorkers(file string) (*workerSet, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flagWorkers, err)
	}
	set, err := parseWorkers(data)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flagWorkers, file, err)
	}
	return set, nil
}

// parseWorkers parses the credentials file's content.
func parseWorkers(data []byte) (*workerSet, error) {
	set := &workerSet{tokens: map[string][][]byte{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want <inference-server-id> <token>, got %d fields", n, len(fields))
		}
		id, tok := fields[0], fields[1]
		if strings.IndexFunc(tok, unicode.IsControl) >= 0 || strings.IndexFunc(id, unicode.IsControl) >= 0 {
			return nil, fmt.Errorf("line %d: %w", n, errBadChar)
		}
		set.tokens[id] = append(set.tokens[id], []byte(tok))
		set.count++
	}
	if err := sc.Err(); err != nil {
		return nil, err //nolint:wrapcheck // a read error of an in-memory buffer (a line too long)
	}
	if set.count == 0 {
		return nil, errNoCredentials
	}
	return set, nil
}
