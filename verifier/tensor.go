package main

// Tensors as replay holds them, their digests (docs/audit-log.md, "Tensor digests"), and the
// .npy and .npz files a replay's inputs come from.

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Tensor is a dense tensor: a NumPy dtype string, a shape, and its C-order little-endian bytes.
type Tensor struct {
	DType string
	Shape []int
	Data  []byte
}

// itemSizes: the NumPy dtype strings replay reads and writes, with their bytes per element.
var itemSizes = map[string]int{
	"<f4": 4, "<f8": 8, "<f2": 2, "|u1": 1, "|i1": 1, "<u2": 2, "<i2": 2, "<i4": 4, "<i8": 8,
	"<u4": 4, "<u8": 8, "|b1": 1,
}

// numpyDtypes: ONNX TensorProto.DataType numbers and the NumPy dtype strings of a log.
var numpyDtypes = map[int64]string{
	1: "<f4", 2: "|u1", 3: "|i1", 4: "<u2", 5: "<i2", 6: "<i4", 7: "<i8", 9: "|b1", 10: "<f2",
	11: "<f8", 12: "<u4", 13: "<u8",
}

// tensorDigestTag opens the bytes a tensor digest hashes.
const tensorDigestTag = "sealtrace.tensor.v1"

// elementCount is the product of a shape (1 for a scalar).
func elementCount(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Digest is the tensor digest with the log's algorithm: the tag, NUL, the dtype string, NUL,
// the rank and each dimension as 64-bit little-endian integers, then the bytes.
func (t *Tensor) Digest(digestOf logDigest) string {
	var b bytes.Buffer
	b.WriteString(tensorDigestTag)
	b.WriteByte(0)
	b.WriteString(t.DType)
	b.WriteByte(0)
	var word [8]byte
	binary.LittleEndian.PutUint64(word[:], uint64(len(t.Shape)))
	b.Write(word[:])
	for _, d := range t.Shape {
		binary.LittleEndian.PutUint64(word[:], uint64(d))
		b.Write(word[:])
	}
	b.Write(t.Data)
	return digestOf(b.Bytes())
}

// Float32s decodes a float32 tensor's values.
func (t *Tensor) Float32s() []float32 {
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out
}

// Int64s decodes an int64 tensor's values.
func (t *Tensor) Int64s() []int64 {
	out := make([]int64, len(t.Data)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(t.Data[8*i:]))
	}
	return out
}

// canonicalNaN32 is the one NaN a portable float32 output holds (docs/numerics.md, "NaN").
const canonicalNaN32 = 0x7FC00000

// float32Tensor encodes values as a float32 tensor, every NaN made the canonical NaN.
func float32Tensor(shape []int, values []float32) *Tensor {
	data := make([]byte, 4*len(values))
	for i, v := range values {
		bits := math.Float32bits(v)
		if v != v {
			bits = canonicalNaN32
		}
		binary.LittleEndian.PutUint32(data[4*i:], bits)
	}
	return &Tensor{DType: "<f4", Shape: shape, Data: data}
}

// tensorFromSample rebuilds a tensor from a logged value whose sample holds every element, or
// returns nil when it does not (or holds values of a dtype replay cannot rebuild).
func tensorFromSample(value *Value) *Tensor {
	dtype := value.Get("dtype").Str
	size, known := itemSizes[dtype]
	sample := value.Get("sample")
	if !known || sample == nil || sample.Kind != KindArray {
		return nil
	}
	var shape []int
	for _, d := range value.Get("shape").Arr {
		n, ok := d.Int64()
		if !ok || n < 0 || n > int64(len(sample.Arr)) {
			return nil
		}
		shape = append(shape, int(n))
	}
	if elementCount(shape) != len(sample.Arr) {
		return nil
	}
	data := make([]byte, 0, size*len(sample.Arr))
	for _, e := range sample.Arr {
		encoded, ok := encodeSampleValue(dtype, e)
		if !ok {
			return nil
		}
		data = append(data, encoded...)
	}
	return &Tensor{DType: dtype, Shape: shape, Data: data}
}

// encodeSampleValue: one sample value (an exact JSON number, or "nan", "inf", "-inf") in dtype.
func encodeSampleValue(dtype string, e *Value) ([]byte, bool) {
	var f float64
	switch {
	case e.Kind == KindString && e.Str == "nan":
		f = math.NaN()
	case e.Kind == KindString && e.Str == "inf":
		f = math.Inf(1)
	case e.Kind == KindString && e.Str == "-inf":
		f = math.Inf(-1)
	case e.Kind == KindNumber && !e.IsInt:
		var err error
		if f, err = strconv.ParseFloat(e.Num, 64); err != nil {
			return nil, false
		}
	case e.Kind == KindNumber && e.IsInt && dtype != "<f4" && dtype != "<f8":
		n, err := strconv.ParseInt(e.Num, 10, 64)
		if err != nil {
			return nil, false
		}
		out := make([]byte, 8)
		binary.LittleEndian.PutUint64(out, uint64(n))
		return out[:itemSizes[dtype]], dtype != "|b1" || n == 0 || n == 1
	case e.Kind == KindNumber:
		var err error
		if f, err = strconv.ParseFloat(e.Num, 64); err != nil {
			return nil, false
		}
	case e.Kind == KindBool && dtype == "|b1":
		if e.Bool {
			return []byte{1}, true
		}
		return []byte{0}, true
	default:
		return nil, false
	}
	switch dtype {
	case "<f4":
		if float64(float32(f)) != f && f == f {
			return nil, false // not a float32's value: the log does not hold this tensor
		}
		return float32Tensor(nil, []float32{float32(f)}).Data, true
	case "<f8":
		out := make([]byte, 8)
		binary.LittleEndian.PutUint64(out, math.Float64bits(f))
		return out, true
	}
	return nil, false
}

