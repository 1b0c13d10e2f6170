package main

// `sealverify container`: docs/container-format.md, "What the reader refuses" and
// "Verification".

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/big"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
)

// ContainerMagic opens every container.
var ContainerMagic = []byte{0x89, 'S', 'E', 'A', 'L', '\r', '\n', 0x1a}

const (
	preambleSize   = 48
	maxHeaderSize  = 64 * MiB
	alignment      = 64
	hashBlockSize  = 1 * MiB
	containerDepth = 64 // JSON nesting of a header: far more than its schema allows
)

// ContainerOptions are verify's options.
type ContainerOptions struct {
	Trust            []*TrustedKey
	RequireSignature bool
	ExpectDigest     string // lowercase hex, or ""
	MemoryBudget     int64  // the most memory the graph section may take
}

// region is the graph section or one tensor: where it lies and the digest of each chunk.
type region struct {
	kind   string // "section" or "tensor"
	name   string
	offset int64 // relative to the data start
	length int64
	chunks []string
}

// containerHeader is what the checks need of a well-formed header.
type containerHeader struct {
	container  *Value
	chunkSize  int64
	regions    []region // graph section first, then the tensors in file order
	tensors    map[string]tensorEntry
	signatures []storedSignature
	graphIndex *graphIndex // format version 2; nil in version 1
}

type tensorEntry struct {
	dtype string
	shape []*big.Int
}

type storedSignature struct {
	keyID, publicKey, signature string
}

// malformed is a header or structure that is not a container's (kind "format").
type malformed struct{ msg string }

func (e *malformed) Error() string { return e.msg }

func malformedf(format string, args ...interface{}) error {
	return &malformed{msg: fmt.Sprintf(format, args...)}
}

// startsWithMagic: the file's first bytes are the magic, or (a file shorter than the magic,
// not empty) the start of it: a container cut short still claims to be one.
func startsWithMagic(head []byte) bool {
	n := len(head)
	if n > len(ContainerMagic) {
		n = len(ContainerMagic)
	}
	return n > 0 && bytes.Equal(head[:n], ContainerMagic[:n])
}

// ClaimsContainer says whether a file claims to be a container: by its magic or its name
// (*.seal, in any case).
func ClaimsContainer(path string, head []byte) bool {
	return startsWithMagic(head) || strings.HasSuffix(strings.ToLower(path), ".seal")
}

// VerifyContainer checks a container file. A file that is not a container at all (no magic,
// not named *.seal), or that cannot be opened as a regular file, is bad input; everything
// else wrong is a failed check.
func VerifyContainer(path string, opts ContainerOptions) (*Verdict, error) {
	f, size, err := openRegular(path, "container")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, preambleSize)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if !ClaimsContainer(path, head) {
		return nil, badInput("%s: not a sealtrace container (no container magic, not named .seal)", path)
	}
	v := newVerdict("container", path)
	check(v, f, path, size, head, opts)
	return v.finish(), nil
}

