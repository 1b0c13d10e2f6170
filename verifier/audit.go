package main

// `sealverify audit`: docs/audit-log.md, "The chain" and "Verification".

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// AuditFormats are the audit log versions this verifier reads: v1 (sha256) and v2 (the header
// names its digest algorithm).
var AuditFormats = []string{"sealtrace.audit.v1", "sealtrace.audit.v2"}

// logDigest is a log's digest algorithm applied to bytes, as lowercase hex.
type logDigest func([]byte) string

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// logAlgorithms are the digest algorithms a header may name (docs/audit-log.md, "Digest algorithm").
var logAlgorithms = map[string]logDigest{"sha256": sha256Hex, "blake3": Blake3Hex}

// headerAlgorithm: the algorithm line 1 names (check 2 of "Verification"): a header's
// digest_algorithm, sha256 when it has none or is no header; an error for a value not known.
func headerAlgorithm(record *Value) (logDigest, error) {
	if t, _ := record.Get("type").String(); t != "header" || !record.Has("digest_algorithm") {
		return sha256Hex, nil
	}
	if name, ok := record.Get("digest_algorithm").String(); ok {
		if digest, known := logAlgorithms[name]; known {
			return digest, nil
		}
	}
	c, _ := Canonical(record.Get("digest_algorithm"))
	return nil, badInput("audit log digest algorithm %s is not one this verifier knows (sha256, blake3)", string(c))
}

// auditDepth: a line nests lists and objects at most this deep.
const auditDepth = 32

var zeroDigest = strings.Repeat("0", 64)

// AuditOptions are audit verify's options.
type AuditOptions struct {
	Container    string // the model the run used: a container, or an ONNX file
	Trust        []*TrustedKey
	MemoryBudget int64
}

// logLine is one verified record.
type logLine struct {
	number int
	record *Value
}

// VerifyAuditLog checks a log's chain line by line, stopping at the first bad line, then its
// cross-checks, its link to a model and its signature.
func VerifyAuditLog(path string, opts AuditOptions) (*Verdict, error) {
	v, _, err := verifyAuditLines(path, opts)
	return v, err
}

// verifyAuditLines is VerifyAuditLog, with the records it verified (nil when it failed).
func verifyAuditLines(path string, opts AuditOptions) (*Verdict, []logLine, error) {
	data, err := readRegular(path, "audit log", opts.MemoryBudget)
	if err != nil {
		return nil, nil, err
	}
	if len(data) == 0 {
		return nil, nil, badInput("%s: empty file, not an audit log", path)
	}
	v := newVerdict("audit", path)
	lines, err := checkChain(v, data)
	if err != nil {
		return nil, nil, err
	}
	if len(v.Failures) > 0 {
		return v.finish(), nil, nil
	}
	header, footer := lines[0], lines[len(lines)-1]
	runDigest := footer.record.Get("chain_head").Str
	v.Digests["run"] = runDigest
	crossCheck(v, lines)
	if len(v.Failures) == 0 && opts.Container != "" {
		if err := checkModelLink(v, header, opts.Container); err != nil {
			return nil, nil, err
		}
	}
	sig := footer.record.Get("signature")
	if sig != nil {
		keyID := sig.Get("key_id").Str
		signer := Signer{KeyID: keyID}
		if len(opts.Trust) > 0 {
			valid := signatureByTrustedKey(sig, runDigest, opts.Trust)
			signer.Valid, signer.Trusted = &valid, valid
		}
		v.Signers = append(v.Signers, signer)
	}
	if len(v.Failures) == 0 && len(opts.Trust) > 0 {
		switch {
		case sig == nil:
			v.fail("line", footer.number, "the log is not signed, but a trusted key was given")
		case !*v.Signers[0].Valid:
			v.fail("line", footer.number, "the signature over the run digest is not valid for a trusted key (signed by key %s)", sig.Get("key_id").Str)
		}
	}
	steps, _ := footer.record.Get("steps").Int64()
	v.Summary = fmt.Sprintf(", %d records, %d step(s), run digest %s; %s", len(lines), steps, runDigest, signerLine(v.Signers, "signed"))
	if len(v.Failures) > 0 {
		lines = nil
	}
	return v.finish(), lines, nil
}

