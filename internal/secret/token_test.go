package secret_test

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/internal/filestamp"
	"github.com/switchyard/switchyard/internal/secret"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// replace swaps path for a new file holding data (write elsewhere, rename over), with a
// modification time later than the old file's so the change is visible without sleeping.
func replace(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	bumpMtime(t, path, tmp)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// bumpMtime sets target's modification time one second after old's, if old exists.
func bumpMtime(t *testing.T, old, target string) {
	t.Helper()
	fi, err := os.Stat(old)
	if err != nil {
		return
	}
	later := fi.ModTime().Add(time.Second)
	if err := os.Chtimes(target, later, later); err != nil {
		t.Fatal(err)
	}
}

// settle lets the file check interval pass, so that the next use looks at the file. The
// tests that call it run in a synctest bubble: the time is virtual and nobody waits.
func settle() { time.Sleep(filestamp.DefaultInterval) }

func newToken(t *testing.T, literal, file string, log *slog.Logger) *secret.Token {
	t.Helper()
	tok, err := secret.NewToken(literal, file, log)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func check(tok *secret.Token, header string) bool { return tok.Check([]byte(header)) }

// warnings counts warning records; the lock is for TestConcurrentUse.
type warnings struct {
	mu sync.Mutex
	n  int
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnings) WithGroup(string) slog.Handler                { return w }

func (w *warnings) Handle(context.Context, slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	return nil
}

func (w *warnings) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func TestLiteral(t *testing.T) {
	tok := newToken(t, "s3cret", "", nil)
	if !tok.Configured() || tok.Value() != "s3cret" {
		t.Fatalf("Configured %v, Value %q; want true, s3cret", tok.Configured(), tok.Value())
	}
	for header, want := range map[string]bool{
		"Bearer s3cret":  true,
		"bearer s3cret":  true, // the scheme is case-insensitive
		"BEARER s3cret":  true,
		"Bearer s3cre":   false,
		"Bearer s3cret ": false,
		"Bearer s3cretx": false,
		"Bearer S3CRET":  false, // the token is not
		"Bearer ":        false,
		"Bearer":         false,
		"s3cret":         false,
		"Basic s3cret":   false,
		"Bearers3cret":   false,
		"":               false,
	} {
		if got := check(tok, header); got != want {
			t.Errorf("Check(%q) = %v, want %v", header, got, want)
		}
	}
	if tok.Check(nil) {
		t.Error("Check(nil) = true for a configured token")
	}
}

func TestLiteralIsTrimmed(t *testing.T) {
	tok := newToken(t, " s3cret\n", "", nil)
	if tok.Value() != "s3cret" || !check(tok, "Bearer s3cret") {
		t.Errorf("Value %q; want the trimmed s3cret to be accepted", tok.Value())
	}
}

func TestNotConfigured(t *testing.T) {
	tok := newToken(t, "", "", nil)
	if tok.Configured() || tok.Value() != "" {
		t.Errorf("Configured %v, Value %q; want false, empty", tok.Configured(), tok.Value())
	}
	for _, h := range []string{"", "Bearer anything", "garbage"} {
		if !check(tok, h) {
			t.Errorf("Check(%q) = false without a configured token", h)
		}
	}
	var none *secret.Token
	if none.Configured() || !none.Check(nil) || none.Value() != "" {
		t.Error("a nil *Token should behave as not configured")
	}
}

func TestFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	replace(t, file, "from-file\n")
	tok := newToken(t, "", file, nil)
	if !tok.Configured() || tok.Value() != "from-file" {
		t.Fatalf("Configured %v, Value %q; want true, from-file", tok.Configured(), tok.Value())
	}
	if !check(tok, "Bearer from-file") || check(tok, "Bearer from-file\n") || check(tok, "Bearer other") {
		t.Error("file token: wrong answers for the right, newline-suffixed or wrong token")
	}
}

func TestFileRotated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "token")
		replace(t, file, "old-token\n")
		tok := newToken(t, "", file, nil)
		if !check(tok, "Bearer old-token") {
			t.Fatal("initial token rejected")
		}
		replace(t, file, "new-token\n") // same size: the rename (new inode) and later mtime show it
		settle()
		if !check(tok, "Bearer new-token") {
			t.Error("rotated token rejected")
		}
		if check(tok, "Bearer old-token") {
			t.Error("old token still accepted after rotation")
		}
		if tok.Value() != "new-token" {
			t.Errorf("Value = %q, want new-token", tok.Value())
		}
	})
}

func TestFileRewrittenInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "token")
		replace(t, file, "aaaa")
		tok := newToken(t, "", file, nil)
		before, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		// Same inode, same size: only the modification time tells.
		if err := os.WriteFile(file, []byte("bbbb"), 0o600); err != nil {
			t.Fatal(err)
		}
		later := before.ModTime().Add(time.Second)
		if err := os.Chtimes(file, later, later); err != nil {
			t.Fatal(err)
		}
		settle()
		if tok.Value() != "bbbb" {
			t.Errorf("Value = %q after an in-place rewrite, want bbbb", tok.Value())
		}
	})
}

