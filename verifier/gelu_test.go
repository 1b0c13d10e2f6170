package main

import (
	"math"
	"math/big"
	"math/rand"
	"testing"
)

// The float64 filters and the math/big routes of both modes agree on random arguments and at the
// edges: subnormal results and their ties (x / 2 a float32 midpoint, which x^2 / sqrt(2 pi)
// decides), the underflow to -0, the cutoffs where the result is x.
func TestGeluAgainstBig(t *testing.T) {
	rng := rand.New(rand.NewSource(20))
	args := randomArguments(rng, 3000)
	for i := 0; i < 1500; i++ { // where the results are subnormal, and about 1
		args = append(args, float32(-10-rng.Float64()*4.5), float32(rng.NormFloat64()*3))
	}
	args = append(args, 0x1p-149, -0x1p-149, 3*0x1p-149, -3*0x1p-149, 0x1p-126, -0x1p-126, -14, -14.3, -14.4,
		-14.49, -10.4, -10.5, -10.99, 5.99, -5.99, 0.5, -0.5, 1, -1)
	undecided := 0
	for _, x := range args {
		xf := float64(x)
		if x > -14.5 && x < 6 {
			want := decideInBig(func(prec uint) *big.Float { return bigGelu(xf, prec) })
			if got := gelu32(x); !sameBits(got, want) {
				t.Fatalf("gelu(%g) = %g, big %g", x, got, want)
			}
			if _, ok := roundedByBound(xf*math.Erfc(-xf*(1/math.Sqrt2))/2, float64FunctionBound+(xf*xf+1)*0x1p-50); !ok {
				undecided++
			}
		}
		if x > -11 && x < 6 {
			want := decideInBig(func(prec uint) *big.Float { return bigGeluTanh(xf, prec) })
			if got := geluTanh32(x); !sameBits(got, want) {
				t.Fatalf("gelu_tanh(%g) = %g, big %g", x, got, want)
			}
		}
	}
	if undecided > len(args)/100 {
		t.Fatalf("the float64 bound left %d of %d arguments to math/big", undecided, len(args))
	}
	// Each route is within decideInBig's bound of itself at four times the precision.
	for _, x := range []float64{-14.49, -14, -10.99, -7.5, -1, -0x1p-149, 0x1p-149, 0.3, 5.99} {
		for _, route := range []func(float64, uint) *big.Float{bigGelu, bigGeluTanh} {
			v, precise := route(x, 128), route(x, 512)
			diff := new(big.Float).Sub(v, precise)
			if diff.Abs(diff).Cmp(new(big.Float).SetMantExp(new(big.Float).Abs(precise), 16-128)) > 0 {
				t.Fatalf("at %g: %s at 128 bits, %s at 512", x, v.Text('g', 40), precise.Text('g', 40))
			}
		}
	}
	// The shortcuts agree with the math/big routes at their edges.
	for _, c := range []struct {
		what string
		got  *big.Float
		want float32
	}{
		{"gelu(-14.5)", bigGelu(-14.5, 256), negZero}, {"gelu(6)", bigGelu(6, 256), 6},
		{"gelu_tanh(-11)", bigGeluTanh(-11, 256), negZero}, {"gelu_tanh(6)", bigGeluTanh(6, 256), 6},
	} {
		if v, _ := c.got.Float32(); !sameBits(v, c.want) {
			t.Fatalf("%s = %g in math/big, not %g", c.what, v, c.want)
		}
	}
}

// Values of sealtrace's logs (recorded as a black box), and the special values.
func TestGeluValues(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	bits := math.Float32frombits
	for _, c := range []struct{ x, gelu, tanh float32 }{
		{0, 0, 0}, {negZero, negZero, negZero}, {inf, inf, inf}, {-inf, nan, nan}, {nan, nan, nan},
		{0x1p-149, 0x1p-149, 0x1p-149}, {-0x1p-149, negZero, negZero}, // x / 2 = 2^-150: a tie x^2 decides
		{0x1p-148, 0x1p-149, 0x1p-149}, {-0x1p-148, -0x1p-149, -0x1p-149},
		{-14, bits(0x8000004e), negZero}, {-14.3, -0x1p-149, negZero}, {-14.4, negZero, negZero},
		{-10.4, bits(0x97c780c3), bits(0x800018e8)}, {-10.5, bits(0x970c59a1), bits(0x80000212)},
		{-11, bits(0x9326840f), negZero}, {1, bits(0x3f57625f), bits(0x3f57585c)},
		{-1, bits(0xbe227686), bits(0xbe229e91)}, {5.5, 5.5, 5.5}, {6, 6, 6}, {1e30, 1e30, 1e30},
	} {
		if got := gelu32(c.x); !sameBits(got, c.gelu) {
			t.Fatalf("gelu(%g) = %g (%08x), want %g", c.x, got, math.Float32bits(got), c.gelu)
		}
		if got := geluTanh32(c.x); !sameBits(got, c.tanh) {
			t.Fatalf("gelu_tanh(%g) = %g (%08x), want %g", c.x, got, math.Float32bits(got), c.tanh)
		}
	}
}

func TestGeluModes(t *testing.T) {
	x := f32([]int{3}, -1, 0, 1)
	wantBits(t, "Gelu", runOne(t, opNode("Gelu", nil), x)[0], []int{3}, gelu32(-1), 0, gelu32(1))
	tanh := opNode("Gelu", map[string]*Attribute{"approximate": {S: "tanh"}})
	wantBits(t, "Gelu tanh", runOne(t, tanh, x)[0], []int{3}, geluTanh32(-1), 0, geluTanh32(1))
	other := opNode("Gelu", map[string]*Attribute{"approximate": {S: "erf"}})
	if _, err := runNode(other, []*Tensor{x}); err == nil {
		t.Fatal("Gelu with approximate erf was run")
	}
}
