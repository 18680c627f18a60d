package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/sluice-rtm/sluice/client"
)

// tokenEnv is read when --token is not given, so that the token need not
// appear in the process list.
const tokenEnv = "SLUICE_TOKEN"

// connFlags are the flags of pub and sub about how to connect: credentials
// and TLS.
type connFlags struct {
	token         string
	useTLS        bool
	tlsCA         string
	tlsServerName string
}

func (f *connFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.token, "token", "", "authentication `TOKEN` sent in HELLO (default: $"+tokenEnv+")")
	fs.BoolVar(&f.useTLS, "tls", false, "connect with TLS, trusting the system's CAs (implied by --tls-ca and --tls-server-name)")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "connect with TLS, trusting only the CA certificates in PEM `FILE`")
	fs.StringVar(&f.tlsServerName, "tls-server-name", "", "connect with TLS and expect the certificate of `NAME` (default: the host of --server)")
}

// options returns the client options for the flags.
func (f *connFlags) options() ([]client.Option, error) {
	var opts []client.Option
	token := f.token
	if token == "" {
		token = os.Getenv(tokenEnv)
	}
	if token != "" {
		opts = append(opts, client.WithToken([]byte(token)))
	}
	if !f.useTLS && f.tlsCA == "" && f.tlsServerName == "" {
		return opts, nil
	}
	cfg := &tls.Config{ServerName: f.tlsServerName, MinVersion: tls.VersionTLS12}
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, errors.New("--tls-ca: no PEM certificate in " + f.tlsCA)
		}
	}
	return append(opts, client.WithTLS(cfg)), nil
}
