package main

// The worked example of docs/ledger.md, checked as a third party would: with the public key and
// nothing else.

import (
	"crypto/ed25519"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docBlock returns the fenced block that follows the first line containing marker.
func docBlock(t testing.TB, doc, marker string) string {
	t.Helper()
	at := strings.Index(doc, marker)
	if at < 0 {
		t.Fatalf("docs/ledger.md has no %q", marker)
	}
	rest := doc[at:]
	start := strings.Index(rest, "```json\n") + len("```json\n")
	end := strings.Index(rest[start:], "```")
	return rest[start : start+end]
}

func TestTheLedgerDocsWorkedExampleVerifies(t *testing.T) {
	text, err := os.ReadFile("../docs/ledger.md")
	if err != nil {
		t.Skip("docs/ledger.md not beside the verifier")
	}
	doc := string(text)
	key := newKey("sealtrace ledger example key") // seed = SHA-256 of that text, as the doc says
	pub := key.Public().(ed25519.PublicKey)
	if KeyID(pub) != "406fd6e17d4cf77d" {
		t.Fatalf("key id %s", KeyID(pub))
	}
	dir := t.TempDir()
	trust, err := LoadTrust([]string{writeKey(t, dir, "example.pub", key)})
	if err != nil {
		t.Fatal(err)
	}
	for name, marker := range map[string]string{
		"inclusion.json":   "The inclusion proof of leaf 1 in the tree of 3",
		"consistency.json": "The consistency proof from the tree head of size 2",
	} {
		path := filepath.Join(dir, name)
		body := docBlock(t, doc, marker)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		v, err := VerifyProof(path, trust)
		if err != nil || !v.OK {
			t.Fatalf("%s: %v %+v", name, err, v)
		}
		// The same proof with its audit path changed does not hold.
		if err := os.WriteFile(path, []byte(strings.Replace(body, `"6a12bc`, `"7a12bc`, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		if v, err := VerifyProof(path, trust); err != nil || v.ExitCode != ExitFailed || v.Failures[0].Where != "proof" {
			t.Fatalf("%s with an edited path: %v %+v", name, err, v)
		}
	}
	other, _ := LoadTrust([]string{writeKey(t, dir, "other.pub", newKey("other"))})
	path := filepath.Join(dir, "inclusion.json")
	os.WriteFile(path, []byte(docBlock(t, doc, "The inclusion proof of leaf 1 in the tree of 3")), 0o644)
	if v, _ := VerifyProof(path, other); v.ExitCode != ExitFailed || v.Failures[0].Where != "tree_head" {
		t.Fatalf("an untrusted key: %+v", v)
	}
}

func TestRFC9162Paths(t *testing.T) {
	// Trees of 1..9 leaves built here; every inclusion and consistency proof checked.
	leaves := make([][]byte, 9)
	for i := range leaves {
		h := sha256Sum(append([]byte{0}, byte(i)))
		leaves[i] = h
	}
	var mth func(l [][]byte) []byte
	mth = func(l [][]byte) []byte {
		if len(l) == 1 {
			return l[0]
		}
		k := 1
		for k*2 < len(l) {
			k *= 2
		}
		return nodeHash(mth(l[:k]), mth(l[k:]))
	}
	var path func(m int, l [][]byte) [][]byte
	path = func(m int, l [][]byte) [][]byte {
		if len(l) == 1 {
			return nil
		}
		k := 1
		for k*2 < len(l) {
			k *= 2
		}
		if m < k {
			return append(path(m, l[:k]), mth(l[k:]))
		}
		return append(path(m-k, l[k:]), mth(l[:k]))
	}
	var subproof func(m int, l [][]byte, b bool) [][]byte
	subproof = func(m int, l [][]byte, b bool) [][]byte {
		if m == len(l) {
			if b {
				return nil
			}
			return [][]byte{mth(l)}
		}
		k := 1
		for k*2 < len(l) {
			k *= 2
		}
		if m <= k {
			return append(subproof(m, l[:k], b), mth(l[k:]))
		}
		return append(subproof(m-k, l[k:], false), mth(l[:k]))
	}
	for n := 1; n <= len(leaves); n++ {
		root := mth(leaves[:n])
		for i := 0; i < n; i++ {
			if !inclusionHolds(uint64(i), uint64(n), leaves[i], path(i, leaves[:n]), root) {
				t.Errorf("inclusion %d of %d", i, n)
			}
			if inclusionHolds(uint64(i), uint64(n), leaves[(i+1)%9], path(i, leaves[:n]), root) && n > 1 {
				t.Errorf("inclusion of another leaf %d of %d", i, n)
			}
		}
		for m := 1; m <= n; m++ {
			if !consistencyHolds(uint64(m), uint64(n), mth(leaves[:m]), root, subproof(m, leaves[:n], true)) {
				t.Errorf("consistency %d -> %d", m, n)
			}
		}
	}
}

func sha256Sum(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

func FuzzProofDocument(f *testing.F) {
	if text, err := os.ReadFile("../docs/ledger.md"); err == nil {
		f.Add([]byte(docBlock(f, string(text), "The inclusion proof of leaf 1 in the tree of 3")))
	}
	f.Add([]byte(`{"format":"sealtrace.ledger.consistency-proof.v1"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "p.json")
		os.WriteFile(path, data, 0o644)
		VerifyProof(path, []*TrustedKey{{Key: newKey("k").Public().(ed25519.PublicKey), ID: "406fd6e17d4cf77d"}})
	})
}
