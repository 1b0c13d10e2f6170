package main

// `sealverify binding`: docs/binding.md. A binding record ties an artifact's digest to a
// container digest; the record lives in a sidecar ARTIFACT.binding.json, or in an ONNX
// artifact's metadata_props["sealtrace.binding"].

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// BindingFormat is the only binding record version this verifier reads.
const BindingFormat = "sealtrace.binding.v1"

const (
	maxBindingRecord = 1 * MiB
	bindingDepth     = 64
	metadataKey      = "sealtrace.binding"
)

// BindingOptions are check-binding's options.
type BindingOptions struct {
	Container    string
	Trust        []*TrustedKey
	MemoryBudget int64
}

var digestScopes = map[string]bool{
	"file": true, "onnx-without-binding": true,
	"file+external-data": true, "onnx-without-binding+external-data": true,
}

// bindingFields: every field a record has, and the type of each (signatures may be absent).
var bindingFields = map[string]Kind{
	"format": KindString, "container_digest": KindString, "artifact": KindObject,
	"transformation": KindString, "backend": KindObject, "options": KindObject,
	"created": KindString, "sealtrace_version": KindString, "signatures": KindArray,
}

// BindingRecord is a record that passed the reader's checks.
type BindingRecord struct {
	doc             *Value
	ContainerDigest string
	ArtifactSHA     string
	Scope           string
	Signatures      []*Value
}

// VerifyBinding checks that an artifact is unmodified, bound to the container, and (with
// trust keys) signed by one of them.
func VerifyBinding(artifact string, opts BindingOptions) (*Verdict, error) {
	data, err := readRegular(artifact, "artifact", opts.MemoryBudget)
	if err != nil {
		return nil, err
	}
	recordText, source, err := locateBindingRecord(artifact, data)
	if err != nil {
		return nil, err
	}
	rec, err := ParseBindingRecord(recordText, source)
	if err != nil {
		return nil, err
	}
	// The container must be a readable container before anything is compared with it.
	cv, err := VerifyContainer(opts.Container, ContainerOptions{MemoryBudget: opts.MemoryBudget})
	if err != nil {
		return nil, err
	}
	v := newVerdict("binding", artifact)
	v.Digests["record"] = rec.Digest()
	v.Digests["container"] = rec.ContainerDigest

	found, why := ArtifactDigest(artifact, data, rec.Scope, opts.MemoryBudget)
	if why != "" {
		v.fail("artifact", "artifact", "artifact modified: %s", why)
	} else {
		v.Digests["artifact"] = found
		if found != rec.ArtifactSHA {
			v.fail("artifact", "artifact", "artifact modified: sha256 %s, the binding says %s", found, rec.ArtifactSHA)
		}
	}
	if !cv.OK {
		for _, f := range cv.Failures {
			v.fail("container", "container", "the container fails its check: %s", describe(f))
		}
	} else if digest := cv.Digests["container"]; digest != rec.ContainerDigest {
		v.fail("container", "container_digest", "bound to another container: %s, not %s (%s)", rec.ContainerDigest, opts.Container, digest)
	}
	recordDigest := rec.Digest()
	trusted := false
	for _, s := range rec.Signatures {
		signer := Signer{KeyID: s.Get("key_id").Str}
		if len(opts.Trust) > 0 {
			valid := signatureByTrustedKey(s, recordDigest, opts.Trust)
			signer.Valid, signer.Trusted = &valid, valid
			trusted = trusted || valid
		}
		v.Signers = append(v.Signers, signer)
	}
	if len(opts.Trust) > 0 {
		if len(rec.Signatures) == 0 {
			v.fail("signature", "signatures", "signature missing: the binding record is not signed")
		} else if !trusted {
			v.fail("signature", "signatures", "signature untrusted or invalid: no signature verifies with a trusted key")
		}
	}
	v.Summary = " (unmodified and bound to " + opts.Container + "); binding " + signerLine(v.Signers, "signed")
	return v.finish(), nil
}

