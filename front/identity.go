package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// The metadata a call gains from the front when the node verifies client certificates
// (etcd's --client-cert-auth): the common name of the client's verified certificate, and
// the key the node gave this front on its stdin, without which the node ignores the name.
// A client's own keys with this prefix never pass (wire.go, passed).
const (
	identityPrefix = "x-ml-front-"
	cnKey          = identityPrefix + "cn"
	keyKey         = identityPrefix + "key"
)

// tlsFiles are etcd's client TLS flags, as the node was given them.
type tlsFiles struct {
	cert, key, ca  string
	clientCertAuth bool
}

// credentials for the client port: the node's certificate; with a trusted CA, client
// certificates are checked against it, and required under --client-cert-auth (as etcd
// and the node's Python front do).
func (t tlsFiles) credentials() (credentials.TransportCredentials, error) {
	pair, err := tls.LoadX509KeyPair(t.cert, t.key)
	if err != nil {
		return nil, fmt.Errorf("--cert-file %s / --key-file %s: %v", t.cert, t.key, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if t.ca != "" {
		pem, err := os.ReadFile(t.ca)
		if err != nil {
			return nil, fmt.Errorf("--trusted-ca-file %s: %v", t.ca, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--trusted-ca-file %s: no PEM certificate in it", t.ca)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	if t.clientCertAuth {
		if t.ca == "" {
			return nil, fmt.Errorf("--client-cert-auth needs --trusted-ca-file")
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(cfg), nil
}

// readKey reads the identity key, the first line of stdin (the node writes it before
// anything else and keeps stdin open).
func readKey(in *bufio.Reader) (string, error) {
	line, err := in.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("no identity key on stdin: %v", err)
	}
	key := strings.TrimSpace(line)
	if key == "" {
		return "", fmt.Errorf("an empty identity key on stdin")
	}
	return key, nil
}

// commonName is the common name of the call's verified client certificate ("" without
// one), as grpc's auth context names it: the leaf of the first verified chain.
func commonName(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return ""
	}
	return info.State.VerifiedChains[0][0].Subject.CommonName
}
