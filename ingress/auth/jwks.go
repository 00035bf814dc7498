package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
)

// jwk is the part of a JSON Web Key that toolbus reads.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// readJWKS reads the RSA and P-256 EC public keys of a JWKS file, by kid.
func readJWKS(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: jwks: %w", err)
	}
	keys, err := parseJWKS(b)
	if err != nil {
		return nil, fmt.Errorf("auth: jwks %s: %w", path, err)
	}
	return keys, nil
}

func parseJWKS(b []byte) (map[string]any, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, err
	}
	out := map[string]any{}
	for i, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		var pub any
		var err error
		switch k.Kty {
		case "RSA":
			pub, err = rsaKey(k)
		case "EC":
			pub, err = ecKey(k)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("key %d (%q): %w", i, k.Kid, err)
		}
		if _, dup := out[k.Kid]; dup {
			return nil, fmt.Errorf("key %d: kid %q appears twice", i, k.Kid)
		}
		out[k.Kid] = pub
	}
	if len(out) == 0 {
		return nil, errors.New("no RSA or EC signing key")
	}
	return out, nil
}

func rsaKey(k jwk) (*rsa.PublicKey, error) {
	n, err := base64.RawURLEncoding.DecodeString(k.N)
	if err != nil || len(n) == 0 {
		return nil, errors.New("bad RSA modulus n")
	}
	e, err := base64.RawURLEncoding.DecodeString(k.E)
	if err != nil || len(e) == 0 || len(e) > 4 {
		return nil, errors.New("bad RSA exponent e")
	}
	exp := int(new(big.Int).SetBytes(e).Int64())
	return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: exp}, nil
}

func ecKey(k jwk) (*ecdsa.PublicKey, error) {
	if k.Crv != "P-256" {
		return nil, fmt.Errorf("EC curve %q is not P-256", k.Crv)
	}
	x, errX := base64.RawURLEncoding.DecodeString(k.X)
	y, errY := base64.RawURLEncoding.DecodeString(k.Y)
	if errX != nil || errY != nil || len(x) > 32 || len(y) > 32 {
		return nil, errors.New("bad EC coordinates")
	}
	point := make([]byte, 65)
	point[0] = 4
	copy(point[1+32-len(x):33], x)
	copy(point[33+32-len(y):], y)
	return ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
}
