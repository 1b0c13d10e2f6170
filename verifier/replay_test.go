package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"math/rand"
	"strings"
	"testing"
)

// referenceDot is the exact value RN'd by another route: big.Rat arithmetic, then Rat.Float32
// (Go's own exact rational-to-float32 conversion, not big.Float's). Exact zero is +0.
func referenceDot(x, y []float32, alpha float32, addend float64) float32 {
	sum := new(big.Rat)
	for k := range x {
		p := new(big.Rat).SetFloat64(float64(x[k]))
		sum.Add(sum, p.Mul(p, new(big.Rat).SetFloat64(float64(y[k]))))
	}
	sum.Mul(sum, new(big.Rat).SetFloat64(float64(alpha)))
	sum.Add(sum, new(big.Rat).SetFloat64(addend))
	f, _ := sum.Float32()
	if f == 0 && sum.Sign() < 0 {
		return float32(math.Copysign(0, -1))
	}
	return f
}

func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
}

// The hard places: ties (which the float64 bound cannot decide), cancellation, subnormal and
// overflowing results, signed zeros.
func TestDotIsCorrectlyRoundedAtTheHardPlaces(t *testing.T) {
	tiny := float32(math.Ldexp(1, -75))
	cases := []struct {
		x, y   []float32
		alpha  float32
		addend float64
	}{
		{[]float32{1, float32(math.Ldexp(1, -24))}, []float32{1, 1}, 1, 0},                   // a tie: to even, 1
		{[]float32{1, float32(math.Ldexp(3, -25))}, []float32{1, 1}, 1, 0},                   // just past a tie
		{[]float32{1, float32(math.Ldexp(1, -24)), -1e-30}, []float32{1, 1, 1e-20}, 1, 0},    // just below a tie
		{[]float32{3e38, 3e38}, []float32{1, 1}, 1, 0},                                       // overflow
		{[]float32{3e38, -3e38, 1}, []float32{2, 2, 1}, 1, 0},                                // cancellation of huge terms
		{[]float32{tiny}, []float32{tiny}, 1, 0},                                             // 2^-150: a tie to +0
		{[]float32{tiny, tiny}, []float32{tiny, float32(math.Ldexp(1, -74))}, 1, 0},          // 3 * 2^-150
		{[]float32{-tiny}, []float32{float32(math.Ldexp(3, -76))}, 1, 0},                     // -0.75 * 2^-149: -2^-149
		{[]float32{-tiny}, []float32{float32(math.Ldexp(1, -76))}, 1, 0},                     // rounds to -0
		{[]float32{1, -1}, []float32{1, 1}, 1, 0},                                            // exact zero: +0
		{[]float32{float32(math.Copysign(0, -1))}, []float32{1}, 1, 0},                       // -0 alone: +0
		{[]float32{1, 2, 3}, []float32{0.1, 0.2, 0.3}, 0.5, float64(float32(0.7)) * 0.25},    // Gemm's alpha and beta * c
		{[]float32{16777216}, []float32{1}, 1, 1},                                            // 2^24 + 1: a tie
		{[]float32{1, 1}, []float32{1, -1}, -1, float64(float32(math.Ldexp(1, -130))) * 0.5}, // a subnormal addend alone
	}
	for i, c := range cases {
		got, want := dotRN32(c.x, c.y, c.alpha, c.addend), referenceDot(c.x, c.y, c.alpha, c.addend)
		if !sameBits(got, want) {
			t.Errorf("case %d: %08x, want %08x (%g, %g)", i, math.Float32bits(got), math.Float32bits(want), got, want)
		}
	}
}

func TestDotAgreesWithExactArithmeticOnRandomVectors(t *testing.T) {
	rng := rand.New(rand.NewSource(30))
	draw := func() float32 {
		switch rng.Intn(4) {
		case 0: // any finite bits: every exponent, subnormals included
			for {
				f := math.Float32frombits(rng.Uint32())
				if !math.IsInf(float64(f), 0) && f == f {
					return f
				}
			}
		case 1:
			return float32(rng.NormFloat64())
		case 2: // small integers: many exact ties and cancellations
			return float32(rng.Intn(9) - 4)
		default:
			return float32(math.Ldexp(float64(rng.Intn(3)-1), rng.Intn(60)-30))
		}
	}
	for trial := 0; trial < 20000; trial++ {
		n := 1 + rng.Intn(12)
		x, y := make([]float32, n), make([]float32, n)
		for k := range x {
			x[k], y[k] = draw(), draw()
		}
		alpha, addend := float32(1), 0.0
		if trial%3 == 0 {
			alpha, addend = draw(), float64(draw())*float64(draw())
		}
		got, want := dotRN32(x, y, alpha, addend), referenceDot(x, y, alpha, addend)
		if !sameBits(got, want) {
			t.Fatalf("trial %d: %v . %v * %g + %g: %08x, want %08x", trial, x, y, alpha, addend, math.Float32bits(got), math.Float32bits(want))
		}
	}
}

