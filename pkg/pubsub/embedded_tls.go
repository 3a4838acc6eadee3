package pubsub

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/sirupsen/logrus"
)

// serverTLS returns the TLS configuration of the embedded server's client listener, built by
// nats-server's own GenTLSConfig (its minimum version and cipher choice), with a certificate
// that is read again when its files change, so that a renewed Secret is served without a
// restart. It fails, wrapping ErrInvalidConfig, when the files cannot be read or do not hold a
// matching PEM certificate and key.
func serverTLS(certFile, keyFile string, log logrus.FieldLogger) (*tls.Config, error) {
	cfg, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		return nil, fmt.Errorf("embedded nats: TLS certificate %s and key %s: %v: %w", certFile, keyFile, err, ErrInvalidConfig)
	}
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	if err := r.reload(); err != nil { // the same files, read once more to remember their bytes
		return nil, fmt.Errorf("embedded nats: TLS certificate %s and key %s: %v: %w", certFile, keyFile, err, ErrInvalidConfig)
	}
	leaf := r.cert.Leaf
	entry := log.WithFields(logrus.Fields{"cert": certFile, "subject": leaf.Subject.String(), "not_after": leaf.NotAfter})
	if time.Now().After(leaf.NotAfter) {
		entry.Warn("the NATS listener's TLS certificate has expired: clients will refuse it")
	} else {
		entry.Info("NATS listener serves TLS")
	}
	// Go's TLS server asks GetCertificate only when Certificates is empty (or the client sent
	// a server name): empty it so that every handshake sees the current files.
	cfg.Certificates = nil
	cfg.GetCertificate = r.get
	return cfg, nil
}

// certReloader serves a certificate and key from files, reading them again when their bytes
// change. A change that does not load (a half-written or wrong pair) keeps the last good
// certificate and is logged once.
type certReloader struct {
	certFile, keyFile string
	log               logrus.FieldLogger

	mu                sync.Mutex
	cert              *tls.Certificate
	certPEM, keyPEM   []byte // the bytes cert was loaded from
	badCert, badKey   []byte // the bytes that last failed to load
	lastReadErrLogged string
}

// get returns the certificate to serve in a handshake.
func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.reloadLocked(); err != nil && r.cert == nil {
		return nil, err
	}
	return r.cert, nil
}

func (r *certReloader) reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloadLocked()
}

// reloadLocked reads both files and loads them if they changed; r.mu is held.
func (r *certReloader) reloadLocked() error {
	certPEM, err := os.ReadFile(r.certFile)
	if err == nil {
		var keyPEM []byte
		if keyPEM, err = os.ReadFile(r.keyFile); err == nil {
			return r.load(certPEM, keyPEM)
		}
	}
	if r.cert != nil && err.Error() != r.lastReadErrLogged {
		r.lastReadErrLogged = err.Error()
		r.log.WithError(err).Warn("cannot read the NATS listener's TLS certificate again; serving the one loaded before")
	}
	return err
}

// load makes certPEM and keyPEM the served pair unless they are the current or a known bad one.
func (r *certReloader) load(certPEM, keyPEM []byte) error {
	r.lastReadErrLogged = ""
	if bytes.Equal(certPEM, r.certPEM) && bytes.Equal(keyPEM, r.keyPEM) {
		return nil
	}
	if bytes.Equal(certPEM, r.badCert) && bytes.Equal(keyPEM, r.badKey) {
		return nil // already logged
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err == nil {
		cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0])
	}
	if err != nil {
		r.badCert, r.badKey = certPEM, keyPEM
		if r.cert != nil {
			r.log.WithError(err).Warn("the NATS listener's TLS certificate files changed but do not load; serving the one loaded before")
		}
		return err
	}
	if r.cert != nil {
		r.log.WithFields(logrus.Fields{"subject": cert.Leaf.Subject.String(), "not_after": cert.Leaf.NotAfter}).
			Info("NATS listener's TLS certificate renewed")
	}
	r.cert, r.certPEM, r.keyPEM = &cert, certPEM, keyPEM
	r.badCert, r.badKey = nil, nil
	return nil
}