// locateBindingRecord: the sidecar when present, else the ONNX artifact's metadata entry.
func locateBindingRecord(artifact string, data []byte) ([]byte, string, error) {
	sidecar := artifact + ".binding.json"
	if _, err := os.Lstat(sidecar); err == nil || !errors.Is(err, fs.ErrNotExist) {
		text, err := readRegular(sidecar, "binding record", maxBindingRecord)
		return text, sidecar, err
	}
	// Only a readable ONNX model has metadata.
	if fields, err := parseMessage(data); err == nil && IsOnnxModel(data) {
		for _, f := range fields {
			if f.Number != modelMetadata || f.Type != wireBytes {
				continue
			}
			if key, value, err := parseEntry(f.Bytes); err == nil && key == metadataKey {
				if len(value) > maxBindingRecord {
					return nil, "", badInput("%s: the embedded binding record is over %d bytes", artifact, maxBindingRecord)
				}
				return []byte(value), artifact + " (metadata " + metadataKey + ")", nil
			}
		}
	}
	return nil, "", badInput("%s: no binding record (no %s, and no %s metadata entry)", artifact, filepath.Base(sidecar), metadataKey)
}

// ParseBindingRecord reads a record, refusing anything outside docs/binding.md (exit 2).
func ParseBindingRecord(text []byte, source string) (*BindingRecord, error) {
	doc, err := ParseJSON(text, bindingDepth)
	if err != nil {
		return nil, badInput("%s: unreadable binding record (%v)", source, err)
	}
	if doc.Kind != KindObject || doc.Get("format") == nil || doc.Get("format").Kind != KindString || doc.Get("format").Str != BindingFormat {
		return nil, badInput("%s: not a %s record", source, BindingFormat)
	}
	var unknown, missing []string
	for _, m := range doc.Obj {
		if _, ok := bindingFields[m.Key]; !ok {
			unknown = append(unknown, m.Key)
		}
	}
	for name := range bindingFields {
		if !doc.Has(name) && name != "signatures" {
			missing = append(missing, name)
		}
	}
	sort.Strings(unknown)
	sort.Strings(missing)
	if len(unknown) > 0 {
		return nil, badInput("%s: binding record: unknown field(s) %s", source, strings.Join(unknown, ", "))
	}
	if len(missing) > 0 {
		return nil, badInput("%s: binding record: missing field(s) %s", source, strings.Join(missing, ", "))
	}
	for _, m := range doc.Obj {
		if m.Value.Kind != bindingFields[m.Key] {
			return nil, badInput("%s: binding record: %s has the wrong type", source, m.Key)
		}
	}
	if err := checkFields(doc.Get("artifact"), source, "artifact", []string{"name", "sha256", "digest_scope"}); err != nil {
		return nil, err
	}
	if err := checkFields(doc.Get("backend"), source, "backend", []string{"name", "version"}); err != nil {
		return nil, err
	}
	rec := &BindingRecord{
		doc:             doc,
		ContainerDigest: doc.Get("container_digest").Str,
		ArtifactSHA:     doc.Get("artifact").Get("sha256").Str,
		Scope:           doc.Get("artifact").Get("digest_scope").Str,
	}
	if !isLowerHex(rec.ContainerDigest, 64) {
		return nil, badInput("%s: container_digest must be 64 lowercase hex digits", source)
	}
	if !isLowerHex(rec.ArtifactSHA, 64) {
		return nil, badInput("%s: artifact.sha256 must be 64 lowercase hex digits", source)
	}
	if !digestScopes[rec.Scope] {
		return nil, badInput("%s: unknown artifact digest scope %s", source, quoteForMessage(rec.Scope))
	}
	if sigs := doc.Get("signatures"); sigs != nil {
		for _, s := range sigs.Arr {
			if err := checkFields(s, source, "signature", []string{"algorithm", "key_id", "signature"}); err != nil {
				return nil, err
			}
			rec.Signatures = append(rec.Signatures, s)
		}
	}
	if _, err := Canonical(doc); err != nil {
		return nil, badInput("%s: binding record: %v", source, err)
	}
	return rec, nil
}

