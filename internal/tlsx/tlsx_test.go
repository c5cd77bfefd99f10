package tlsx_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/tlsx"
	"github.com/switchyard/switchyard/internal/tlsx/tlstest"
)

// serve runs a TLS server on a loopback port until the test ends. For each connection it
// completes the handshake and answers one line: the serial number of the client's
// certificate, or "none". It returns the address to dial.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln := tls.NewListener(ln, cfg)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return // listener closed
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				tc := c.(*tls.Conn)
				if tc.Handshake() != nil {
					return
				}
				reply := "none"
				if peers := tc.ConnectionState().PeerCertificates; len(peers) > 0 {
					reply = peers[0].SerialNumber.String()
				}
				_, _ = c.Write([]byte(reply + "\n"))
			})
		}
	})
	t.Cleanup(func() {
		_ = tln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// result is what a client saw of one connection.
type result struct {
	serverSerial *big.Int // serial of the certificate the server presented
	reply        string   // the server's answer: the client certificate's serial or "none"
}

// dial connects, completes the handshake and reads the server's one-line answer. With
// TLS 1.3 the server checks the client's certificate after the client's handshake has
// returned, so a rejected client certificate shows up as an error reading the answer.
func dial(t *testing.T, addr string, cfg *tls.Config) (result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := c.(*tls.Conn)
	line, err := bufio.NewReader(tc).ReadString('\n')
	if err != nil {
		return result{}, err
	}
	return result{
		serverSerial: tc.ConnectionState().PeerCertificates[0].SerialNumber,
		reply:        strings.TrimSuffix(line, "\n"),
	}, nil
}

func mustDial(t *testing.T, addr string, cfg *tls.Config) result {
	t.Helper()
	r, err := dial(t, addr, cfg)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	return r
}

func serialOf(t *testing.T, certFile string) *big.Int {
	t.Helper()
	data, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM block", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	tlstest.Replace(t, to, data)
}

// logRecorder is a slog handler that keeps the levels of the records, for asserting on
// warnings. The server logs from its own goroutines, hence the lock.
type logRecorder struct {
	mu     sync.Mutex
	levels []slog.Level
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.levels = append(r.levels, rec.Level)
	return nil
}

func (r *logRecorder) count(level slog.Level) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.levels {
		if l == level {
			n++
		}
	}
	return n
}

func mustServerConfig(t *testing.T, o tlsx.ServerOptions, log *slog.Logger) *tls.Config {
	t.Helper()
	cfg, err := tlsx.ServerConfig(o, log)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func mustClientConfig(t *testing.T, o tlsx.ClientOptions) *tls.Config {
	t.Helper()
	cfg, err := tlsx.ClientConfig(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestServerHandshakeWithCAFile(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	certFile, keyFile := ca.Issue(t, "server", "127.0.0.1")
	srv := mustServerConfig(t, tlsx.ServerOptions{CertFile: certFile, KeyFile: keyFile}, nil)
	if srv.MinVersion != tls.VersionTLS12 {
		t.Errorf("MinVersion = %#x, want TLS 1.2", srv.MinVersion)
	}
	addr := serve(t, srv)

	cli := mustClientConfig(t, tlsx.ClientOptions{CAFile: ca.CertFile()})
	r := mustDial(t, addr, cli)
	if want := serialOf(t, certFile); r.serverSerial.Cmp(want) != 0 {
		t.Errorf("server presented serial %v, want %v", r.serverSerial, want)
	}
	if r.reply != "none" {
		t.Errorf("server saw a client certificate (%s) though none was configured", r.reply)
	}

	// Verification is real: the system roots do not know the throwaway CA.
	plain := mustClientConfig(t, tlsx.ClientOptions{})
	var unknown x509.UnknownAuthorityError
	if _, err := dial(t, addr, plain); !errors.As(err, &unknown) {
		t.Errorf("dial with system roots: err = %v, want an unknown authority error", err)
	}
}

func TestServerNameOverride(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	certFile, keyFile := ca.Issue(t, "server", "switchyard.internal") // not valid for 127.0.0.1
	srv := mustServerConfig(t, tlsx.ServerOptions{CertFile: certFile, KeyFile: keyFile}, nil)
	addr := serve(t, srv)

	byAddr := mustClientConfig(t, tlsx.ClientOptions{CAFile: ca.CertFile()})
	var hostErr x509.HostnameError
	if _, err := dial(t, addr, byAddr); !errors.As(err, &hostErr) {
		t.Errorf("dial by address: err = %v, want a hostname mismatch", err)
	}
	byName := mustClientConfig(t, tlsx.ClientOptions{CAFile: ca.CertFile(), ServerName: "switchyard.internal"})
	mustDial(t, addr, byName)
}

func TestServerCertificateRotation(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	certFile, keyFile := ca.Issue(t, "server", "127.0.0.1")
	logs := &logRecorder{}
	srv := mustServerConfig(t, tlsx.ServerOptions{CertFile: certFile, KeyFile: keyFile}, slog.New(logs))
	addr := serve(t, srv)
	cli := mustClientConfig(t, tlsx.ClientOptions{CAFile: ca.CertFile()})

	first := serialOf(t, certFile)
	if got := mustDial(t, addr, cli).serverSerial; got.Cmp(first) != 0 {
		t.Fatalf("before rotation: serial %v, want %v", got, first)
	}
	ca.Issue(t, "server", "127.0.0.1") // same paths, new key and serial
	second := serialOf(t, certFile)
	if second.Cmp(first) == 0 {
		t.Fatal("test setup: the reissued certificate kept its serial")
	}
	for range 2 { // the second connection uses the already reloaded pair
		if got := mustDial(t, addr, cli).serverSerial; got.Cmp(second) != 0 {
			t.Fatalf("after rotation: serial %v, want the new %v", got, second)
		}
	}
	if n := logs.count(slog.LevelWarn); n != 0 {
		t.Errorf("%d warnings for a clean rotation, want 0", n)
	}
	if n := logs.count(slog.LevelInfo); n != 1 {
		t.Errorf("%d reload messages, want 1", n)
	}
}

func TestServerBrokenRewriteKeepsCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	certFile, keyFile := ca.Issue(t, "server", "127.0.0.1")
	logs := &logRecorder{}
	srv := mustServerConfig(t, tlsx.ServerOptions{CertFile: certFile, KeyFile: keyFile}, slog.New(logs))
	addr := serve(t, srv)
	cli := mustClientConfig(t, tlsx.ClientOptions{CAFile: ca.CertFile()})
	good := serialOf(t, certFile)

	tlstest.Replace(t, certFile, []byte("not a certificate\n"))
	for range 3 {
		if got := mustDial(t, addr, cli).serverSerial; got.Cmp(good) != 0 {
			t.Fatalf("after a broken rewrite: serial %v, want the previous %v", got, good)
		}
	}
	if n := logs.count(slog.LevelWarn); n != 1 {
		t.Errorf("%d warnings after one broken rewrite and three connections, want 1", n)
	}

	// A second broken version is a new change and is reported again.
	tlstest.Replace(t, certFile, []byte("still not a certificate\n"))
	if got := mustDial(t, addr, cli).serverSerial; got.Cmp(good) != 0 {
		t.Fatalf("after a second broken rewrite: serial %v, want %v", got, good)
	}
	if n := logs.count(slog.LevelWarn); n != 2 {
		t.Errorf("%d warnings after two broken rewrites, want 2", n)
	}

	// Half a rotation: a new certificate next to the old key does not load; once the
	// matching key arrives the new pair is served.
	staging := t.TempDir()
	newCert, newKey := tlstest.NewCA(t, staging).Issue(t, "server", "127.0.0.1")
	cli2 := mustClientConfig(t, tlsx.ClientOptions{CAFile: filepath.Join(staging, "ca.pem")})
	copyFile(t, newCert, certFile)
	if got := mustDial(t, addr, cli).serverSerial; got.Cmp(good) != 0 {
		t.Fatalf("new certificate with the old key: serial %v, want the previous %v", got, good)
	}
	copyFile(t, newKey, keyFile)
	if got, want := mustDial(t, addr, cli2).serverSerial, serialOf(t, newCert); got.Cmp(want) != 0 {
		t.Fatalf("after the key arrived: serial %v, want %v", got, want)
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	certFile, keyFile := ca.Issue(t, "server", "127.0.0.1")
	srv := mustServerConfig(t, tlsx.ServerOptions{CertFile: certFile, KeyFile: keyFile, ClientCAFile: ca.CertFile()}, nil)
	addr := serve(t, srv)

	anonymous := mustClientConfig(t, tlsx.ClientOptions{CAFile: ca.CertFile()})
	if r, err := dial(t, addr, anonymous); err == nil {
		t.Fatalf("client without a certificate was served (reply %q)", r.reply)
	}

	clientCert, clientKey := ca.Issue(t, "client")
	withCert := mustClientConfig(t, tlsx.ClientOptions{CAFile: ca.CertFile(), CertFile: clientCert, KeyFile: clientKey})
	if r, want := mustDial(t, addr, withCert), serialOf(t, clientCert); r.reply != want.String() {
		t.Errorf("server saw client serial %q, want %v", r.reply, want)
	}

	// A certificate from another CA is refused.
	other := t.TempDir()
	strangerCert, strangerKey := tlstest.NewCA(t, other).Issue(t, "client")
	stranger := mustClientConfig(t, tlsx.ClientOptions{CAFile: ca.CertFile(), CertFile: strangerCert, KeyFile: strangerKey})
	if r, err := dial(t, addr, stranger); err == nil {
		t.Fatalf("client with a certificate from an unknown CA was served (reply %q)", r.reply)
	}
}

func TestClientCertificateRotation(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	certFile, keyFile := ca.Issue(t, "server", "127.0.0.1")
	srv := mustServerConfig(t, tlsx.ServerOptions{CertFile: certFile, KeyFile: keyFile, ClientCAFile: ca.CertFile()}, nil)
	addr := serve(t, srv)
	clientCert, clientKey := ca.Issue(t, "client")
	cli := mustClientConfig(t, tlsx.ClientOptions{CAFile: ca.CertFile(), CertFile: clientCert, KeyFile: clientKey})

	first := serialOf(t, clientCert)
	if r := mustDial(t, addr, cli); r.reply != first.String() {
		t.Fatalf("before rotation: server saw client serial %s, want %v", r.reply, first)
	}
	ca.Issue(t, "client")
	second := serialOf(t, clientCert)
	if second.Cmp(first) == 0 {
		t.Fatal("test setup: the reissued certificate kept its serial")
	}
	if r := mustDial(t, addr, cli); r.reply != second.String() {
		t.Fatalf("after rotation: server saw client serial %s, want the new %v", r.reply, second)
	}

	// A broken rewrite keeps the last good client certificate.
	tlstest.Replace(t, clientKey, []byte("not a key\n"))
	if r := mustDial(t, addr, cli); r.reply != second.String() {
		t.Fatalf("after a broken rewrite: server saw client serial %s, want %v", r.reply, second)
	}
}

func TestClientCARotation(t *testing.T) {
	dir := t.TempDir()
	oldCA := tlstest.NewCA(t, dir)
	certFile, keyFile := oldCA.Issue(t, "server", "127.0.0.1")
	clientCAFile := filepath.Join(t.TempDir(), "clients.pem")
	copyFile(t, oldCA.CertFile(), clientCAFile)
	logs := &logRecorder{}
	srv := mustServerConfig(t, tlsx.ServerOptions{CertFile: certFile, KeyFile: keyFile, ClientCAFile: clientCAFile}, slog.New(logs))
	addr := serve(t, srv)

	oldCert, oldKey := oldCA.Issue(t, "old-client")
	oldClient := mustClientConfig(t, tlsx.ClientOptions{CAFile: oldCA.CertFile(), CertFile: oldCert, KeyFile: oldKey})
	newCADir := t.TempDir()
	newCA := tlstest.NewCA(t, newCADir)
	newCert, newKey := newCA.Issue(t, "new-client")
	newClient := mustClientConfig(t, tlsx.ClientOptions{CAFile: oldCA.CertFile(), CertFile: newCert, KeyFile: newKey})

	mustDial(t, addr, oldClient)
	if _, err := dial(t, addr, newClient); err == nil {
		t.Fatal("client of the new CA served before the bundle changed")
	}
	copyFile(t, newCA.CertFile(), clientCAFile)
	mustDial(t, addr, newClient)
	if _, err := dial(t, addr, oldClient); err == nil {
		t.Fatal("client of the old CA still served after the bundle no longer holds it")
	}

	// A broken bundle keeps the last good one.
	tlstest.Replace(t, clientCAFile, []byte("garbage\n"))
	mustDial(t, addr, newClient)
	if n := logs.count(slog.LevelWarn); n != 1 {
		t.Errorf("%d warnings after a broken bundle, want 1", n)
	}
}

// TestConcurrentHandshakesDuringRotation runs handshakes from several goroutines while the
// certificate is rotated, for the race detector, and checks that every connection
// succeeded with one of the issued certificates.
func TestConcurrentHandshakesDuringRotation(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	certFile, keyFile := ca.Issue(t, "server", "127.0.0.1")
	srv := mustServerConfig(t, tlsx.ServerOptions{CertFile: certFile, KeyFile: keyFile}, nil)
	addr := serve(t, srv)
	cli := mustClientConfig(t, tlsx.ClientOptions{CAFile: ca.CertFile()})

	issued := map[string]bool{serialOf(t, certFile).String(): true}
	type outcome struct {
		serial string
		err    error
	}
	outcomes := make(chan outcome, 1024)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			// Dial until the rotations are over, and once more after.
			for stop := false; !stop; {
				select {
				case <-done:
					stop = true
				default:
				}
				r, err := dial(t, addr, cli)
				o := outcome{err: err}
				if err == nil {
					o.serial = r.serverSerial.String()
				}
				select {
				case outcomes <- o:
				default: // enough collected; keep dialling for the race detector
				}
			}
		})
	}
	for range 5 {
		ca.Issue(t, "server", "127.0.0.1")
		issued[serialOf(t, certFile).String()] = true
	}
	close(done)
	wg.Wait()
	close(outcomes)
	n := 0
	for o := range outcomes {
		n++
		switch {
		case o.err != nil:
			t.Errorf("handshake during rotation: %v", o.err)
		case !issued[o.serial]:
			t.Errorf("served serial %s was never issued", o.serial)
		}
	}
	if n < 4 {
		t.Errorf("%d connections, want at least one per dialer", n)
	}
}

func TestNoTLS(t *testing.T) {
	cfg, err := tlsx.ServerConfig(tlsx.ServerOptions{}, nil)
	if cfg != nil || err != nil {
		t.Errorf("ServerConfig(empty) = %v, %v; want nil, nil", cfg, err)
	}
	cli, err := tlsx.ClientConfig(tlsx.ClientOptions{}, nil)
	if err != nil || cli == nil {
		t.Fatalf("ClientConfig(empty) = %v, %v; want a config", cli, err)
	}
	if cli.RootCAs != nil || cli.GetClientCertificate != nil || cli.MinVersion != tls.VersionTLS12 {
		t.Errorf("ClientConfig(empty): RootCAs %v, client cert callback set %v, MinVersion %#x; want system roots, none, TLS 1.2",
			cli.RootCAs, cli.GetClientCertificate != nil, cli.MinVersion)
	}
}

func TestErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	certFile, keyFile := ca.Issue(t, "a", "127.0.0.1")
	otherCert, _ := ca.Issue(t, "b", "127.0.0.1")
	missing := filepath.Join(dir, "missing.pem")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	server := func(o tlsx.ServerOptions) func() error {
		return func() error { _, err := tlsx.ServerConfig(o, nil); return err }
	}
	client := func(o tlsx.ClientOptions) func() error {
		return func() error { _, err := tlsx.ClientConfig(o, nil); return err }
	}
	for _, tc := range []struct {
		name     string
		call     func() error
		want     []string // substrings of the message
		notExist bool     // the error wraps fs.ErrNotExist
	}{
		{"cert without key", server(tlsx.ServerOptions{CertFile: certFile}), []string{"--tls-cert-file", "--tls-key-file"}, false},
		{"key without cert", server(tlsx.ServerOptions{KeyFile: keyFile}), []string{"--tls-cert-file", "--tls-key-file"}, false},
		{"client CA without pair", server(tlsx.ServerOptions{ClientCAFile: ca.CertFile()}), []string{"--tls-client-ca-file", "--tls-cert-file"}, false},
		{"missing cert", server(tlsx.ServerOptions{CertFile: missing, KeyFile: keyFile}), []string{"--tls-cert-file"}, true},
		{"missing key", server(tlsx.ServerOptions{CertFile: certFile, KeyFile: missing}), []string{"--tls-key-file"}, true},
		{"mismatched pair", server(tlsx.ServerOptions{CertFile: otherCert, KeyFile: keyFile}), []string{"--tls-cert-file", "--tls-key-file"}, false},
		{"missing client CA", server(tlsx.ServerOptions{CertFile: certFile, KeyFile: keyFile, ClientCAFile: missing}), []string{"--tls-client-ca-file"}, true},
		{"client CA not PEM", server(tlsx.ServerOptions{CertFile: certFile, KeyFile: keyFile, ClientCAFile: notPEM}), []string{"--tls-client-ca-file", notPEM}, false},
		{"missing CA", client(tlsx.ClientOptions{CAFile: missing}), []string{"--tls-ca-file"}, true},
		{"CA not PEM", client(tlsx.ClientOptions{CAFile: notPEM}), []string{"--tls-ca-file"}, false},
		{"client cert without key", client(tlsx.ClientOptions{CertFile: certFile}), []string{"--tls-client-cert-file", "--tls-client-key-file"}, false},
		{"client key without cert", client(tlsx.ClientOptions{KeyFile: keyFile}), []string{"--tls-client-cert-file", "--tls-client-key-file"}, false},
		{"missing client cert", client(tlsx.ClientOptions{CertFile: missing, KeyFile: keyFile}), []string{"--tls-client-cert-file"}, true},
		{"missing client key", client(tlsx.ClientOptions{CertFile: certFile, KeyFile: missing}), []string{"--tls-client-key-file"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil {
				t.Fatal("no error")
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