// signatureByTrustedKey: the footer's signature names a trusted key by its id and verifies
// with that key over the run digest.
func signatureByTrustedKey(sig *Value, runDigest string, trust []*TrustedKey) bool {
	if sig.Get("algorithm").Str != "ed25519" {
		return false
	}
	key := trustedKeyByID(trust, sig.Get("key_id").Str)
	if key == nil {
		return false
	}
	raw, err := hex.DecodeString(sig.Get("signature").Str)
	return err == nil && verifyHexDigest(key.Key, runDigest, raw)
}

// checkChain runs the per-line checks 1-7 of docs/audit-log.md and returns the records.
func checkChain(v *Verdict, data []byte) ([]logLine, error) {
	var lines []logLine
	prev := zeroDigest
	digestOf := logDigest(sha256Hex)
	footerSeen := false
	number := 0
	for pos := 0; pos < len(data); {
		number++
		end := bytes.IndexByte(data[pos:], '\n')
		if end < 0 {
			v.fail("line", number, "incomplete last line: no final newline (the log was cut off while writing)")
			return nil, nil
		}
		text := data[pos : pos+end]
		pos += end + 1
		record, err := ParseJSON(text, auditDepth)
		if err != nil || record.Kind != KindObject {
			v.fail("line", number, "not a JSON object within %d levels of nesting", auditDepth)
			return nil, nil
		}
		canonical, err := Canonical(record)
		if err != nil || !bytes.Equal(canonical, text) {
			v.fail("line", number, "not in canonical JSON form (the line was edited)")
			return nil, nil
		}
		if number == 1 {
			if digestOf, err = headerAlgorithm(record); err != nil {
				return nil, err
			}
		}
		digestField := "digest"
		if t, _ := record.Get("type").String(); t == "footer" {
			digestField = "chain_head"
		}
		stored, _ := record.Get(digestField).String()
		content, _ := Canonical(record.Without(digestField, "signature"))
		if digestOf(content) != stored {
			v.fail("line", number, "%s does not match the record's content (the record was edited)", digestField)
			return nil, nil
		}
		if seq := record.Get("seq"); seq == nil || !seq.isIntegral() || !jsonEqual(seq, &Value{Kind: KindNumber, Num: fmt.Sprint(number - 1), IsInt: true}) {
			v.fail("line", number, "seq is not %d: a record removed, inserted, duplicated or out of order", number-1)
			return nil, nil
		}
		if p, _ := record.Get("prev").String(); p != prev {
			v.fail("line", number, "prev is not the digest of the line before (a record altered and re-digested)")
			return nil, nil
		}
		if footerSeen {
			v.fail("line", number, "a record after the footer")
			return nil, nil
		}
		if number == 1 {
			if t, _ := record.Get("type").String(); t != "header" {
				v.fail("line", number, "line 1 is not a header")
				return nil, nil
			}
			// A header whose chain holds but whose format is not v1 or v2 is a log of another
			// version: bad input, not a failed check.
			if f, ok := record.Get("format").String(); !ok || (f != AuditFormats[0] && f != AuditFormats[1]) {
				shown := "none"
				if ok {
					shown = quoteForMessage(f)
				} else if record.Has("format") {
					c, _ := Canonical(record.Get("format"))
					shown = string(c)
				}
				return nil, badInput("audit log format %s is not one this verifier reads (%s)", shown, strings.Join(AuditFormats, ", "))
			}
		}
		if !auditSchema().Valid(record) {
			v.fail("line", number, "does not follow the audit log schema")
			return nil, nil
		}
		kind := record.Get("type").Str
		if (number == 1) != (kind == "header") {
			if number == 1 {
				v.fail("line", number, "line 1 is not a header")
			} else {
				v.fail("line", number, "a header record after line 1")
			}
			return nil, nil
		}
		footerSeen = kind == "footer"
		prev = stored
		lines = append(lines, logLine{number: number, record: record})
	}
	if !footerSeen {
		v.fail("line", number+1, "truncated after line %d: no footer (the run did not finish, or the tail was removed)", number)
		return nil, nil
	}
	return lines, nil
}