func check(v *Verdict, f *os.File, path string, size int64, head []byte, opts ContainerOptions) {
	format := func(err error) { v.fail("format", "container", "not a well-formed container: %s", err) }
	if !startsWithMagic(head) {
		format(malformedf("named .seal, but it does not start with the container magic"))
		return
	}
	if size < preambleSize {
		v.fail("file", path, "expected at least %d bytes, found %d bytes (truncated)", preambleSize, size)
		return
	}
	version := binary.LittleEndian.Uint32(head[8:12])
	if version != 1 && version != 2 {
		format(malformedf("container format version %d (this verifier reads 1 and 2)", version))
		return
	}
	headerLen := int64(binary.LittleEndian.Uint32(head[12:16]))
	if headerLen < 2 || headerLen > maxHeaderSize {
		format(malformedf("header length %d out of bounds (2..%d)", headerLen, maxHeaderSize))
		return
	}
	if preambleSize+headerLen > size {
		v.fail("file", path, "expected a %d-byte header, found %d bytes (truncated)", headerLen, size-preambleSize)
		return
	}
	stored := hex.EncodeToString(head[16:48])
	headerBytes := make([]byte, headerLen)
	if _, err := f.ReadAt(headerBytes, preambleSize); err != nil {
		v.fail("file", path, "truncated while being read")
		return
	}
	doc, err := readCanonicalHeader(headerBytes)
	if err != nil {
		format(err)
		return
	}
	// The digest is compared before the header's structure is checked: a header that does not
	// hash to the preamble's digest is reported as such, whatever else is wrong with it.
	body := doc.Get("container")
	if body == nil || body.Kind != KindObject {
		format(malformedf("header: no \"container\" object"))
		return
	}
	canonical, _ := Canonical(body)
	sum := sha256.Sum256(canonical)
	digest := hex.EncodeToString(sum[:])
	if digest != stored {
		v.fail("header", "container", "the header hashes to %s, the preamble says %s", digest, stored)
		return
	}
	hdr, err := parseContainerHeader(doc, version)
	if err != nil {
		format(err)
		return
	}
	v.Digests["container"] = digest
	dataStart := alignUp(preambleSize + headerLen)
	last := hdr.regions[len(hdr.regions)-1]
	if want := dataStart + last.offset + last.length; size != want {
		what := "truncated"
		if size > want {
			what = "extra bytes at the end"
		}
		v.fail("file", path, "expected %d bytes, found %d bytes (%s)", want, size, what)
		return
	}

	trustedSigner := false
	for i, s := range hdr.signatures {
		pub, _ := hex.DecodeString(s.publicKey)
		sig, _ := hex.DecodeString(s.signature)
		valid := s.keyID == KeyID(pub) && verifyHexDigest(pub, digest, sig)
		trusted := valid && trustedKeyFor(opts.Trust, pub) != nil
		trustedSigner = trustedSigner || trusted
		validCopy := valid
		v.Signers = append(v.Signers, Signer{KeyID: s.keyID, Valid: &validCopy, Trusted: trusted})
		if !valid {
			v.fail("signature", fmt.Sprintf("#%d key %s", i, s.keyID), "not a valid ed25519 signature over the container digest")
		}
	}

	graph, graphOK := hashRegions(v, f, path, dataStart, headerLen, hdr, opts)
	if graphOK && graph != nil {
		// One failure at most: the references, else (version 2) the graph index.
		if err := checkGraphReferences(graph, hdr); err != nil {
			format(err)
		} else if err := checkGraphIndex(graph, hdr); err != nil {
			format(err)
		}
	} else if graph != nil && hdr.graphIndex != nil {
		// A changed graph section: name what changed in it, when it still has an index.
		if found, err := ComputeGraphIndex(graph); err == nil {
			for _, d := range diffGraphIndex(hdr.graphIndex, found) {
				v.fail("graph", d.where, "expected %s, found %s", d.expected, d.found)
			}
		}
	}
	if len(opts.Trust) > 0 && !trustedSigner {
		ids := []string{}
		for _, k := range opts.Trust {
			ids = append(ids, k.ID)
		}
		v.fail("signature", "trusted signature", "no valid signature by a trusted key (%s)", strings.Join(ids, ", "))
	}
	if opts.ExpectDigest != "" && opts.ExpectDigest != digest {
		v.fail("header", "container digest", "the container digest is %s, not the expected %s", digest, opts.ExpectDigest)
	}
	var tensorBytes int64
	for _, r := range hdr.regions[1:] {
		tensorBytes += r.length
	}
	v.Summary = fmt.Sprintf(", %d tensor(s), %s of tensor data; container digest %s; %s",
		len(hdr.regions)-1, humanBytes(tensorBytes), digest, signerLine(v.Signers, "signed"))
}

// signerLine says who signed, as sealtrace's OK lines do.
func signerLine(signers []Signer, verb string) string {
	var trusted, other []string
	for _, s := range signers {
		if s.Trusted {
			trusted = append(trusted, s.KeyID)
		} else if s.Valid == nil || *s.Valid {
			other = append(other, s.KeyID)
		}
	}
	switch {
	case len(trusted) > 0:
		return fmt.Sprintf("%s by trusted key %s", verb, strings.Join(trusted, ", "))
	case len(other) > 0:
		return fmt.Sprintf("%s by key %s (signer not checked: give --trust KEY.pub)", verb, strings.Join(other, ", "))
	}
	return "unsigned"
}

