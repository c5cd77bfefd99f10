// Package tlstest makes throwaway certificates for tests: a certificate authority and
// certificates it issues, written as PEM files the way an operator would hand them to a
// binary's --tls-* flags. Everything is generated with the standard library (ECDSA P-256),
// so tests need no fixtures and nothing expires between runs.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a throwaway certificate authority whose certificate is written to ca.pem in the
// directory given to NewCA.
type CA struct {
	dir      string
	certFile string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	pool     *x509.CertPool
}

// NewCA creates a certificate authority and writes its certificate to dir/ca.pem.
func NewCA(tb testing.TB, dir string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(tb),
		Subject:               pkix.Name{CommonName: "tlstest CA"},
		NotBefore:             validFrom,
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("tlstest: create CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("tlstest: parse CA certificate: %v", err)
	}
	ca := &CA{dir: dir, certFile: filepath.Join(dir, "ca.pem"), cert: cert, key: key, pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	Replace(tb, ca.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return ca
}

// CertFile is the path of the CA's certificate (PEM).
func (ca *CA) CertFile() string { return ca.certFile }

// Pool is a certificate pool holding only this CA's certificate.
func (ca *CA) Pool() *x509.CertPool { return ca.pool }

// Issue writes dir/name.pem and dir/name-key.pem and returns their paths. The certificate
// has common name name, is valid for hosts (IP addresses become IP SANs, anything else a
// DNS SAN) and may be used both by servers and by clients. Calling Issue again with the
// same name replaces the pair with a new key and serial number, as a certificate rotation
// would (see Replace for how the files are swapped).
func (ca *CA) Issue(tb testing.TB, name string, hosts ...string) (certFile, keyFile string) {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(tb),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    validFrom,
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatalf("tlstest: issue %s: %v", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatalf("tlstest: marshal key for %s: %v", name, err)
	}
	certFile = filepath.Join(ca.dir, name+".pem")
	keyFile = filepath.Join(ca.dir, name+"-key.pem")
	Replace(tb, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	Replace(tb, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return certFile, keyFile
}

// Replace writes data to path the way a rotation should: into a temporary file (mode 0600)
// in the same directory that is then renamed over path, so a reader never sees a half-written
// file. When path already existed, the new file's modification time is made later than
// the old one's, so that code watching mtime and size sees the change even when the clock
// has not ticked since the previous write and the size is the same (no sleeping needed).
func Replace(tb testing.TB, path string, data []byte) {
	tb.Helper()
	old, oldErr := os.Stat(path)
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		tb.Fatalf("tlstest: %v", err)
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil && oldErr == nil {
		var fi os.FileInfo
		if fi, err = os.Stat(tmp.Name()); err == nil && !fi.ModTime().After(old.ModTime()) {
			later := old.ModTime().Add(time.Second)
			err = os.Chtimes(tmp.Name(), later, later)
		}
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		tb.Fatalf("tlstest: replace %s: %v", path, err)
	}
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("tlstest: generate key: %v", err)
	}
	return key
}

func newSerial(tb testing.TB) *big.Int {
	tb.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		tb.Fatalf("tlstest: serial: %v", err)
	}
	return n.Add(n, big.NewInt(1)) // serials must be positive
}

// validFrom starts every certificate's validity well before 2000-01-01, the clock of a
// testing/synctest bubble, so handshakes inside a bubble verify too.
var validFrom = time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC)
