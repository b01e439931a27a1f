package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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

// pki is one cluster's key material: a CA that signs the API server's and
// the fault proxy's serving certificates and the API server's client
// certificate for kubelets, and the service-account key pair.
type pki struct {
	caFile, serverCert, serverKey, saKey, saPub string
	kubeletClientCert, kubeletClientKey         string
	caPEM                                       []byte
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	return key, der, err
}

// makePKI writes the files into dir; the serving certificate also names
// serverIPs. Certificates last a week: clusters are for tests and live
// minutes.
func makePKI(dir, name string, serverIPs []string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caKey, _, err := newKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name + "-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	serverKey, serverKeyDER, err := newKey()
	if err != nil {
		return nil, err
	}
	server := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	for _, ip := range serverIPs {
		server.IPAddresses = append(server.IPAddresses, net.ParseIP(ip))
	}
	serverDER, err := x509.CreateCertificate(rand.Reader, server, ca, &serverKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	// What the API server shows a kubelet (logs, exec): the kubelet's
	// webhook authorizer asks the API server, which lets system:masters.
	kubeletClientKey, kubeletClientKeyDER, err := newKey()
	if err != nil {
		return nil, err
	}
	kubeletClient := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	kubeletClientDER, err := x509.CreateCertificate(rand.Reader, kubeletClient, ca, &kubeletClientKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	_, saKeyDER, err := newKey()
	if err != nil {
		return nil, err
	}
	saKey, err := x509.ParseECPrivateKey(saKeyDER)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	p := &pki{
		caFile:            filepath.Join(dir, "ca.crt"),
		serverCert:        filepath.Join(dir, "server.crt"),
		serverKey:         filepath.Join(dir, "server.key"),
		saKey:             filepath.Join(dir, "sa.key"),
		saPub:             filepath.Join(dir, "sa.pub"),
		kubeletClientCert: filepath.Join(dir, "kubelet-client.crt"),
		kubeletClientKey:  filepath.Join(dir, "kubelet-client.key"),
		caPEM:             pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
	}
	for _, f := range []struct {
		path, kind string
		der        []byte
	}{
		{p.caFile, "CERTIFICATE", caDER},
		{p.serverCert, "CERTIFICATE", serverDER},
		{p.serverKey, "EC PRIVATE KEY", serverKeyDER},
		{p.saKey, "EC PRIVATE KEY", saKeyDER},
		{p.saPub, "PUBLIC KEY", saPubDER},
		{p.kubeletClientCert, "CERTIFICATE", kubeletClientDER},
		{p.kubeletClientKey, "EC PRIVATE KEY", kubeletClientKeyDER},
	} {
		if err := writePEM(f.path, f.kind, f.der); err != nil {
			return nil, fmt.Errorf("writing %s: %w", f.path, err)
		}
	}
	return p, nil
}
