package main

import (
	"bytes"
	"math"
	"math/big"
	"math/rand"
	"testing"
)

var negZero = float32(math.Copysign(0, -1))

// runOne runs a node and returns its output tensors, failing the test on an error.
func runOne(t *testing.T, n *Node, in ...*Tensor) []*Tensor {
	t.Helper()
	out, err := runNode(n, in)
	if err != nil {
		t.Fatalf("%s: %v", n.OpType, err)
	}
	return out
}

func opNode(op string, attrs map[string]*Attribute, outputs ...string) *Node {
	if attrs == nil {
		attrs = map[string]*Attribute{}
	}
	if len(outputs) == 0 {
		outputs = []string{"y"}
	}
	return &Node{Name: "n", OpType: op, Outputs: outputs, Attributes: attrs, Opset: 17}
}

func wantBits(t *testing.T, what string, got *Tensor, shape []int, want ...float32) {
	t.Helper()
	if len(got.Shape) != len(shape) || elementCount(got.Shape) != elementCount(shape) {
		t.Fatalf("%s: shape %v, want %v", what, got.Shape, shape)
	}
	if !bytes.Equal(got.Data, float32Tensor(nil, want).Data) {
		t.Fatalf("%s: %v, want %v", what, got.Float32s(), want)
	}
}

func ints(v ...int64) *Attribute { return &Attribute{Ints: v} }

func TestDataMovement(t *testing.T) {
	x := f32([]int{2, 3}, 1, 2, 3, 4, 5, 6)
	wantBits(t, "Transpose", runOne(t, opNode("Transpose", nil), x)[0], []int{3, 2}, 1, 4, 2, 5, 3, 6)
	wantBits(t, "Concat axis -1", runOne(t, opNode("Concat", map[string]*Attribute{"axis": {I: -1}}), x, f32([]int{2, 1}, 7, 8))[0],
		[]int{2, 4}, 1, 2, 3, 7, 4, 5, 6, 8)
	steps := int64Tensor([]int{1}, []int64{-2})
	sliced := runOne(t, opNode("Slice", nil), x, int64Tensor([]int{1}, []int64{-1}), int64Tensor([]int{1}, []int64{-100}),
		int64Tensor([]int{1}, []int64{1}), steps)[0]
	wantBits(t, "Slice backwards by 2", sliced, []int{2, 2}, 3, 1, 6, 4)
	shape := runOne(t, opNode("Shape", map[string]*Attribute{"start": {I: -1}}), x)[0]
	if !bytes.Equal(shape.Data, int64Tensor([]int{1}, []int64{3}).Data) {
		t.Fatalf("Shape start -1: %v", shape.Int64s())
	}
}

// Clip: x stays where it equals the lower bound, the upper bound wins where they are equal,
// NaN stays NaN, crossed bounds give the upper one.
func TestClipAtSignedZerosAndNaN(t *testing.T) {
	nan := float32(math.NaN())
	x := f32([]int{5}, 0, negZero, nan, -3, 3)
	got := runOne(t, opNode("Clip", nil), x, f32(nil, negZero), f32(nil, 5))[0]
	wantBits(t, "Clip [-0, 5]", got, []int{5}, 0, negZero, nan, negZero, 3)
	got = runOne(t, opNode("Clip", nil), x, nil, f32(nil, 0))[0]
	wantBits(t, "Clip [, +0]", got, []int{5}, 0, 0, nan, -3, 0)
	got = runOne(t, opNode("Clip", nil), x, f32(nil, 2), f32(nil, 1))[0]
	wantBits(t, "Clip crossed", got, []int{5}, 1, 1, nan, 1, 1)
}

