package main

// Ed25519 keys as `sealtrace keygen` writes them: PEM, SubjectPublicKeyInfo for a public key,
// PKCS#8 for a private key (sealverify only ever needs public keys). A key id is the first 16
// hex digits of sha256 over the raw 32-byte public key.

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
)

// TrustedKey is a public key given with --trust.
type TrustedKey struct {
	Path string
	Key  ed25519.PublicKey
	ID   string
}

// KeyID is the key id of a raw public key.
func KeyID(pub []byte) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:])[:16]
}

// LoadPublicKey reads a PEM public key file (at most 64 KiB).
func LoadPublicKey(path string) (*TrustedKey, error) {
	data, err := readRegular(path, "public key", 64*1024)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, badInput("%s: not a PEM file (expected a public key from sealtrace keygen)", path)
	}
	var parsed interface{}
	switch block.Type {
	case "PUBLIC KEY":
		parsed, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "PRIVATE KEY":
		// A private key names its public key (sealtrace accepts KEY.pem where KEY.pub is asked).
		var private interface{}
		private, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		if k, ok := private.(ed25519.PrivateKey); ok && err == nil {
			parsed = k.Public()
		}
	default:
		return nil, badInput("%s: a PEM %q, not a PUBLIC KEY (give the .pub file sealtrace keygen wrote)", path, block.Type)
	}
	if err != nil {
		return nil, badInput("%s: not a readable key (%v)", path, err)
	}
	pub, ok := parsed.(ed25519.PublicKey)
	if !ok || len(pub) != ed25519.PublicKeySize {
		return nil, badInput("%s: not an Ed25519 public key", path)
	}
	return &TrustedKey{Path: path, Key: pub, ID: KeyID(pub)}, nil
}

// LoadTrust reads every --trust key.
func LoadTrust(paths []string) ([]*TrustedKey, error) {
	var keys []*TrustedKey
	for _, p := range paths {
		k, err := LoadPublicKey(p)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// verifyHexDigest checks an Ed25519 signature over the ASCII bytes of a lowercase hex digest,
// the convention of every sealtrace signature.
func verifyHexDigest(pub []byte, hexDigest string, sig []byte) bool {
	if len(pub) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize {
		return false
	}
	return ed25519.Verify(ed25519.PublicKey(pub), []byte(hexDigest), sig)
}

// trustedKeyFor returns the trusted key whose key itself equals pub (trust compares keys,
// not ids).
func trustedKeyFor(trust []*TrustedKey, pub []byte) *TrustedKey {
	for _, k := range trust {
		if bytes.Equal(k.Key, pub) {
			return k
		}
	}
	return nil
}

// trustedKeyByID returns the trusted key with this key id.
func trustedKeyByID(trust []*TrustedKey, id string) *TrustedKey {
	for _, k := range trust {
		if k.ID == id {
			return k
		}
	}
	return nil
}

func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
