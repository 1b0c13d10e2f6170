package main

// Random byte mutations of valid material: no panic, and only the verdicts a user can be given
// (sealverify's own corpus check; the agreement corpus in tests/verifier compares with sealtrace).

import (
	"crypto/ed25519"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRandomMutationsGiveVerdictsNotPanics(t *testing.T) {
	key := newKey("k")
	pub := key.Public().(ed25519.PublicKey)
	trust := []*TrustedKey{{Key: pub, ID: KeyID(pub)}}
	dir := t.TempDir()
	docs, _ := os.ReadFile("../docs/ledger.md")
	formats := map[string]struct {
		seed  []byte
		name  string
		check func(path string) (*Verdict, error)
	}{
		"container": {buildContainer(t, sampleTensors, nil, key), "m.seal", func(p string) (*Verdict, error) {
			return VerifyContainer(p, ContainerOptions{Trust: trust, MemoryBudget: defaultMemoryBudget})
		}},
		"audit": {[]byte(strings.Join(buildLog(t, key, nil), "")), "l.jsonl", func(p string) (*Verdict, error) {
			return VerifyAuditLog(p, AuditOptions{Trust: trust, MemoryBudget: defaultMemoryBudget})
		}},
	}
	if len(docs) > 0 {
		formats["proof"] = struct {
			seed  []byte
			name  string
			check func(path string) (*Verdict, error)
		}{[]byte(docBlock(t, string(docs), "The inclusion proof of leaf 1 in the tree of 3")), "p.json",
			func(p string) (*Verdict, error) { return VerifyProof(p, trust) }}
	}
	r := rand.New(rand.NewSource(18))
	for name, f := range formats {
		path := filepath.Join(dir, f.name)
		for i := 0; i < 600; i++ {
			data := append([]byte(nil), f.seed...)
			switch i % 3 {
			case 0:
				data[r.Intn(len(data))] ^= byte(1 + r.Intn(255))
			case 1:
				data = data[:r.Intn(len(data))]
			default:
				for k := 0; k < 8; k++ {
					const tokens = "{}[],:\"\\0e.-"
					data[r.Intn(len(data))] = tokens[r.Intn(len(tokens))]
				}
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			v, err := f.check(path)
			if err == nil && v.ExitCode != ExitOK && v.ExitCode != ExitFailed {
				t.Fatalf("%s: exit %d", name, v.ExitCode)
			}
		}
	}
}