func TestDotFollowsIEEEForWhatIsNotFinite(t *testing.T) {
	inf := float32(math.Inf(1))
	for i, c := range []struct {
		x, y []float32
		want float64
	}{
		{[]float32{0, 1}, []float32{inf, 1}, math.NaN()},
		{[]float32{inf, inf}, []float32{1, -1}, math.NaN()},
		{[]float32{inf, 3e38}, []float32{1, -3e38}, math.Inf(1)},
		{[]float32{float32(math.NaN())}, []float32{0}, math.NaN()},
		{[]float32{-inf}, []float32{2}, math.Inf(-1)},
	} {
		if got := dotRN32(c.x, c.y, 1, 0); !sameBits(got, float32(c.want)) {
			t.Errorf("case %d: %g, want %g", i, got, c.want)
		}
	}
}

// A tensor digest from a log sealtrace wrote: the input of an ACAS Xu run, whose sample holds it.
func TestTensorDigestIsTheLogs(t *testing.T) {
	value, err := ParseJSON([]byte(`{"digest":"2ab89e2cc1281ef2cf61e8d0f69069f4965944ac9abf42103b205b1ff6a0333d","dtype":"<f4","kind":"tensor","name":"input","sample":[0.0236432496458292,0.9009273648262024,-0.7116807699203491,0.8972988724708557,-0.37633708119392395],"shape":[1,1,1,5]}`), 8)
	if err != nil {
		t.Fatal(err)
	}
	tensor := tensorFromSample(value)
	if tensor == nil {
		t.Fatal("the sample holds the whole tensor")
	}
	if got := tensor.Digest(sha256Hex); got != value.Get("digest").Str {
		t.Fatalf("digest %s", got)
	}
	value.Get("shape").Arr[3].Num = "6" // the sample no longer holds it
	if tensorFromSample(value) != nil {
		t.Fatal("a sample shorter than the tensor rebuilt it")
	}
}

func npyFile(header string, body []byte) []byte {
	var b bytes.Buffer
	b.Write(npyMagic)
	b.Write([]byte{1, 0})
	padded := header
	for (10+len(padded)+1)%64 != 0 {
		padded += " "
	}
	padded += "\n"
	var n [2]byte
	binary.LittleEndian.PutUint16(n[:], uint16(len(padded)))
	b.Write(n[:])
	b.WriteString(padded)
	b.Write(body)
	return b.Bytes()
}

func TestNpyReaderIsStrict(t *testing.T) {
	body := float32Tensor(nil, []float32{1, 2, 3, 4, 5, 6}).Data
	good := npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", body)
	tensor, err := ReadNpy(good, "x.npy", 1<<30)
	if err != nil || tensor.DType != "<f4" || len(tensor.Shape) != 2 || tensor.Shape[1] != 3 || !bytes.Equal(tensor.Data, body) {
		t.Fatalf("a good file: %v %+v", err, tensor)
	}
	scalar, err := ReadNpy(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", body[:4]), "s.npy", 1<<30)
	if err != nil || len(scalar.Shape) != 0 {
		t.Fatalf("a scalar: %v", err)
	}
	for what, data := range map[string][]byte{
		"fortran order":   npyFile("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", body),
		"short body":      npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", body[:20]),
		"extra bytes":     npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", append(body, 0)),
		"object dtype":    npyFile("{'descr': '|O', 'fortran_order': False, 'shape': (2, 3), }", body),
		"big-endian":      npyFile("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", body),
		"not NumPy's":     npyFile("{'shape': (2, 3), 'descr': '<f4', 'fortran_order': False}", body),
		"huge declared":   npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000, 1000000000000), }", body),
		"over the budget": npyFile("{'descr': '<f8', 'fortran_order': False, 'shape': (200000000,), }", body),
		"no magic":        append([]byte("NUMPY\x93"), good[6:]...),
		"version 9":       append(append([]byte{}, good[:6]...), append([]byte{9, 0}, good[8:]...)...),
	} {
		_, err := ReadNpy(data, "x.npy", 1<<30)
		var bad *BadInput
		if !errors.As(err, &bad) {
			t.Errorf("%s: %v, want bad input", what, err)
		}
	}
}