// npyMagic opens every .npy file.
var npyMagic = []byte("\x93NUMPY")

// npyHeader is the only header form replay accepts: NumPy's dict literal, keys in NumPy's order.
var npyHeader = regexp.MustCompile(`^\{'descr': '([<|][a-z][0-9]+)', 'fortran_order': (False|True), 'shape': \(((?:[0-9]+, )*[0-9]+,?|)\), \} *\n$`)

// ReadNpy reads one .npy file's bytes strictly: NumPy's format versions 1 to 3, a C-order array
// of a numeric dtype replay knows, and exactly as many bytes as the header declares (the size is
// checked against the bytes there are, and the budget, before anything is allocated).
func ReadNpy(data []byte, what string, budget int64) (*Tensor, error) {
	if len(data) < 10 || !bytes.Equal(data[:6], npyMagic) {
		return nil, badInput("%s: not a .npy file (no NumPy magic)", what)
	}
	major, minor := data[6], data[7]
	var headerLen, start int
	switch {
	case major == 1 && minor == 0:
		headerLen, start = int(binary.LittleEndian.Uint16(data[8:10])), 10
	case (major == 2 || major == 3) && minor == 0 && len(data) >= 12:
		headerLen, start = int(binary.LittleEndian.Uint32(data[8:12])), 12
	default:
		return nil, badInput("%s: .npy format version %d.%d is not one replay reads (1.0, 2.0, 3.0)", what, major, minor)
	}
	if headerLen > len(data)-start {
		return nil, badInput("%s: the .npy header runs past the end of the file", what)
	}
	m := npyHeader.FindSubmatch(data[start : start+headerLen])
	if m == nil {
		return nil, badInput("%s: the .npy header is not NumPy's {'descr': ..., 'fortran_order': ..., 'shape': (...), }", what)
	}
	dtype := string(m[1])
	size, known := itemSizes[dtype]
	if !known {
		return nil, badInput("%s: dtype %s is not one replay reads", what, dtype)
	}
	if string(m[2]) == "True" {
		return nil, badInput("%s: a Fortran-order array (save it in C order)", what)
	}
	var shape []int
	count := int64(1)
	for _, field := range strings.Split(strings.TrimSuffix(string(m[3]), ","), ", ") {
		if field == "" {
			continue
		}
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil || n > budget {
			return nil, badInput("%s: dimension %s is larger than the memory budget", what, field)
		}
		if n != 0 && count > budget/n {
			return nil, badInput("%s: the array declared is larger than the memory budget", what)
		}
		count *= n
		shape = append(shape, int(n))
	}
	body := data[start+headerLen:]
	if count > budget/int64(size) || int64(len(body)) != count*int64(size) {
		return nil, badInput("%s: the header declares %d element(s) of %s (%d bytes), the file holds %d bytes", what, count, dtype, count*int64(size), len(body))
	}
	return &Tensor{DType: dtype, Shape: shape, Data: append([]byte(nil), body...)}, nil
}

// ReadNpz reads every array of an .npz archive (members NAME.npy, stored or deflated), each
// member's declared size checked against the budget before it is decompressed.
func ReadNpz(path string, budget int64) (map[string]*Tensor, error) {
	data, err := readRegular(path, "input archive", budget)
	if err != nil {
		return nil, err
	}
	archive, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, badInput("%s: not an .npz archive (%v)", path, err)
	}
	out := map[string]*Tensor{}
	total := int64(0)
	for _, member := range archive.File {
		name := strings.TrimSuffix(member.Name, ".npy")
		if name == member.Name || name == "" {
			return nil, badInput("%s: member %s is not NAME.npy", path, quoteForMessage(member.Name))
		}
		if _, dup := out[name]; dup {
			return nil, badInput("%s: input %s is in the archive twice", path, quoteForMessage(name))
		}
		size := member.UncompressedSize64
		if size > uint64(budget-total) {
			return nil, badInput("%s: the archive's members declare more than the memory budget (%s)", path, humanBytes(budget))
		}
		total += int64(size)
		body, err := readMember(member, int64(size))
		if err != nil {
			return nil, badInput("%s: member %s: %v", path, quoteForMessage(member.Name), err)
		}
		t, err := ReadNpy(body, fmt.Sprintf("%s member %s", path, member.Name), budget)
		if err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}

// readMember decompresses one zip member, which must hold exactly the size it declares.
func readMember(member *zip.File, size int64) ([]byte, error) {
	r, err := member.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	body, err := io.ReadAll(io.LimitReader(r, size+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) != size {
		return nil, fmt.Errorf("holds %d bytes, declares %d", len(body), size)
	}
	return body, nil
}