func alignUp(n int64) int64 { return (n + alignment - 1) / alignment * alignment }

// readCanonicalHeader reads the header JSON: a JSON object, canonical, integers only.
func readCanonicalHeader(text []byte) (*Value, error) {
	doc, err := ParseJSON(text, containerDepth)
	if err != nil {
		return nil, malformedf("header: not JSON (%v)", err)
	}
	if doc.Kind != KindObject {
		return nil, malformedf("header: not a JSON object")
	}
	if hasFloat(doc) {
		return nil, malformedf("header: a number that is not an integer")
	}
	canonical, err := Canonical(doc)
	if err != nil || !bytes.Equal(canonical, text) {
		return nil, malformedf("header: JSON is not in canonical form (sorted keys, no whitespace)")
	}
	return doc, nil
}

// maxHeaderInteger: every integer of a header fits a signed 64-bit integer.
var maxHeaderInteger = new(big.Int).SetUint64(1<<63 - 1)

func integersFit(v *Value) bool {
	switch v.Kind {
	case KindNumber:
		n, ok := new(big.Int).SetString(v.Num, 10)
		return ok && n.CmpAbs(maxHeaderInteger) <= 0
	case KindArray:
		for _, item := range v.Arr {
			if !integersFit(item) {
				return false
			}
		}
	case KindObject:
		for _, m := range v.Obj {
			if !integersFit(m.Value) {
				return false
			}
		}
	}
	return true
}

// parseContainerHeader checks a canonical header against the schema and the rules the schema
// cannot say; version is the preamble's format version.
func parseContainerHeader(doc *Value, version uint32) (*containerHeader, error) {
	if !headerSchema().Valid(doc) {
		return nil, malformedf("header: does not follow the container header schema")
	}
	if !integersFit(doc) {
		return nil, malformedf("header: an integer larger than 2^63-1")
	}
	c := doc.Get("container")
	// The schema allows 1 and 2, and requires graph_index in 2 and refuses it in 1.
	if headerVersion, _ := c.Get("format_version").Int64(); headerVersion != int64(version) {
		return nil, malformedf("header format_version %d, but the preamble says %d", headerVersion, version)
	}
	chunkSize, _ := c.Get("chunk_size").Int64()
	if chunkSize&(chunkSize-1) != 0 {
		return nil, malformedf("chunk_size %d is not a power of two", chunkSize)
	}
	hdr := &containerHeader{container: c, chunkSize: chunkSize, tensors: map[string]tensorEntry{}}
	section := c.Get("sections").Arr[0]
	entries := []*Value{section}
	entries = append(entries, c.Get("tensors").Arr...)
	end := big.NewInt(0)
	for i, e := range entries {
		kind, name := "tensor", e.Get("name").Str
		if i == 0 {
			kind = "section"
		}
		offset, _ := e.Get("offset").Rat()
		length, _ := e.Get("length").Rat()
		off, ln := offset.Num(), length.Num()
		if i > 0 {
			if _, dup := hdr.tensors[name]; dup {
				return nil, malformedf("duplicate tensor name %s", quoteForMessage(name))
			}
			dtype := e.Get("dtype").Str
			var shape []*big.Int
			count := big.NewInt(1)
			for _, d := range e.Get("shape").Arr {
				r, _ := d.Rat()
				shape = append(shape, r.Num())
				count.Mul(count, r.Num())
			}
			bits := new(big.Int).Mul(count, big.NewInt(dtypeBits[dtype]))
			want := new(big.Int).Div(bits.Add(bits, big.NewInt(7)), big.NewInt(8))
			if want.Cmp(ln) != 0 {
				return nil, malformedf("tensor %s: length %s, but %s × %s is %s bytes", quoteForMessage(name), ln, count, dtype, want)
			}
			hdr.tensors[name] = tensorEntry{dtype: dtype, shape: shape}
		}
		// Each entry starts at the first aligned offset at or after the end of the one before.
		expected := new(big.Int).Add(end, big.NewInt(alignment-1))
		expected.Div(expected, big.NewInt(alignment)).Mul(expected, big.NewInt(alignment))
		if off.Cmp(expected) != 0 {
			return nil, malformedf("%s %s at offset %s, expected %s (entries in file order, aligned, without gaps or overlaps)", kind, quoteForMessage(name), off, expected)
		}
		end = new(big.Int).Add(off, ln)
		if !end.IsInt64() || end.Int64() > 1<<62 {
			return nil, malformedf("%s %s ends past any file size", kind, quoteForMessage(name))
		}
		chunks := e.Get("sha256").Arr
		want := (ln.Int64() + chunkSize - 1) / chunkSize
		if want < 1 {
			want = 1
		}
		if int64(len(chunks)) != want {
			return nil, malformedf("%s %s: %d chunk digests, expected %d", kind, quoteForMessage(name), len(chunks), want)
		}
		r := region{kind: kind, name: name, offset: off.Int64(), length: ln.Int64()}
		for _, ch := range chunks {
			r.chunks = append(r.chunks, ch.Str)
		}
		hdr.regions = append(hdr.regions, r)
	}
	if index := c.Get("graph_index"); index != nil {
		hdr.graphIndex = graphIndexFromHeader(index)
	}
	for _, s := range doc.Get("signatures").Arr {
		hdr.signatures = append(hdr.signatures, storedSignature{
			keyID: s.Get("key_id").Str, publicKey: s.Get("public_key").Str, signature: s.Get("signature").Str,
		})
	}
	return hdr, nil
}

