package tlstest_test

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/internal/tlsx/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func parse(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM block", file)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestIssue(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	if ca.CertFile() != filepath.Join(dir, "ca.pem") {
		t.Errorf("CertFile = %s, want %s", ca.CertFile(), filepath.Join(dir, "ca.pem"))
	}
	if !parse(t, ca.CertFile()).IsCA {
		t.Error("ca.pem is not a CA certificate")
	}
	certFile, keyFile := ca.Issue(t, "node", "127.0.0.1", "::1", "node.internal")
	if certFile != filepath.Join(dir, "node.pem") || keyFile != filepath.Join(dir, "node-key.pem") {
		t.Errorf("Issue wrote %s and %s", certFile, keyFile)
	}
	cert := parse(t, certFile)
	if !slices.Equal(cert.DNSNames, []string{"node.internal"}) {
		t.Errorf("DNSNames = %v", cert.DNSNames)
	}
	if len(cert.IPAddresses) != 2 || !cert.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) || !cert.IPAddresses[1].Equal(net.ParseIP("::1")) {
		t.Errorf("IPAddresses = %v", cert.IPAddresses)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "node.internal", KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("verify for usage %v: %v", usage, err)
		}
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, err %v; want mode 0600", fi, err)
	}
}

func TestReissueChangesSerialAndStamp(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	certFile, _ := ca.Issue(t, "node", "127.0.0.1")
	before, err := os.Stat(certFile)
	if err != nil {
		t.Fatal(err)
	}
	first := parse(t, certFile).SerialNumber
	ca.Issue(t, "node", "127.0.0.1")
	after, err := os.Stat(certFile)
	if err != nil {
		t.Fatal(err)
	}
	if parse(t, certFile).SerialNumber.Cmp(first) == 0 {
		t.Error("reissued certificate kept its serial")
	}
	if !after.ModTime().After(before.ModTime()) {
		t.Errorf("mtime did not move forward: %v then %v", before.ModTime(), after.ModTime())
	}
}