// MaxPool: a NaN tap gives NaN, except with Indices (a NaN passed over unless it is the first
// tap); padding is never the maximum; SAME_UPPER pads at the end.
func TestMaxPoolAtNaNAndPadding(t *testing.T) {
	nan := float32(math.NaN())
	x := f32([]int{1, 1, 1, 4}, -5, nan, -7, nan)
	attrs := map[string]*Attribute{"kernel_shape": ints(1, 2), "strides": ints(1, 2)}
	wantBits(t, "MaxPool", runOne(t, opNode("MaxPool", attrs), x)[0], []int{1, 1, 1, 2}, nan, nan)
	out := runOne(t, opNode("MaxPool", attrs, "y", "i"), x)
	wantBits(t, "MaxPool with indices", out[0], []int{1, 1, 1, 2}, -5, -7)
	if !bytes.Equal(out[1].Data, int64Tensor([]int{2}, []int64{0, 2}).Data) {
		t.Fatalf("indices %v", out[1].Int64s())
	}
	attrs["pads"] = ints(0, 1, 0, 0) // the windows' first taps are padding, then NaN: passed over
	out = runOne(t, opNode("MaxPool", attrs, "y", "i"), f32([]int{1, 1, 1, 3}, nan, -2, nan))
	wantBits(t, "MaxPool with indices after padding", out[0], []int{1, 1, 1, 2}, float32(math.Inf(-1)), -2)
	if !bytes.Equal(out[1].Data, int64Tensor([]int{2}, []int64{-1, 1}).Data) { // -1: the padding's
		t.Fatalf("indices after padding %v", out[1].Int64s())
	}
	same := map[string]*Attribute{"kernel_shape": ints(1, 2), "auto_pad": {S: "SAME_UPPER"}}
	wantBits(t, "MaxPool SAME_UPPER", runOne(t, opNode("MaxPool", same), f32([]int{1, 1, 1, 3}, -1, -2, -3))[0],
		[]int{1, 1, 1, 3}, -1, -2, -3)
}

// AveragePool adds along the first axis, then the next: (2^24 + 1) + (1 - 2^24) = 1, where
// row-major order gives ((2^24 + 1) + 1) - 2^24 = 0.
func TestAveragePoolAddsAxisByAxis(t *testing.T) {
	x := f32([]int{1, 1, 2, 2}, 1<<24, 1, 1, -(1 << 24))
	got := runOne(t, opNode("AveragePool", map[string]*Attribute{"kernel_shape": ints(2, 2)}), x)[0]
	wantBits(t, "AveragePool", got, []int{1, 1, 1, 1}, 0.25)
	padded := map[string]*Attribute{"kernel_shape": ints(1, 3), "pads": ints(0, 1, 0, 1)}
	wantBits(t, "excluding padding", runOne(t, opNode("AveragePool", padded), f32([]int{1, 1, 1, 2}, 3, 6))[0], []int{1, 1, 1, 2}, 4.5, 4.5)
	padded["count_include_pad"] = &Attribute{I: 1}
	wantBits(t, "including padding", runOne(t, opNode("AveragePool", padded), f32([]int{1, 1, 1, 2}, 3, 6))[0], []int{1, 1, 1, 2}, 3, 3)
}

// Conv: groups, padding taps of value 0, a bias, and a tie decided exactly.
func TestConvGroupsPaddingAndTies(t *testing.T) {
	x := f32([]int{1, 2, 1, 2}, 1<<24, 1, 5, 7)
	w := f32([]int{2, 1, 1, 3}, 1, 1, 1, 0, 1, 0)
	attrs := map[string]*Attribute{"group": {I: 2}, "pads": ints(0, 1, 0, 1)}
	got := runOne(t, opNode("Conv", attrs), x, w, f32([]int{2}, 0.5, 0))[0]
	// channel 0: (0 + 2^24 + 1) + 0.5 and 2^24 + 1 + 0 + 0.5; channel 1: the centre taps.
	wantBits(t, "Conv", got, []int{1, 2, 1, 2}, 1<<24+2, 1<<24+2, 5, 7)
	got = runOne(t, opNode("Conv", attrs), x, w)[0]
	wantBits(t, "Conv tie to even", got, []int{1, 2, 1, 2}, 1<<24, 1<<24, 5, 7)
}

// HardSigmoid's + 0 makes a zero +0; HardSwish uses alpha RN(1/6); BatchNormalization is
// its float32 steps.
func TestHardSigmoidHardSwishBatchNormalization(t *testing.T) {
	nan := float32(math.NaN())
	x := f32([]int{5}, -2.5, negZero, 3, 10, nan)
	wantBits(t, "HardSigmoid", runOne(t, opNode("HardSigmoid", nil), x)[0], []int{5}, 0, 0.5, 1, 1, nan)
	sixth := float32(1.0 / 6.0)
	wantBits(t, "HardSwish", runOne(t, opNode("HardSwish", nil), x)[0], []int{5},
		-2.5*(float32(-2.5*sixth)+0.5), 0*negZero, 3, 10, nan)
	scale, bias, mean, variance := float32(1.5), float32(-0.25), float32(0.1), float32(2)
	f := scale / sqrt32(variance+1e-5)
	o := bias - float32(mean*f)
	got := runOne(t, opNode("BatchNormalization", nil), f32([]int{1, 1, 2}, 1, -3),
		f32([]int{1}, scale), f32([]int{1}, bias), f32([]int{1}, mean), f32([]int{1}, variance))[0]
	wantBits(t, "BatchNormalization", got, []int{1, 1, 2}, float32(1*f)+o, float32(-3*f)+o)
}