func hasFloat(v *Value) bool {
	switch v.Kind {
	case KindNumber:
		return !v.IsInt
	case KindArray:
		for _, item := range v.Arr {
			if hasFloat(item) {
				return true
			}
		}
	case KindObject:
		for _, m := range v.Obj {
			if hasFloat(m.Value) {
				return true
			}
		}
	}
	return false
}

// validEntryName is the header schema's "name" rule, which Go's regexp (no lookahead) cannot
// run as written: 1..4096 characters, no control character (U+0000..U+001F, U+007F), no
// backslash, not absolute ("/x", "C:"), no "." or ".." component.
func validEntryName(s string) bool {
	cps := codePoints(s)
	if len(cps) < 1 || len(cps) > 4096 {
		return false
	}
	for _, c := range cps {
		if c < 0x20 || c == 0x7F || c == '\\' {
			return false
		}
	}
	if strings.HasPrefix(s, "/") {
		return false
	}
	if len(cps) >= 2 && cps[1] == ':' && (cps[0] >= 'a' && cps[0] <= 'z' || cps[0] >= 'A' && cps[0] <= 'Z') {
		return false
	}
	for _, part := range strings.Split(s, "/") {
		if part == "." || part == ".." {
			return false
		}
	}
	return true
}

// chunkJob is one chunk of one region to hash.
type chunkJob struct {
	region int
	chunk  int
}

