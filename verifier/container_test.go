package main

// Containers written here from docs/container-format.md alone, then verified.

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type testTensor struct {
	name  string
	dtype int64 // ONNX data type
	shape []int64
	data  []byte
}

// protobuf encoding helpers (wire format)
func pbVarint(v uint64) []byte {
	var out []byte
	for v >= 0x80 {
		out = append(out, byte(v)|0x80)
		v >>= 7
	}
	return append(out, byte(v))
}

func pbField(number uint64, payload []byte) []byte {
	out := pbVarint(number<<3 | wireBytes)
	out = append(out, pbVarint(uint64(len(payload)))...)
	return append(out, payload...)
}

func pbInt(number uint64, v uint64) []byte {
	return append(pbVarint(number<<3|wireVarint), pbVarint(v)...)
}

// graphSection is a ModelProto whose graph's initializers refer to the tensor table.
func graphSection(tensors []testTensor, dims func(testTensor) []int64) []byte {
	var graph []byte
	for _, t := range tensors {
		var tp []byte
		for _, d := range dims(t) {
			tp = append(tp, pbInt(tensorDims, uint64(d))...)
		}
		tp = append(tp, pbInt(tensorDataType, uint64(t.dtype))...)
		tp = append(tp, pbField(tensorName, []byte(t.name))...)
		entry := append(pbField(entryKey, []byte("sealtrace.tensor")), pbField(entryValue, []byte(t.name))...)
		tp = append(tp, pbField(tensorExternalData, entry)...)
		tp = append(tp, pbInt(tensorDataLocation, 1)...)
		graph = append(graph, pbField(graphInitializer, tp)...)
	}
	return append(pbInt(1, 8), pbField(modelGraph, graph)...)
}

func canonicalOf(t testing.TB, v interface{}) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := ParseJSON(raw, 64)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Canonical(parsed)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// buildContainer writes a container of these tensors, signed by the keys given.
func buildContainer(t testing.TB, tensors []testTensor, edit func(map[string]interface{}), keys ...ed25519.PrivateKey) []byte {
	t.Helper()
	return buildContainerOf(t, graphSection(tensors, func(x testTensor) []int64 { return x.shape }), tensors, edit, keys...)
}

// buildContainerOf writes a container of this graph section and these tensors; the preamble's
// format version is the header's format_version (after edit).
func buildContainerOf(t testing.TB, graph []byte, tensors []testTensor, edit func(map[string]interface{}), keys ...ed25519.PrivateKey) []byte {
	t.Helper()
	var data []byte
	pad := func() {
		for len(data)%64 != 0 {
			data = append(data, 0)
		}
	}
	data = append(data, graph...)
	var entries []interface{}
	for _, x := range tensors {
		pad()
		entries = append(entries, map[string]interface{}{
			"name": x.name, "dtype": onnxDtypes[x.dtype], "shape": x.shape, "storage": "raw_data",
			"offset": len(data), "length": len(x.data), "sha256": []string{sha(x.data)},
		})
		data = append(data, x.data...)
	}
	if entries == nil {
		entries = []interface{}{}
	}
	container := map[string]interface{}{
		"format": "sealtrace.container", "format_version": 1, "sealtrace_version": "test", "alignment": 64,
		"chunk_size": 1 << 16, "plan_digest": strings.Repeat("ab", 32),
		"model": map[string]interface{}{"ir_version": 8, "producer_name": "go", "producer_version": "", "domain": "",
			"model_version": 0, "graph_name": "g", "opset_imports": []interface{}{map[string]interface{}{"domain": "", "version": 17}}},
		"source":   map[string]interface{}{"file_name": nil, "sha256": strings.Repeat("cd", 32), "size": 0, "external_data": []interface{}{}},
		"sections": []interface{}{map[string]interface{}{"name": "graph", "encoding": "onnx-protobuf", "offset": 0, "length": len(graph), "sha256": []string{sha(graph)}}},
		"tensors":  entries,
	}
	if edit != nil {
		edit(container)
	}
	digest := sha(canonicalOf(t, container))
	signatures := []interface{}{}
	for _, k := range keys {
		pub := k.Public().(ed25519.PublicKey)
		signatures = append(signatures, map[string]interface{}{
			"algorithm": "ed25519", "key_id": KeyID(pub), "public_key": hex.EncodeToString(pub),
			"signature": hex.EncodeToString(ed25519.Sign(k, []byte(digest))),
		})
	}
	header := canonicalOf(t, map[string]interface{}{"container": container, "signatures": signatures})
	pre := make([]byte, 48)
	copy(pre, ContainerMagic)
	version, _ := container["format_version"].(int)
	binary.LittleEndian.PutUint32(pre[8:], uint32(version))
	binary.LittleEndian.PutUint32(pre[12:], uint32(len(header)))
	d, _ := hex.DecodeString(digest)
	copy(pre[16:], d)
	out := append(pre, header...)
	for len(out)%64 != 0 {
		out = append(out, 0)
	}
	return append(out, data...)
}