// checkFields: an object with exactly these string fields.
func checkFields(obj *Value, source, what string, names []string) error {
	if obj.Kind != KindObject {
		return badInput("%s: binding record: %s must be an object", source, what)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
		f := obj.Get(n)
		if f == nil {
			return badInput("%s: binding record: %s: missing field %s", source, what, n)
		}
		if f.Kind != KindString {
			return badInput("%s: binding record: %s.%s must be a string", source, what, n)
		}
	}
	for _, m := range obj.Obj {
		if !want[m.Key] {
			return badInput("%s: binding record: %s: unknown field %s", source, what, quoteForMessage(m.Key))
		}
	}
	return nil
}

// Digest is the record digest: sha256 over the canonical JSON of every field but signatures.
func (r *BindingRecord) Digest() string {
	text, _ := Canonical(r.doc.Without("signatures"))
	sum := sha256.Sum256(text)
	return hex.EncodeToString(sum[:])
}

// withoutBindingEntry returns a serialized ModelProto without its top-level metadata_props
// entries keyed sealtrace.binding: every other byte stays as it is.
func withoutBindingEntry(model []byte) ([]byte, error) {
	fields, err := parseMessage(model)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(model))
	for _, f := range fields {
		if f.Number == modelMetadata && f.Type == wireBytes {
			key, _, err := parseEntry(f.Bytes)
			if err != nil {
				return nil, err
			}
			if key == metadataKey {
				continue
			}
		}
		out = append(out, model[f.Start:f.End]...)
	}
	return out, nil
}

// ArtifactDigest computes the artifact digest of docs/binding.md for a scope; a non-empty
// reason says why the artifact no longer has one (a failed check).
func ArtifactDigest(path string, data []byte, scope string, budget int64) (string, string) {
	model := data
	if strings.HasPrefix(scope, "onnx-without-binding") {
		if !IsOnnxModel(data) {
			return "", "no longer a readable ONNX model"
		}
		stripped, err := withoutBindingEntry(data)
		if err != nil {
			return "", "no longer a readable ONNX model"
		}
		model = stripped
	}
	sum := sha256.Sum256(model)
	digest := hex.EncodeToString(sum[:])
	external, err := externalDataFiles(path, data)
	if err != nil {
		return "", err.Error()
	}
	if !strings.HasSuffix(scope, "+external-data") {
		if len(external) > 0 {
			return "", "the artifact refers to external data, which a record of scope " + scope + " does not cover (bind it again)"
		}
		return digest, ""
	}
	files, err := filesDigest(filepath.Dir(path), digest, int64(len(model)), external, budget)
	if err != nil {
		return "", err.Error()
	}
	return files, ""
}

// externalDataFiles lists the external data files an ONNX model refers to (none when the
// bytes are not an ONNX model), each once, as the model names them: relative, '/'-separated,
// '.' and empty components dropped.
func externalDataFiles(path string, data []byte) ([]externalRef, error) {
	if !IsOnnxModel(data) {
		return nil, nil // not an ONNX model: a file without external data
	}
	tensors, err := ModelTensors(data)
	if err != nil {
		return nil, nil
	}
	var refs []externalRef
	for _, t := range tensors {
		if t.DataLocation != 1 {
			continue
		}
		ref := externalRef{offset: 0, length: -1}
		for _, kv := range t.External {
			switch kv[0] {
			case "location":
				ref.location = kv[1]
			case "offset":
				ref.offset = parseDecimal(kv[1])
			case "length":
				ref.length = parseDecimal(kv[1])
			}
		}
		clean, ok := normalizeLocation(ref.location)
		if !ok || ref.offset < 0 || ref.length < -1 {
			return nil, errors.New("external data location " + quoteForMessage(ref.location) + " is absolute or leaves the artifact's directory")
		}
		ref.path = clean
		refs = append(refs, ref)
	}
	return refs, nil
}