func f32(shape []int, values ...float32) *Tensor { return float32Tensor(shape, values) }

func TestKernels(t *testing.T) {
	node := func(op string, attrs map[string]*Attribute) *Node {
		if attrs == nil {
			attrs = map[string]*Attribute{}
		}
		return &Node{Name: "n", OpType: op, Outputs: []string{"y"}, Attributes: attrs}
	}
	check := func(what string, n *Node, in []*Tensor, shape []int, want ...float32) {
		t.Helper()
		out, err := runNode(n, in)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got := out[0]
		if len(got.Shape) != len(shape) {
			t.Fatalf("%s: shape %v, want %v", what, got.Shape, shape)
		}
		for i := range shape {
			if got.Shape[i] != shape[i] {
				t.Fatalf("%s: shape %v, want %v", what, got.Shape, shape)
			}
		}
		if !bytes.Equal(got.Data, float32Tensor(nil, want).Data) {
			t.Fatalf("%s: %v, want %v", what, got.Float32s(), want)
		}
	}
	check("broadcast Sub", node("Sub", nil), []*Tensor{f32([]int{2, 2}, 1, 2, 3, 4), f32([]int{2}, 1, 1)}, []int{2, 2}, 0, 1, 2, 3)
	check("broadcast Add both ways", node("Add", nil), []*Tensor{f32([]int{2, 1}, 10, 20), f32([]int{3}, 1, 2, 3)}, []int{2, 3}, 11, 12, 13, 21, 22, 23)
	check("Div by zero", node("Div", nil), []*Tensor{f32([]int{3}, 1, -1, 0), f32([]int{}, 0)}, []int{3},
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()))
	check("Relu", node("Relu", nil), []*Tensor{f32([]int{4}, -1, float32(math.Copysign(0, -1)), 2, float32(math.NaN()))}, []int{4}, 0, 0, 2, float32(math.NaN()))
	check("MatMul 1-D by 2-D", node("MatMul", nil), []*Tensor{f32([]int{2}, 1, 2), f32([]int{2, 2}, 1, 2, 3, 4)}, []int{2}, 7, 10)
	check("MatMul batch broadcast", node("MatMul", nil), []*Tensor{f32([]int{2, 1, 2}, 1, 0, 0, 1), f32([]int{2, 1}, 5, 6)}, []int{2, 1, 1}, 5, 6)
	gemmAttrs := map[string]*Attribute{"transA": {I: 1}, "transB": {I: 1}, "alpha": {F: 2}, "beta": {F: 0.5}}
	// A^T = [[1, 3], [2, 4]], B^T = [[1, 0], [0, 1]]: 2 A^T + 0.5 [10, 20] broadcast over rows.
	check("Gemm", node("Gemm", gemmAttrs), []*Tensor{f32([]int{2, 2}, 1, 2, 3, 4), f32([]int{2, 2}, 1, 0, 0, 1), f32([]int{2}, 10, 20)}, []int{2, 2}, 7, 16, 9, 18)
	check("Flatten", node("Flatten", map[string]*Attribute{"axis": {I: -1}}), []*Tensor{f32([]int{1, 2, 2}, 1, 2, 3, 4)}, []int{2, 2}, 1, 2, 3, 4)
	shape := &Tensor{DType: "<i8", Shape: []int{2}, Data: make([]byte, 16)}
	binary.LittleEndian.PutUint64(shape.Data, 0)
	binary.LittleEndian.PutUint64(shape.Data[8:], ^uint64(0)) // -1
	check("Reshape 0 and -1", node("Reshape", nil), []*Tensor{f32([]int{1, 2, 2}, 1, 2, 3, 4), shape}, []int{1, 4}, 1, 2, 3, 4)

	_, err := runNode(node("Atan", nil), []*Tensor{f32([]int{1}, 1)})
	if err == nil || !strings.Contains(err.Error(), "operator Atan") {
		t.Fatalf("an unsupported operator: %v", err)
	}
	half := &Tensor{DType: "<f2", Shape: []int{1}, Data: make([]byte, 2)}
	_, err = runNode(node("Add", nil), []*Tensor{half, half})
	if err == nil || !strings.Contains(err.Error(), "Add on <f2") {
		t.Fatalf("an unsupported dtype: %v", err)
	}
}