// The mean is the exact sum over n rounded once: a tie, a cancellation, signed zeros, IEEE's
// infinities.
func TestMeanIsCorrectlyRounded(t *testing.T) {
	reference := func(x []float32) float32 {
		sum := new(big.Rat)
		for _, v := range x {
			sum.Add(sum, new(big.Rat).SetFloat64(float64(v)))
		}
		f, _ := sum.Quo(sum, big.NewRat(int64(len(x)), 1)).Float32()
		return f
	}
	inf := float32(math.Inf(1))
	cases := [][]float32{
		{1 << 24, 1, 1 << 24, 1}, // (2^25 + 2) / 4: 2^23 + 0.5, exact
		{1 << 24, 1, 0},          // (2^24 + 1) / 3
		{3e38, 3e38, -3e38},      // a sum past float32's range, a mean within it
		{1, 2, 4},
		{float32(math.Ldexp(1, -149)), 0},       // a tie at the smallest subnormal: to +0
		{float32(math.Ldexp(3, -149)), 0, 0, 0}, // 0.75 * 2^-149: 2^-149
	}
	for _, x := range cases {
		if got, want := meanRN32(x), reference(x); !sameBits(got, want) {
			t.Fatalf("mean of %v: %v, want %v", x, got, want)
		}
	}
	if got := meanRN32([]float32{negZero, negZero}); math.Float32bits(got) != 0 {
		t.Fatalf("a zero mean of -0s must be +0: %v", got)
	}
	if got := meanRN32([]float32{inf, 1}); got != inf {
		t.Fatalf("mean with +inf: %v", got)
	}
	if got := meanRN32([]float32{inf, -inf}); got == got {
		t.Fatalf("mean of +inf and -inf: %v", got)
	}
}

// exp32 and sigmoid32 agree with their math/big route (decided at growing precision) on random
// arguments and at the edges: exact 0, overflow, subnormal results and underflow to zero.
func TestExpAndSigmoidAreCorrectlyRounded(t *testing.T) {
	viaBig := func(f func(float64, uint) *big.Float, x float32) float32 {
		return decideInBig(func(prec uint) *big.Float { return f(float64(x), prec) })
	}
	bigSigmoid := func(x float64, prec uint) *big.Float {
		one := new(big.Float).SetPrec(prec).SetInt64(1)
		e := bigExp(-x, prec)
		return e.Quo(one, e.Add(e, one))
	}
	args := []float32{1e-30, -1e-30, 0.5, -0.5, 88.72, 88.73, -87.3, -103.9, -103.97, -100, 17.9, -17.9, 1, 20, -20}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		args = append(args, float32((rng.Float64()*2-1)*math.Pow(2, float64(rng.Intn(14)-6))))
	}
	for _, x := range args {
		if x <= 88.7 {
			if got, want := exp32(x), viaBig(bigExp, x); !sameBits(got, want) {
				t.Fatalf("exp(%v): %v, want %v", x, got, want)
			}
		}
		if x > -103 {
			if got, want := sigmoid32(x), viaBig(bigSigmoid, x); !sameBits(got, want) {
				t.Fatalf("sigmoid(%v): %v, want %v", x, got, want)
			}
		}
	}
	if exp32(0) != 1 || exp32(negZero) != 1 || exp32(float32(math.Inf(-1))) != 0 || !math.IsInf(float64(exp32(89)), 1) {
		t.Fatalf("exp's special values")
	}
	if exp32(-104.5) != 0 || sigmoid32(-104.5) != 0 || sigmoid32(19) != 1 {
		t.Fatalf("underflow and saturation")
	}
	// Softmax of a row with a NaN is all NaN; of equal values, equal shares.
	out := runOne(t, opNode("Softmax", nil), f32([]int{2, 2}, 1, float32(math.NaN()), 3, 3))[0]
	nan := float32(math.NaN())
	wantBits(t, "Softmax", out, []int{2, 2}, nan, nan, 0.5, 0.5)
}