type externalRef struct {
	location, path string
	offset, length int64
}

func parseDecimal(s string) int64 {
	var n int64
	if s == "" {
		return -2
	}
	for _, c := range s {
		if c < '0' || c > '9' || n > 1<<50 {
			return -2
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// normalizeLocation: '\\' and '/' separate, '.' and empty components are dropped; absolute
// paths and '..' are refused.
func normalizeLocation(loc string) (string, bool) {
	if loc == "" || strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "\\") || (len(loc) >= 2 && loc[1] == ':') {
		return "", false
	}
	var parts []string
	for _, p := range strings.Split(strings.ReplaceAll(loc, "\\", "/"), "/") {
		switch p {
		case "", ".":
		case "..":
			return "", false
		default:
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return "", false
	}
	return strings.Join(parts, "/"), true
}

// filesDigest is docs/binding.md's files digest of a model and its external data files.
func filesDigest(dir, modelSHA string, modelSize int64, refs []externalRef, budget int64) (string, error) {
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	type entry struct {
		path, sha string
		size      int64
	}
	seen := map[string]*entry{}
	for _, ref := range refs {
		if e, ok := seen[ref.path]; ok {
			if ref.length >= 0 && ref.offset+ref.length > e.size {
				return "", errors.New("external data " + quoteForMessage(ref.path) + ": a range past the end of the file")
			}
			continue
		}
		full := filepath.Join(dir, filepath.FromSlash(ref.path))
		real, err := filepath.EvalSymlinks(full)
		if err != nil {
			return "", errors.New("external data file " + quoteForMessage(ref.path) + " is missing")
		}
		if rel, err := filepath.Rel(realDir, real); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return "", errors.New("external data " + quoteForMessage(ref.path) + " leaves the artifact's directory")
		}
		sha, size, err := hashFile(full)
		if err != nil {
			return "", err
		}
		if ref.offset > size || (ref.length >= 0 && ref.offset+ref.length > size) {
			return "", errors.New("external data " + quoteForMessage(ref.path) + ": a range past the end of the file")
		}
		seen[ref.path] = &entry{ref.path, sha, size}
	}
	paths := make([]string, 0, len(seen))
	for p := range seen {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var b strings.Builder
	b.WriteString(`{"external_data":[`)
	for i, p := range paths {
		if i > 0 {
			b.WriteByte(',')
		}
		e := seen[p]
		b.WriteString(`{"path":`)
		writeCanonicalString(&b, e.path)
		b.WriteString(`,"sha256":"` + e.sha + `","size":` + itoa(e.size) + `}`)
	}
	b.WriteString(`],"format":"sealtrace.onnx-files.v1","model":{"sha256":"` + modelSHA + `","size":` + itoa(modelSize) + `}}`)
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:]), nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// hashFile streams a regular file through sha256.
func hashFile(path string) (string, int64, error) {
	f, _, err := openRegular(path, "external data file")
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, hashBlockSize)
	var size int64
	for {
		n, err := f.Read(buf)
		h.Write(buf[:n])
		size += int64(n)
		if err != nil {
			break
		}
	}
	return hex.EncodeToString(h.Sum(nil)), size, nil
}

// OnnxFileIdentity is how audit logs and bindings identify an ONNX file: its sha256, or with
// external data its files digest.
func OnnxFileIdentity(path string, budget int64) (string, error) {
	data, err := readRegular(path, "model", budget)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	// External data that cannot be read makes the model given unreadable: bad input, not a
	// failed link (docs/audit-log.md).
	refs, err := externalDataFiles(path, data)
	if err != nil {
		return "", badInput("%s: %v", path, err)
	}
	if len(refs) == 0 {
		return digest, nil
	}
	files, err := filesDigest(filepath.Dir(path), digest, int64(len(data)), refs, budget)
	if err != nil {
		return "", badInput("%s: %v", path, err)
	}
	return files, nil
}
