// Package testcert generates a throw-away certificate authority and a
// server certificate signed by it, for tests of TLS connections. Nothing
// here is meant for production use.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Set is a CA and one server certificate it signed, valid for the DNS
// name ServerName and the IP 127.0.0.1, for one hour.
type Set struct {
	ServerName string
	CAPEM      []byte // the CA certificate, PEM
	CertPEM    []byte // the server certificate, PEM
	KeyPEM     []byte // the server's private key, PEM (PKCS #8)
	Pool       *x509.CertPool
	Server     tls.Certificate
}

// New generates a Set for serverName. Each call creates new keys.
func New(serverName string) (*Set, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testcert: CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice test CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("testcert: CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("testcert: parse CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testcert: server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: serverName},
		DNSNames:     []string{serverName},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("testcert: server certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("testcert: marshal key: %w", err)
	}
	s := &Set{
		ServerName: serverName,
		CAPEM:      pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		CertPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		Pool:       x509.NewCertPool(),
	}
	s.Pool.AddCert(caCert)
	if s.Server, err = tls.X509KeyPair(s.CertPEM, s.KeyPEM); err != nil {
		return nil, fmt.Errorf("testcert: key pair: %w", err)
	}
	return s, nil
}

// ServerConfig returns a TLS configuration serving the certificate.
func (s *Set) ServerConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{s.Server}, MinVersion: tls.VersionTLS12}
}

// ClientConfig returns a TLS configuration that trusts only the CA and
// expects ServerName.
func (s *Set) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: s.Pool, ServerName: s.ServerName, MinVersion: tls.VersionTLS12}
}

// WriteFiles writes ca.pem, cert.pem and key.pem into dir and returns
// their paths.
func (s *Set) WriteFiles(dir string) (ca, cert, key string, err error) {
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for _, f := range []struct {
		path string
		b    []byte
	}{{ca, s.CAPEM}, {cert, s.CertPEM}, {key, s.KeyPEM}} {
		if err = os.WriteFile(f.path, f.b, 0o600); err != nil {
			return "", "", "", fmt.Errorf("testcert: %w", err)
		}
	}
	return ca, cert, key, nil
}