// hashRegions hashes every chunk of every region in parallel (one 1 MiB buffer per worker,
// read with pread), checks the padding, and returns the graph section's bytes when its digest
// matched.
func hashRegions(v *Verdict, f *os.File, path string, dataStart, headerLen int64, hdr *containerHeader, opts ContainerOptions) ([]byte, bool) {
	var mu sync.Mutex
	truncated := false
	mismatched := make([]bool, len(hdr.regions))

	// The graph section is read whole: it is parsed after it is hashed.
	graphRegion := hdr.regions[0]
	var graph []byte
	if graphRegion.length <= opts.MemoryBudget {
		graph = make([]byte, graphRegion.length)
		if _, err := f.ReadAt(graph, dataStart+graphRegion.offset); err != nil && graphRegion.length > 0 {
			v.fail("file", path, "truncated while being read")
			return nil, false
		}
	}

	var jobs []chunkJob
	for i, r := range hdr.regions {
		for c := range r.chunks {
			jobs = append(jobs, chunkJob{i, c})
		}
	}
	// Large chunks first, so that the last worker is not left alone with a big one.
	sort.SliceStable(jobs, func(a, b int) bool {
		return chunkLen(hdr, jobs[a]) > chunkLen(hdr, jobs[b])
	})
	workers := runtime.NumCPU()
	if workers > len(jobs) {
		workers = len(jobs)
	}
	next := make(chan chunkJob)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, hashBlockSize)
			for job := range next {
				r := hdr.regions[job.region]
				start := int64(job.chunk) * hdr.chunkSize
				n := chunkLen(hdr, job)
				h := sha256.New()
				if job.region == 0 && graph != nil {
					h.Write(graph[start : start+n])
				} else {
					at := dataStart + r.offset + start
					for done := int64(0); done < n; {
						want := n - done
						if want > hashBlockSize {
							want = hashBlockSize
						}
						got, err := f.ReadAt(buf[:want], at+done)
						h.Write(buf[:got])
						if int64(got) < want || (err != nil && err != io.EOF) {
							mu.Lock()
							truncated = true
							mu.Unlock()
							break
						}
						done += want
					}
				}
				if hex.EncodeToString(h.Sum(nil)) != r.chunks[job.chunk] {
					mu.Lock()
					mismatched[job.region] = true
					mu.Unlock()
				}
			}
		}()
	}
	for _, job := range jobs {
		next <- job
	}
	close(next)
	wg.Wait()
	if truncated {
		v.fail("file", path, "truncated while being read")
		return nil, false
	}

	// Padding: after the header up to the data start, then between regions.
	prevEnd := preambleSize + headerLen
	for i, r := range hdr.regions {
		start := dataStart + r.offset
		if start > prevEnd {
			pad := make([]byte, start-prevEnd)
			if _, err := f.ReadAt(pad, prevEnd); err != nil {
				v.fail("file", path, "truncated while being read")
				return nil, false
			}
			if at := bytes.IndexFunc(pad, func(c rune) bool { return c != 0 }); at >= 0 {
				v.fail("padding", "before "+r.kind+" "+r.name, "byte %d is not zero", prevEnd+int64(at))
			}
		}
		prevEnd = start + r.length
		if mismatched[i] {
			v.fail(r.kind, r.name, "bytes %d..%d do not have the sha256 the header lists", start, start+r.length)
		}
	}
	return graph, !mismatched[0]
}

func chunkLen(hdr *containerHeader, job chunkJob) int64 {
	r := hdr.regions[job.region]
	start := int64(job.chunk) * hdr.chunkSize
	n := r.length - start
	if n > hdr.chunkSize {
		n = hdr.chunkSize
	}
	return n
}

// checkGraphReferences: every graph tensor that refers to the tensor table (an external_data
// entry keyed "sealtrace.tensor") names one table entry of the same dtype and shape, and
// every table entry is referred to exactly once.
func checkGraphReferences(graph []byte, hdr *containerHeader) error {
	tensors, err := ModelTensors(graph)
	if err != nil {
		return malformedf("the graph section is not a readable ONNX model (%v)", err)
	}
	referenced := map[string]bool{}
	for _, t := range tensors {
		var target string
		isRef := false
		for _, kv := range t.External {
			if kv[0] == "sealtrace.tensor" {
				target, isRef = kv[1], true
			}
		}
		if !isRef {
			continue
		}
		entry, ok := hdr.tensors[target]
		if !ok || referenced[target] {
			return malformedf("graph tensor %s has a bad tensor-table reference", quoteForMessage(t.Name))
		}
		referenced[target] = true
		if onnxDtypes[t.DataType] != entry.dtype || len(t.Dims) != len(entry.shape) {
			return malformedf("tensor %s: graph and table disagree on dtype or shape", quoteForMessage(target))
		}
		for i, d := range t.Dims {
			if !entry.shape[i].IsInt64() || entry.shape[i].Int64() != d {
				return malformedf("tensor %s: graph and table disagree on dtype or shape", quoteForMessage(target))
			}
		}
	}
	for _, r := range hdr.regions[1:] {
		if !referenced[r.name] {
			return malformedf("tensor %s is in the table but no graph tensor refers to it", quoteForMessage(r.name))
		}
	}
	return nil
}

// checkGraphIndex: in version 2, the graph index computed from the graph section (whose digests
// matched) is the header's, exactly.
func checkGraphIndex(graph []byte, hdr *containerHeader) error {
	if hdr.graphIndex == nil {
		return nil
	}
	found, err := ComputeGraphIndex(graph)
	if err != nil {
		return malformedf("%v", err)
	}
	if !equalIndex(hdr.graphIndex, found) {
		return malformedf("the header's graph_index is not the one computed from the graph section")
	}
	return nil
}