func writeKey(t *testing.T, dir, name string, k ed25519.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func newKey(seed string) ed25519.PrivateKey {
	s := sha256.Sum256([]byte(seed))
	return ed25519.NewKeyFromSeed(s[:])
}

var sampleTensors = []testTensor{
	{"w", 1, []int64{2, 3}, []byte("abcdefghijklmnopqrstuvwx")},
	{"b", 7, []int64{1}, []byte("12345678")},
	{"nibbles", 22, []int64{3}, []byte{0x12, 0x03}},
}

func verifyBytes(t *testing.T, blob []byte, name string, opts ContainerOptions) (*Verdict, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	if opts.MemoryBudget == 0 {
		opts.MemoryBudget = defaultMemoryBudget
	}
	return VerifyContainer(path, opts)
}

func failureNames(v *Verdict) []string {
	var out []string
	for _, f := range v.Failures {
		out = append(out, f.Kind+":"+f.Where.(string))
	}
	return out
}

func TestAContainerWrittenFromTheDocsVerifies(t *testing.T) {
	key := newKey("signer")
	blob := buildContainer(t, sampleTensors, nil, key)
	dir := t.TempDir()
	v, err := verifyBytes(t, blob, "m.seal", ContainerOptions{Trust: []*TrustedKey{{Key: key.Public().(ed25519.PublicKey), ID: KeyID(key.Public().(ed25519.PublicKey))}}})
	if err != nil || !v.OK {
		t.Fatalf("verify: %v %+v", err, v)
	}
	if v.Digests["container"] != hex.EncodeToString(blob[16:48]) {
		t.Errorf("digest %s", v.Digests["container"])
	}
	trust, err := LoadTrust([]string{writeKey(t, dir, "other.pub", newKey("other"))})
	if err != nil {
		t.Fatal(err)
	}
	v, _ = verifyBytes(t, blob, "m.seal", ContainerOptions{Trust: trust})
	if got := failureNames(v); len(got) != 1 || got[0] != "signature:trusted signature" {
		t.Errorf("another key: %v", got)
	}
}

func TestEverySingleByteFlipOfASignedContainerFails(t *testing.T) {
	key := newKey("signer")
	pub := key.Public().(ed25519.PublicKey)
	trust := []*TrustedKey{{Key: pub, ID: KeyID(pub)}}
	blob := buildContainer(t, sampleTensors, nil, key)
	dir := t.TempDir()
	path := filepath.Join(dir, "m.seal")
	for i := range blob {
		flipped := append([]byte(nil), blob...)
		flipped[i] ^= 0x01
		if err := os.WriteFile(path, flipped, 0o644); err != nil {
			t.Fatal(err)
		}
		v, err := VerifyContainer(path, ContainerOptions{Trust: trust, MemoryBudget: defaultMemoryBudget})
		if err != nil || v.ExitCode != ExitFailed {
			t.Fatalf("flip at %d: %v %+v", i, err, v)
		}
	}
}

func TestMismatchesAreNamed(t *testing.T) {
	blob := buildContainer(t, sampleTensors, nil)
	cases := map[string]func([]byte) []byte{
		"tensor:b":                      func(b []byte) []byte { b[len(b)-64-2] ^= 1; return b }, // b starts 64 bytes before nibbles
		"padding:before tensor nibbles": func(b []byte) []byte { b[len(b)-3] ^= 1; return b },
		"tensor:nibbles": func(b []byte) []byte {
			b[len(b)-1] ^= 1
			return b
		},
		"header:container": func(b []byte) []byte { b[20] ^= 1; return b },
		"format:container": func(b []byte) []byte { b[49] = ' '; return b },
	}
	for want, edit := range cases {
		v, err := verifyBytes(t, edit(append([]byte(nil), blob...)), "m.seal", ContainerOptions{})
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		if got := failureNames(v); len(got) != 1 || got[0] != want {
			t.Errorf("want %s, got %v", want, got)
		}
	}
	v, _ := verifyBytes(t, blob[:len(blob)-1], "m.seal", ContainerOptions{})
	if v.Failures[0].Kind != "file" {
		t.Errorf("truncated: %+v", v.Failures)
	}
	if _, err := verifyBytes(t, []byte("not a container"), "m.bin", ContainerOptions{}); err == nil {
		t.Error("a file without magic, not named .seal, is bad input")
	}
	if v, _ := verifyBytes(t, []byte("not a container"), "m.SEAL", ContainerOptions{}); v == nil || v.Failures[0].Kind != "format" {
		t.Error("a file named .SEAL claims to be a container")
	}
	if v, _ := verifyBytes(t, ContainerMagic[:3], "m.bin", ContainerOptions{}); v == nil || v.Failures[0].Kind != "file" {
		t.Error("three bytes of magic: a container cut short")
	}
}

func TestGraphReferencesMustMatchTheTable(t *testing.T) {
	edits := map[string]func(map[string]interface{}){
		"shape": func(c map[string]interface{}) {
			c["tensors"].([]interface{})[0].(map[string]interface{})["shape"] = []int64{3, 2}
		},
		"dtype": func(c map[string]interface{}) {
			c["tensors"].([]interface{})[0].(map[string]interface{})["dtype"] = "int32"
		},
		"name":   func(c map[string]interface{}) { c["tensors"].([]interface{})[0].(map[string]interface{})["name"] = "v" },
		"2^63":   func(c map[string]interface{}) { c["model"].(map[string]interface{})["ir_version"] = uint64(1) << 63 },
		"layout": func(c map[string]interface{}) { c["tensors"].([]interface{})[1].(map[string]interface{})["offset"] = 0 },
	}
	for name, edit := range edits {
		v, err := verifyBytes(t, buildContainer(t, sampleTensors, edit), "m.seal", ContainerOptions{})
		if err != nil || len(v.Failures) != 1 || v.Failures[0].Kind != "format" {
			t.Errorf("%s: %v %+v", name, err, v)
		}
	}
}

func TestDevicesAndDirectoriesAreRefusedUnread(t *testing.T) {
	for _, path := range []string{"/dev/zero", t.TempDir()} {
		if _, err := VerifyContainer(path, ContainerOptions{MemoryBudget: defaultMemoryBudget}); err == nil {
			t.Errorf("%s was read", path)
		} else if _, ok := err.(*BadInput); !ok {
			t.Errorf("%s: %T", path, err)
		}
	}
}

func FuzzContainer(f *testing.F) {
	f.Add(buildContainer(f, sampleTensors, nil, newKey("signer")))
	f.Fuzz(func(t *testing.T, blob []byte) {
		v, err := verifyBytes(t, blob, "f.seal", ContainerOptions{})
		if err == nil && v.ExitCode == ExitOK && len(blob) > 0 && !startsWithMagic(blob) {
			t.Fatal("a file without the magic verified")
		}
	})
}

// BenchmarkSHA256 is crypto/sha256 on one core over 1 MiB blocks from memory: the hashing speed
// the toolchain gives sealverify (benchmarks/bench_verifier.py reports it).
func BenchmarkSHA256(b *testing.B) {
	block := make([]byte, hashBlockSize)
	b.SetBytes(int64(len(block)))
	h := sha256.New()
	for i := 0; i < b.N; i++ {
		h.Write(block)
	}
}
