package testenv

import (
	"net"
	"path/filepath"
	"testing"
)

// TLSFiles are the PEM files of a throwaway CA and a serving certificate it signed.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
}

// WriteServerTLS makes a new CA and a serving certificate for ips and dnsNames signed by it, and
// writes them as ca.crt, tls.crt and tls.key (the names of a cert-manager Secret) into a new
// temporary directory of t.
func WriteServerTLS(t testing.TB, ips []net.IP, dnsNames ...string) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	f := TLSFiles{CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	f.Rewrite(t, ips, dnsNames...)
	return f
}

// Rewrite replaces the files with those of another new CA and a certificate it signed, as a
// renewal with a new issuer would.
func (f TLSFiles) Rewrite(t testing.TB, ips []net.IP, dnsNames ...string) {
	t.Helper()
	ca, err := newCertAuthority()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.issue("edgedrain-nats", nil, ips, dnsNames)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFiles(map[string][]byte{f.CAFile: ca.certPEM, f.CertFile: certPEM, f.KeyFile: keyPEM}); err != nil {
		t.Fatal(err)
	}
}
