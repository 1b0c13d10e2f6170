package main

import (
	"math"
	"math/big"
	"math/rand"
	"testing"
)

// randomArguments: values of many scales, both signs, subnormals included.
func randomArguments(rng *rand.Rand, count int) []float32 {
	out := make([]float32, count)
	for i := range out {
		v := float32(math.Ldexp(rng.Float64()+0.5, rng.Intn(40)-30))
		if i%50 == 0 {
			v = math.Float32frombits(uint32(rng.Intn(1 << 23))) // subnormal
		}
		if rng.Intn(2) == 0 {
			v = -v
		}
		out[i] = v
	}
	return out
}

// The float64 filter and the math/big route agree on random and edge arguments, and the
// special values are IEEE's (and MPFR's).
func TestErfAndTanhAgainstBig(t *testing.T) {
	rng := rand.New(rand.NewSource(30))
	args := append(randomArguments(rng, 3000), 1e-45, -1e-45, 0x1p-126, 3.9, 3.92, 3.95, 3.99, -3.93, 9, 9.01,
		9.02, 9.9, -9.015, 0.5, 1, 2, 0x1p-12, 0x1p-13)
	for _, x := range args {
		if ax := math.Abs(float64(x)); ax < 4 {
			want := decideInBig(func(prec uint) *big.Float { return bigErf(float64(x), prec) })
			if got := erf32(x); !sameBits(got, want) {
				t.Fatalf("erf(%g) = %g, big %g", x, got, want)
			}
		}
		if ax := math.Abs(float64(x)); ax < 10 {
			want := decideInBig(func(prec uint) *big.Float { return bigTanh(float64(x), prec) })
			if got := tanh32(x); !sameBits(got, want) {
				t.Fatalf("tanh(%g) = %g, big %g", x, got, want)
			}
		}
	}
	inf := float32(math.Inf(1))
	for _, c := range []struct{ x, erf, tanh float32 }{
		{0, 0, 0}, {negZero, negZero, negZero}, {inf, 1, 1}, {-inf, -1, -1}, {4, 1, 0.9993292997390670},
		{-10, -1, -1}, {1e-45, 1e-45, 1e-45}, // erf(2^-149) = 2^-149 * 1.128...: rounds to 2^-149
	} {
		if got := erf32(c.x); !sameBits(got, c.erf) {
			t.Fatalf("erf(%g) = %g, want %g", c.x, got, c.erf)
		}
		if got := tanh32(c.x); !sameBits(got, c.tanh) {
			t.Fatalf("tanh(%g) = %g, want %g", c.x, got, c.tanh)
		}
	}
	if nan := float32(math.NaN()); erf32(nan) == erf32(nan) || tanh32(nan) == tanh32(nan) {
		t.Fatal("erf or tanh of NaN is not NaN")
	}
	// Values every float32 library agrees on (MPFR): erf(1) and tanh(1).
	if erf32(1) != 0.84270079 || tanh32(1) != 0.76159416 {
		t.Fatalf("erf(1) = %.9g, tanh(1) = %.9g", erf32(1), tanh32(1))
	}
}

// bigPi and bigLog at 200 bits against known digits.
func TestBigConstants(t *testing.T) {
	pi, _ := new(big.Float).SetPrec(200).SetString("3.14159265358979323846264338327950288419716939937510582097494459")
	ln10, _ := new(big.Float).SetPrec(200).SetString("2.30258509299404568401799145468436420760110148862877297603332790")
	for _, c := range []struct {
		what      string
		got, want *big.Float
	}{{"pi", bigPi(200), pi}, {"ln 10", bigLog(10, 200), ln10}} {
		diff := new(big.Float).Sub(c.got, c.want)
		if diff.Abs(diff).Cmp(new(big.Float).SetMantExp(big.NewFloat(1), -180)) > 0 {
			t.Fatalf("%s: %s, want %s", c.what, c.got.Text('g', 50), c.want.Text('g', 50))
		}
	}
}

