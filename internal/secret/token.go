// Package secret holds the bearer token that guards the control plane. The token is given
// on the command line or, better, in a file such as a mounted Kubernetes Secret; a file is
// watched so that a rotated token takes effect without restarting the binary.
package secret

import (
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

const (
	flagLiteral = "--control-token"
	flagFile    = "--control-token-file"
)

var (
	errEmpty   = errors.New("token is empty")
	errBadChar = errors.New("token contains whitespace or control characters")
)

// bearer is the authorization scheme; it is compared case-insensitively, as HTTP
// authentication schemes are.
var bearer = []byte("Bearer ")

// Token is a bearer token given literally or read from a file. The file is checked at
// most once a second (filestamp.DefaultInterval; one os.Stat: modification time, size and
// inode), on use, and read again when it changed: a rotated token takes effect within a
// second. os.Stat follows symbolic links, so the way Kubernetes updates a Secret volume,
// by pointing a symlink at a new directory, shows up as a new inode even when time and
// size are the same. A Token is safe for concurrent use. A nil *Token is not configured.
type Token struct {
	literal *version                     // a literal token
	file    *filestamp.Watched[*version] // a token file
}

// version is one value of the token.
type version struct {
	value string
	raw   []byte // value as bytes, for comparing without converting per request
}

// NewToken returns the token given literally or in file. Both empty means no token is
// configured (every request is allowed); both set is an error. A file must exist and hold
// a token when NewToken is called; surrounding whitespace, such as the trailing newline
// of `echo token > file`, is removed. Later, a file that has become unreadable or empty,
// as can happen for a moment during a rotation, keeps the last good token; that is logged
// once as a warning for each new state of the file. log may be nil.
func NewToken(literal, file string, log *slog.Logger) (*Token, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Token{}
	switch {
	case literal != "" && file != "":
		return nil, fmt.Errorf("%s and %s are both set; use one", flagLiteral, flagFile)
	case literal != "":
		value, err := parse([]byte(literal))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flagLiteral, err)
		}
		t.literal = newVersion(value)
	case file != "":
		w, err := filestamp.Watch(file, "", func() (*version, error) {
			value, err := readToken(file)
			if err != nil {
				return nil, err
			}
			return newVersion(value), nil
		}, filestamp.Options[*version]{
			Interval: filestamp.DefaultInterval,
			Failed: func(err error) {
				log.Warn("control_token_reload_failed", "file", file, "err", err,
					"detail", "the file changed but holds no usable token; still using the previous token")
			},
			Reloaded: func(prev, next *version) {
				if next.value != prev.value {
					log.Info("control_token_reloaded", "file", file)
				}
			},
		})
		if err != nil {
			return nil, err
		}
		t.file = w
	}
	return t, nil
}

func newVersion(value string) *version {
	return &version{value: value, raw: []byte(value)}
}

// Configured reports whether a token was given.
func (t *Token) Configured() bool { return t != nil && (t.literal != nil || t.file != nil) }

// Value returns the current token, re-reading the file first if it changed; "" when not
// configured.
func (t *Token) Value() string {
	if v := t.current(); v != nil {
		return v.value
	}
	return ""
}

// Check reports whether authorization, the value of an Authorization header, carries the
// current token: "Bearer <token>" (the scheme in any case). It is true when no token is
// configured. The token is compared in constant time, so the time taken does not reveal
// how much of a guess was right (only whether its length was). A literal token costs no
// allocation; nor does a file token, which costs one os.Stat at most once a second.
func (t *Token) Check(authorization []byte) bool {
	v := t.current()
	if v == nil {
		return true
	}
	if len(authorization) < len(bearer) || !bytes.EqualFold(authorization[:len(bearer)], bearer) {
		return false
	}
	return subtle.ConstantTimeCompare(authorization[len(bearer):], v.raw) == 1
}

// current returns the token's current version, nil when not configured.
func (t *Token) current() *version {
	switch {
	case t == nil:
		return nil
	case t.file != nil:
		return t.file.Get()
	default:
		return t.literal
	}
}

func readToken(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flagFile, err)
	}
	value, err := parse(data)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", flagFile, file, err)
	}
	return value, nil
}

// parse trims surrounding whitespace and rejects what could never match a header: an
// empty token, or one with whitespace or control characters inside (a file holding two
// lines, say).
func parse(data []byte) (string, error) {
	value := strings.TrimSpace(string(data))
	if value == "" {
		return "", errEmpty
	}
	if strings.IndexFunc(value, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return "", errBadChar
	}
	return value, nil
}
