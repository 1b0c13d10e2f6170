package main

// Audit logs written here from docs/audit-log.md and its schema, then verified.

import (
	"crypto/ed25519"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func tensorValue(name, digest string, withSample bool) map[string]interface{} {
	v := map[string]interface{}{"name": name, "kind": "tensor", "dtype": "<f4", "shape": []int{2}, "digest": digest}
	if withSample {
		v["sample"] = []interface{}{0.1, -2.5}
		v["stats"] = map[string]interface{}{"min": -2.5, "max": 0.1, "mean": -1.2, "nan": 0, "inf": 0}
	}
	return v
}

// buildLog returns the lines of a log: header, two steps (one in a subgraph), footer.
func buildLog(t testing.TB, signer ed25519.PrivateKey, edit func([]map[string]interface{})) []string {
	dx, dh, dy := strings.Repeat("1", 64), strings.Repeat("2", 64), strings.Repeat("3", 64)
	records := []map[string]interface{}{
		{"type": "header", "format": AuditFormats[0], "run_id": strings.Repeat("a", 32), "started": "2025-01-01T00:00:00.000000Z",
			"sealtrace_version": "test", "backend": map[string]interface{}{"name": "reference", "version": "1", "per_step": true},
			"host": map[string]interface{}{"platform": "", "python": "", "numpy": "", "blas": map[string]interface{}{},
				"cpu":     map[string]interface{}{"machine": "x86_64", "model": nil, "flags": []string{}},
				"threads": map[string]interface{}{"cpu_count": 2, "usable_cpus": 2, "env": map[string]string{}}},
			"model":       map[string]interface{}{"kind": "unknown", "path": nil, "sha256": nil, "container_digest": nil},
			"plan_digest": strings.Repeat("4", 64), "sample_size": 2, "inputs": []interface{}{tensorValue("x", dx, true)}},
		{"type": "step", "path": []string{}, "step": 0, "name": "relu", "op_type": "Relu", "domain": "", "since_version": 14,
			"inputs": []interface{}{map[string]interface{}{"name": "x", "digest": dx}}, "outputs": []interface{}{tensorValue("h", dh, true)}},
		{"type": "step", "path": []string{"if", "then_branch", "0"}, "step": 0, "name": "neg", "op_type": "Neg", "domain": "",
			"since_version": 13, "inputs": []interface{}{map[string]interface{}{"name": "x", "digest": strings.Repeat("9", 64)}},
			"outputs": []interface{}{tensorValue("y", dy, true)}},
		{"type": "footer", "finished": "2025-01-01T00:00:01.000000Z", "steps": 2,
			"outputs": []interface{}{tensorValue("y", dy, false)}},
	}
	if edit != nil {
		edit(records)
	}
	prev := zeroDigest
	digestOf := sha
	if records[0]["digest_algorithm"] == "blake3" {
		digestOf = Blake3Hex
	}
	var lines []string
	for i, r := range records {
		if _, ok := r["seq"]; !ok {
			r["seq"] = i
		}
		r["prev"] = prev
		field := "digest"
		if r["type"] == "footer" {
			field = "chain_head"
		}
		digest := digestOf(canonicalOf(t, r))
		r[field] = digest
		if field == "chain_head" && signer != nil {
			pub := signer.Public().(ed25519.PublicKey)
			r["signature"] = map[string]interface{}{"algorithm": "ed25519", "key_id": KeyID(pub),
				"signature": hex.EncodeToString(ed25519.Sign(signer, []byte(digest)))}
		}
		lines = append(lines, string(canonicalOf(t, r))+"\n")
		prev = digest
	}
	return lines
}

func verifyLog(t *testing.T, text string, trust []*TrustedKey) (*Verdict, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.jsonl")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return VerifyAuditLog(path, AuditOptions{Trust: trust, MemoryBudget: defaultMemoryBudget})
}

func failedLine(t *testing.T, v *Verdict, err error) int {
	t.Helper()
	if err != nil {
		t.Fatalf("bad input: %v", err)
	}
	if v.OK {
		return 0
	}
	return v.Failures[0].Where.(int)
}

func TestALogWrittenFromTheDocsVerifies(t *testing.T) {
	key := newKey("logger")
	pub := key.Public().(ed25519.PublicKey)
	lines := buildLog(t, key, nil)
	trust := []*TrustedKey{{Key: pub, ID: KeyID(pub)}}
	if v, err := verifyLog(t, strings.Join(lines, ""), trust); err != nil || !v.OK {
		t.Fatalf("%v %+v", err, v)
	}
	other := newKey("other").Public().(ed25519.PublicKey)
	if v, err := verifyLog(t, strings.Join(lines, ""), []*TrustedKey{{Key: other, ID: KeyID(other)}}); failedLine(t, v, err) != 4 {
		t.Errorf("another key: %+v", v)
	}
	// Without a key the signature is not checked (it carries none): a forged one passes.
	forged := strings.Replace(lines[3], `"signature":"`, `"signature":"00`, 1)
	forged = forged[:strings.Index(forged, `"signature":"00`)+len(`"signature":"`)] + strings.Repeat("0", 128) + `"}` + forged[strings.LastIndex(forged, `,"steps"`):]
	if v, err := verifyLog(t, strings.Join(append(lines[:3:3], forged), ""), nil); err != nil || !v.OK {
		t.Errorf("forged signature without --trust: %v %+v", err, v)
	}
}

func TestTheFirstBadLineIsNamed(t *testing.T) {
	lines := buildLog(t, nil, nil)
	join := func(ls ...string) string { return strings.Join(ls, "") }
	cases := map[string]struct {
		text string
		line int
	}{
		"swapped":      {join(lines[0], lines[2], lines[1], lines[3]), 2},
		"removed":      {join(lines[0], lines[2], lines[3]), 2},
		"duplicated":   {join(lines[0], lines[1], lines[1], lines[2], lines[3]), 3},
		"no footer":    {join(lines[0], lines[1], lines[2]), 4},
		"cut mid-line": {join(lines[0], lines[1][:20]), 2},
		"no final \\n": {join(lines[0], lines[1], lines[2], strings.TrimSuffix(lines[3], "\n")), 4},
		"after footer": {join(lines[0], lines[1], lines[2], lines[3], lines[1]), 5},
		"crlf":         {join(lines[0], strings.Replace(lines[1], "\n", "\r\n", 1), lines[2], lines[3]), 2},
		"edited":       {join(lines[0], strings.Replace(lines[1], `"Relu"`, `"Relx"`, 1), lines[2], lines[3]), 2},
		"blank line":   {join(lines[0], "\n", lines[1], lines[2], lines[3]), 2},
		"step count":   {join(buildLog(t, nil, func(r []map[string]interface{}) { r[3]["steps"] = 3 })...), 4},
		"input digest": {join(buildLog(t, nil, func(r []map[string]interface{}) {
			r[0]["inputs"] = []interface{}{tensorValue("x", strings.Repeat("5", 64), true)}
		})...), 2},
		"output digest": {join(buildLog(t, nil, func(r []map[string]interface{}) {
			r[3]["outputs"] = []interface{}{tensorValue("h", strings.Repeat("5", 64), false)}
		})...), 4},
		"schema":           {join(buildLog(t, nil, func(r []map[string]interface{}) { r[1]["extra"] = 1 })...), 2},
		"header not first": {join(buildLog(t, nil, func(r []map[string]interface{}) { r[0]["type"] = "step" })...), 1},
		"deep":             {join(buildLog(t, nil, func(r []map[string]interface{}) { r[1]["name"] = nested(40) })...), 2},
	}
	for name, c := range cases {
		v, err := verifyLog(t, c.text, nil)
		if got := failedLine(t, v, err); got != c.line {
			t.Errorf("%s: line %d, want %d (%+v)", name, got, c.line, v.Failures)
		}
	}
	// A subgraph step's inputs are not cross-checked (the 9s above); a v3 header is bad input,
	// and so is a v2 header naming an algorithm not known.
	v3 := buildLog(t, nil, func(r []map[string]interface{}) { r[0]["format"] = "sealtrace.audit.v3" })
	if _, err := verifyLog(t, strings.Join(v3, ""), nil); err == nil {
		t.Error("a v3 log read as a v1 one")
	}
	md5 := buildLog(t, nil, func(r []map[string]interface{}) {
		r[0]["format"], r[0]["digest_algorithm"] = "sealtrace.audit.v2", "md5"
	})
	if _, err := verifyLog(t, strings.Join(md5, ""), nil); err == nil {
		t.Error("a log of an unknown digest algorithm was read")
	}
	if _, err := verifyLog(t, "", nil); err == nil {
		t.Error("an empty file is not an audit log")
	}
}

// A v2 log names its digest algorithm: BLAKE3 chains verify with BLAKE3; the algorithm edited, or
// a v1 header naming one, or a v2 header naming none, is a failed check on line 1.
func TestBlake3Logs(t *testing.T) {
	blake := func(r []map[string]interface{}) {
		r[0]["format"], r[0]["digest_algorithm"] = "sealtrace.audit.v2", "blake3"
	}
	lines := buildLog(t, nil, blake)
	if v, err := verifyLog(t, strings.Join(lines, ""), nil); err != nil || !v.OK {
		t.Fatalf("%v %+v", err, v)
	}
	edited := strings.Replace(lines[0], `"blake3"`, `"sha256"`, 1) + strings.Join(lines[1:], "")
	cases := map[string]string{
		"edited":     edited,
		"v1 names":   strings.Join(buildLog(t, nil, func(r []map[string]interface{}) { r[0]["digest_algorithm"] = "sha256" }), ""),
		"v2 no name": strings.Join(buildLog(t, nil, func(r []map[string]interface{}) { r[0]["format"] = "sealtrace.audit.v2" }), ""),
	}
	for name, text := range cases {
		v, err := verifyLog(t, text, nil)
		if got := failedLine(t, v, err); got != 1 {
			t.Errorf("%s: line %d, want 1", name, got)
		}
	}
	v2sha := buildLog(t, nil, func(r []map[string]interface{}) {
		r[0]["format"], r[0]["digest_algorithm"] = "sealtrace.audit.v2", "sha256"
	})
	if v, err := verifyLog(t, strings.Join(v2sha, ""), nil); err != nil || !v.OK {
		t.Errorf("v2 sha256: %v %+v", err, v)
	}
}

func nested(n int) interface{} {
	var v interface{} = 1
	for i := 0; i < n; i++ {
		v = []interface{}{v}
	}
	return v
}

func FuzzAuditLog(f *testing.F) {
	f.Add([]byte(strings.Join(buildLog(f, newKey("k"), nil), "")))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f.jsonl")
		os.WriteFile(path, data, 0o644)
		VerifyAuditLog(path, AuditOptions{MemoryBudget: defaultMemoryBudget})
	})
}