// crossCheck: the footer's step count; top-level step inputs and graph outputs against the
// digests logged where those values were produced (a feed in the header, or an earlier
// top-level step). Values produced nowhere in the log (weights) are not checked.
func crossCheck(v *Verdict, lines []logLine) {
	type produced struct {
		digest *Value
		line   int
	}
	known := map[string]produced{}
	for _, in := range lines[0].record.Get("inputs").Arr {
		known[in.Get("name").Str] = produced{in.Get("digest"), lines[0].number}
	}
	steps := int64(0)
	for _, l := range lines[1 : len(lines)-1] {
		steps++
		if len(l.record.Get("path").Arr) != 0 {
			continue
		}
		for _, in := range l.record.Get("inputs").Arr {
			name := in.Get("name").Str
			p, ok := known[name]
			if name == "" || !ok {
				continue
			}
			if !jsonEqual(p.digest, in.Get("digest")) {
				v.fail("line", l.number, "input %s has a digest other than line %d logged for it", quoteForMessage(name), p.line)
				return
			}
		}
		for _, out := range l.record.Get("outputs").Arr {
			known[out.Get("name").Str] = produced{out.Get("digest"), l.number}
		}
	}
	footer := lines[len(lines)-1]
	if n, _ := footer.record.Get("steps").Rat(); n == nil || n.Cmp(newRat(steps)) != 0 {
		v.fail("line", footer.number, "the footer counts %s steps, the log has %d", footer.record.Get("steps").Num, steps)
		return
	}
	for _, out := range footer.record.Get("outputs").Arr {
		name := out.Get("name").Str
		if p, ok := known[name]; ok && !jsonEqual(p.digest, out.Get("digest")) {
			v.fail("line", footer.number, "output %s: digest differs from line %d", quoteForMessage(name), p.line)
			return
		}
	}
}

// modelIsContainer: whether the model file (a regular file) claims to be a container, by its
// magic or its name; otherwise it is read as an ONNX file.
func modelIsContainer(path string) (bool, error) {
	f, _, err := openRegular(path, "model")
	if err != nil {
		return false, err
	}
	defer f.Close()
	head := make([]byte, len(ContainerMagic))
	n, _ := f.Read(head)
	return ClaimsContainer(path, head[:n]), nil
}

// checkModelLink: the model the header names is the given file (a container by its digest,
// verified in full; any other file by its identity).
func checkModelLink(v *Verdict, header logLine, modelPath string) error {
	model := header.record.Get("model")
	recordedContainer, _ := model.Get("container_digest").String()
	recordedSHA, _ := model.Get("sha256").String()
	isContainer, err := modelIsContainer(modelPath)
	if err != nil {
		return err
	}
	kind := model.Get("kind").Str
	if isContainer {
		cv, err := VerifyContainer(modelPath, ContainerOptions{MemoryBudget: defaultMemoryBudget})
		if err != nil {
			return err
		}
		if !cv.OK {
			for _, f := range cv.Failures {
				v.fail("line", header.number, "the container %s fails its check: %s", modelPath, describe(f))
			}
			return nil
		}
		// A container links a run of a container, or of an artifact bound to it.
		if digest := cv.Digests["container"]; digest != recordedContainer || (kind != "container" && kind != "artifact") {
			v.fail("line", header.number, "recorded from %s, but %s has container digest %s", recordedModel(model), modelPath, digest)
		}
		return nil
	}
	identity, err := OnnxFileIdentity(modelPath, defaultMemoryBudget)
	if err != nil {
		return err
	}
	if identity != recordedSHA || kind == "container" {
		v.fail("line", header.number, "recorded from %s, but %s has ONNX file identity %s", recordedModel(model), modelPath, identity)
	}
	return nil
}

func recordedModel(model *Value) string {
	if d, ok := model.Get("container_digest").String(); ok && model.Get("kind").Str == "container" {
		return "container digest " + d
	}
	if d, ok := model.Get("sha256").String(); ok {
		return "ONNX file sha256 " + d
	}
	return "a model with no digest"
}