// TestKubernetesSymlinkSwap mimics a Secret volume: token -> ..data/token, ..data -> a
// timestamped directory that is replaced by re-pointing ..data. The new file has the same
// size and modification time as the old one, so only the inode reveals the change.
func TestKubernetesSymlinkSwap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if runtime.GOOS == "windows" {
			t.Skip("inode comparison is for Unix")
		}
		dir := t.TempDir()
		stamp := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		version := func(name, value string) {
			if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(dir, name, "token")
			if err := os.WriteFile(f, []byte(value), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(f, stamp, stamp); err != nil {
				t.Fatal(err)
			}
		}
		point := func(name string) { // atomically re-point ..data, as the kubelet does
			tmp := filepath.Join(dir, "..data_tmp")
			if err := os.Symlink(name, tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
				t.Fatal(err)
			}
		}
		version("..2026_01_02_v1", "token-one")
		point("..2026_01_02_v1")
		file := filepath.Join(dir, "token")
		if err := os.Symlink(filepath.Join("..data", "token"), file); err != nil {
			t.Fatal(err)
		}
		tok := newToken(t, "", file, nil)
		if tok.Value() != "token-one" {
			t.Fatalf("Value = %q, want token-one", tok.Value())
		}

		version("..2026_01_02_v2", "token-two")
		point("..2026_01_02_v2")
		if err := os.RemoveAll(filepath.Join(dir, "..2026_01_02_v1")); err != nil {
			t.Fatal(err)
		}
		settle()
		if !check(tok, "Bearer token-two") || check(tok, "Bearer token-one") {
			t.Errorf("after the swap: Value %q; want token-two accepted and token-one rejected", tok.Value())
		}
	})
}

func TestFileEmptiedKeepsLastToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "token")
		replace(t, file, "keep-me\n")
		log := &warnings{}
		tok := newToken(t, "", file, slog.New(log))

		replace(t, file, "\n")
		for range 3 {
			settle()
			if !check(tok, "Bearer keep-me") {
				t.Fatal("token lost after the file was emptied")
			}
		}
		if n := log.count(); n != 1 {
			t.Errorf("%d warnings after one bad change and three checks, want 1", n)
		}

		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		settle()
		if !check(tok, "Bearer keep-me") {
			t.Fatal("token lost after the file was removed")
		}
		if n := log.count(); n != 2 {
			t.Errorf("%d warnings after a second bad change, want 2", n)
		}

		replace(t, file, "back-again\n")
		settle()
		if !check(tok, "Bearer back-again") || check(tok, "Bearer keep-me") {
			t.Errorf("after the file came back: Value %q, want back-again only", tok.Value())
		}
	})
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	replace(t, good, "tok")
	empty := filepath.Join(dir, "empty")
	replace(t, empty, " \n")
	twoLines := filepath.Join(dir, "two-lines")
	replace(t, twoLines, "one\ntwo\n")
	missing := filepath.Join(dir, "missing")

	for _, tc := range []struct {
		name, literal, file string
		want                []string
		notExist            bool
	}{
		{"both set", "tok", good, []string{"--control-token", "--control-token-file"}, false},
		{"missing file", "", missing, []string{"--control-token-file", missing}, true},
		{"empty file", "", empty, []string{"--control-token-file", empty, "empty"}, false},
		{"two lines", "", twoLines, []string{"--control-token-file", twoLines}, false},
		{"blank literal", "  ", "", []string{"--control-token"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := secret.NewToken(tc.literal, tc.file, nil)
			if err == nil {
				t.Fatalf("no error; token configured %v", tok.Configured())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if got := errors.Is(err, fs.ErrNotExist); got != tc.notExist {
				t.Errorf("errors.Is(%q, fs.ErrNotExist) = %v, want %v", err, got, tc.notExist)
			}
		})
	}
}

func TestCheckDoesNotAllocate(t *testing.T) {
	tok := newToken(t, "s3cret", "", nil)
	header := []byte("Bearer s3cret")
	if n := testing.AllocsPerRun(100, func() {
		if !tok.Check(header) {
			t.Fatal("rejected")
		}
	}); n != 0 {
		t.Errorf("Check with a literal token: %v allocations per call, want 0", n)
	}
	file := filepath.Join(t.TempDir(), "token")
	replace(t, file, "s3cret\n")
	fromFile := newToken(t, "", file, nil)
	if n := testing.AllocsPerRun(100, func() {
		if !fromFile.Check(header) {
			t.Fatal("rejected")
		}
	}); n != 0 {
		t.Errorf("Check with a file token: %v allocations per call, want 0", n)
	}
}

// TestConcurrentUse checks and reads the token from several goroutines while the file is
// rotated, for the race detector: every observed value must be one that was written, and
// the last one must win. Each round rotates the file, lets the check interval pass
// (virtual time) and has four goroutines use the token at once, the first use of the
// round reloading it while the others read.
func TestConcurrentUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "token")
		replace(t, file, "token-0")
		log := &warnings{}
		tok := newToken(t, "", file, slog.New(log))
		const rotations = 20
		written := map[string]bool{"token-0": true}
		for i := 1; i <= rotations; i++ {
			written["token-"+string(rune('a'+i))] = true
		}

		seen := make(chan string, 4*100*rotations)
		for i := 1; i <= rotations; i++ {
			replace(t, file, "token-"+string(rune('a'+i)))
			settle()
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for range 100 {
						v := tok.Value()
						_ = tok.Check([]byte("Bearer " + v))
						seen <- v
					}
				})
			}
			wg.Wait()
		}
		close(seen)
		for v := range seen {
			if !written[v] {
				t.Errorf("observed token %q that was never written", v)
			}
		}
		last := "token-" + string(rune('a'+rotations))
		if !check(tok, "Bearer "+last) {
			t.Errorf("after the rotations: Value %q, want %q", tok.Value(), last)
		}
		if n := log.count(); n != 0 {
			t.Errorf("%d warnings for atomic rotations, want 0", n)
		}
	})
}