func TestPow(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	f32inf := float32(inf)
	for _, c := range []struct {
		x    float32
		y    float64
		odd  bool
		want float32
	}{
		// IEEE 754's special cases.
		{float32(nan), 0, false, 1}, {1, nan, false, 1}, {negZero, 0.5, false, 0}, {-f32inf, 0.5, false, f32inf},
		{negZero, -3, true, -f32inf}, {negZero, -2, false, f32inf}, {negZero, 3, true, negZero}, {0, -1, true, f32inf},
		{-1, inf, false, 1}, {-1, -inf, false, 1}, {0.5, inf, false, 0}, {2, inf, false, f32inf}, {0.5, -inf, false, f32inf},
		{-f32inf, 3, true, -f32inf}, {-f32inf, -3, true, negZero}, {-f32inf, 2, false, f32inf}, {f32inf, -1, true, 0},
		{-1, 3, true, -1}, {-1, 4, false, 1}, {-2, 0.5, false, float32(nan)}, {float32(nan), 1, true, float32(nan)},
		// Exact values and float32 midpoints, rounded to even.
		{257, 3, true, float32(16974592)},                  // 257^3 = 16974593: a tie between 16974592 and 16974594
		{4097, 2, false, float32(4097) * float32(4097)},    // a tie too
		{0x1p-100, 1.5, false, 0},                          // 2^-150: half the smallest subnormal, to +0
		{9 * 0x1p-100, 1.5, false, float32(14 * 0x1p-149)}, // 13.5 * 2^-149
		{16, 0.25, false, 2}, {0.25, -0.5, false, 2}, {-3, 3, true, -27}, {-2, -1, true, -0.5},
		{2, 128, false, f32inf}, {2, -150, false, 0}, {-2, -149, true, -0x1p-149}, {0.75, 1000, false, 0},
	} {
		if got := pow32(c.x, c.y, c.odd); !sameBits(got, c.want) {
			t.Fatalf("pow(%g, %g) = %g, want %g", c.x, c.y, got, c.want)
		}
	}
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 1500; i++ {
		x := float32(math.Abs(float64(randomArguments(rng, 1)[0])))
		y := []float64{2, 3, -1, 0.5, -0.5, 1.5, float64(float32(rng.NormFloat64() * 4)), float64(rng.Intn(40) - 20)}[i%8]
		if y == 2 && !sameBits(pow32(x, y, false), x*x) {
			t.Fatalf("pow(%g, 2) = %g, x * x = %g", x, pow32(x, y, false), x*x)
		}
		scale := y * math.Log2(float64(x))
		if _, exact := exactPower(x, y); exact || scale > 127 || scale < -148 {
			continue
		}
		want := decideInBig(func(prec uint) *big.Float { return bigPow(float64(x), y, prec) })
		if got := pow32(x, y, false); !sameBits(got, want) {
			t.Fatalf("pow(%g, %g) = %g, big %g", x, y, got, want)
		}
	}
}

func TestLayerNormalizationAndReductions(t *testing.T) {
	attrs := map[string]*Attribute{"epsilon": {F: 0}}
	// Rows [1, 3] and [10000, 10002]: mean 2 and 10001, d = -1, 1, var 1, std 1.
	x := f32([]int{2, 2}, 1, 3, 10000, 10002)
	out := runOne(t, opNode("LayerNormalization", attrs, "y", "mean", "inv_std"), x, f32([]int{2}, 2, 0.5), f32([]int{1}, 1))
	wantBits(t, "LayerNormalization", out[0], []int{2, 2}, -1, 1.5, -1, 1.5)
	wantBits(t, "LayerNormalization Mean", out[1], []int{2, 1}, 2, 10001)
	wantBits(t, "LayerNormalization InvStdDev", out[2], []int{2, 1}, 1, 1)

	nan := float32(math.NaN())
	z := f32([]int{2, 3}, negZero, 0, negZero, negZero, negZero, nan)
	wantBits(t, "ReduceMax of zeros", runOne(t, opNode("ReduceMax", map[string]*Attribute{"axes": ints(1)}), z)[0], []int{2, 1}, 0, nan)
	wantBits(t, "ReduceMin of zeros", runOne(t, opNode("ReduceMin", map[string]*Attribute{"axes": ints(1), "keepdims": {I: 0}}), z)[0], []int{2}, negZero, nan)
	s := f32([]int{2, 2}, 1, 0x1p-30, -1, 3)
	wantBits(t, "ReduceSum all", runOne(t, opNode("ReduceSum", nil), s)[0], []int{1, 1}, 3)
	wantBits(t, "ReduceSum axis 0", runOne(t, opNode("ReduceSum", nil), s, int64Tensor([]int{1}, []int64{0}))[0], []int{1, 2}, 0, 3)
	wantBits(t, "ReduceMean axis -1", runOne(t, opNode("ReduceMean", map[string]*Attribute{"axes": ints(-1)}), s)[0], []int{2, 1}, 0.5, 1)
	wantBits(t, "ReduceSum noop", runOne(t, opNode("ReduceSum", map[string]*Attribute{"noop_with_empty_axes": {I: 1}}), s)[0], []int{2, 2}, 1, 0x1p-30, -1, 3)
	empty := &Tensor{DType: "<f4", Shape: []int{2, 0}}
	wantBits(t, "ReduceMean of nothing", runOne(t, opNode("ReduceMean", map[string]*Attribute{"axes": ints(1)}), empty)[0], []int{2, 1}, nan, nan)
	wantBits(t, "ReduceMax of nothing", runOne(t, opNode("ReduceMax", map[string]*Attribute{"axes": ints(1)}), empty)[0], []int{2, 1},
		float32(math.Inf(-1)), float32(math.Inf(-1)))
}
