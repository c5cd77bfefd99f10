// Package tlsx builds the TLS configurations of the binaries from the --tls-* flags.
// Certificates and CA bundles are loaded at start, so a bad path or a mismatched pair stops
// the binary at once, and are then re-read whenever their files change on disk, so a
// rotated certificate (cert-manager, a Kubernetes Secret update, a cron job) is used for
// the next new connection without a restart. Connections already open keep the
// certificate they were established with.
package tlsx

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/switchyard/switchyard/internal/filestamp"
)

// Flag names used in error messages, so the operator knows which setting to fix.
const (
	flagCert       = "--tls-cert-file"
	flagKey        = "--tls-key-file"
	flagClientCA   = "--tls-client-ca-file"
	flagCA         = "--tls-ca-file"
	flagClientCert = "--tls-client-cert-file"
	flagClientKey  = "--tls-client-key-file"
)

// ServerOptions are a server's TLS settings.
type ServerOptions struct {
	CertFile, KeyFile string // PEM certificate (chain) and private key; both empty = no TLS
	ClientCAFile      string // optional CA bundle: when set, clients must present a certificate it verifies (mutual TLS)
}

// ServerConfig returns the TLS configuration for a server, or nil, nil when CertFile and
// KeyFile are both empty (plain TCP). Setting only one of the two, setting ClientCAFile
// without them, or a file that cannot be loaded is an error naming the flag.
//
// The certificate is checked for changes on every handshake (os.Stat of both files,
// comparing modification time, size and inode) and re-read when either changed. A new pair
// that fails to load, for instance because the certificate was written before its key,
// leaves the last good pair in use and is logged once as a warning; the next change is
// tried again. With ClientCAFile, the client CA bundle is watched the same way. The
// minimum protocol version is TLS 1.2. log may be nil.
func ServerConfig(o ServerOptions, log *slog.Logger) (*tls.Config, error) {
	if o.CertFile == "" && o.KeyFile == "" {
		if o.ClientCAFile != "" {
			return nil, fmt.Errorf("%s is set but %s and %s are not: mutual TLS needs a server certificate", flagClientCA, flagCert, flagKey)
		}
		return nil, nil
	}
	pair, err := watchKeyPair("certificate", o.CertFile, o.KeyFile, flagCert, flagKey, log)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return pair.Get(), nil
		},
	}
	if o.ClientCAFile == "" {
		return cfg, nil
	}

	// Mutual TLS. The CA pool a server verifies clients with is a field of tls.Config, not
	// a callback, so each version of the bundle gets its own copy of the configuration,
	// which GetConfigForClient hands to the handshake.
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	perBundle, err := newWatched("client CA bundle", log, func() (*tls.Config, error) {
		pool, err := loadPool(o.ClientCAFile, flagClientCA)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		c.ClientCAs = pool
		return c, nil
	}, o.ClientCAFile, "")
	if err != nil {
		return nil, err
	}
	outer := perBundle.Get().Clone() // also usable as is, should a caller bypass the callback
	outer.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return perBundle.Get(), nil
	}
	return outer, nil
}

// ClientOptions are a client's TLS settings.
type ClientOptions struct {
	CAFile            string // CA bundle to verify servers with; empty = the system roots
	CertFile, KeyFile string // optional client certificate for mutual TLS, re-read when it changes
	ServerName        string // optional name to send (SNI) and verify instead of the dialled host
}

// ClientConfig returns the TLS configuration for a client; on success it is never nil.
// Errors name the flag (--tls-ca-file, --tls-client-cert-file, --tls-client-key-file).
// The client certificate, when set, is checked for changes whenever a server asks for it
// and re-read like a server's (see ServerConfig). The CA bundle is read once: Go verifies
// servers against a fixed pool, and swapping it per connection would mean replacing the
// library's verification with our own. The minimum protocol version is TLS 1.2. log may
// be nil.
func ClientConfig(o ClientOptions, log *slog.Logger) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	if o.CAFile != "" {
		pool, err := loadPool(o.CAFile, flagCA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if o.CertFile == "" && o.KeyFile == "" {
		return cfg, nil
	}
	pair, err := watchKeyPair("client certificate", o.CertFile, o.KeyFile, flagClientCert, flagClientKey, log)
	if err != nil {
		return nil, err
	}
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return pair.Get(), nil
	}
	return cfg, nil
}

// watchKeyPair loads a certificate and key pair once, failing with the flag names, and
// returns it watched for changes.
func watchKeyPair(what, certFile, keyFile, certFlag, keyFlag string, log *slog.Logger) (*filestamp.Watched[*tls.Certificate], error) {
	switch {
	case certFile == "":
		return nil, fmt.Errorf("%s is set but %s is not: both are needed", keyFlag, certFlag)
	case keyFile == "":
		return nil, fmt.Errorf("%s is set but %s is not: both are needed", certFlag, keyFlag)
	}
	return newWatched(what, log, func() (*tls.Certificate, error) {
		return loadKeyPair(certFile, keyFile, certFlag, keyFlag)
	}, certFile, keyFile)
}

func loadKeyPair(certFile, keyFile, certFlag, keyFlag string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certFlag, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyFlag, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// Parse errors and a key that does not match the certificate concern both files.
		return nil, fmt.Errorf("%s %s and %s %s: %w", certFlag, certFile, keyFlag, keyFile, err)
	}
	return &cert, nil
}

func loadPool(file, flag string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s %s: %w", flag, file, errNoCertificates)
	}
	return pool, nil
}

var errNoCertificates = errors.New("no PEM certificates found")
