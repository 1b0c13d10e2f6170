package main

// The correctly rounded functions of stage (b) (docs/numerics.md, section 3.3): exp (in
// Softmax) and sigmoid, RN_float32(f(x)). Each is evaluated in float64 (Go's math.Exp is within
// an ulp or two of float64); when the bound below cannot decide the float32 rounding (Ziv's
// test), the value is computed again in math/big at a precision that grows until it can.
// math/big has no Exp: bigExp is a Taylor series with argument reduction.

import (
	"math"
	"math/big"
)

// float64FunctionBound is the relative error allowed a float64 evaluation: 2^-44, far above
// math.Exp's error and the few roundings of the operations around it.
const float64FunctionBound = 0x1p-44

// roundedByBound returns RN_float32(v) when every value within bound * |v| of v rounds to it.
func roundedByBound(v, bound float64) (float32, bool) {
	err := math.Abs(v) * bound
	lo, hi := float32(v-err), float32(v+err)
	return lo, math.Float32bits(lo) == math.Float32bits(hi)
}

// exp32 is RN_float32(e^x).
func exp32(x float32) float32 {
	switch {
	case x != x:
		return x
	case x == 0:
		return 1 // the one argument whose exponential is exact
	case x > 89: // e^89 is past float32's range
		return float32(math.Inf(1))
	case x < -104: // e^-104 is below half the smallest subnormal, 2^-150
		return 0
	}
	if y, ok := roundedByBound(math.Exp(float64(x)), float64FunctionBound); ok {
		return y
	}
	return decideInBig(func(prec uint) *big.Float { return bigExp(float64(x), prec) })
}

// sigmoid32 is RN_float32(1 / (1 + e^-x)).
func sigmoid32(x float32) float32 {
	switch {
	case x != x:
		return x
	case x == 0:
		return 0.5
	case x > 18: // 1 - sigmoid(x) < 2^-25: rounds to 1
		return 1
	case x < -104: // below 2^-150: rounds to +0
		return 0
	}
	if y, ok := roundedByBound(1/(1+math.Exp(-float64(x))), float64FunctionBound); ok {
		return y
	}
	return decideInBig(func(prec uint) *big.Float {
		one := new(big.Float).SetPrec(prec).SetInt64(1)
		t := bigExp(-float64(x), prec)
		return t.Quo(one, t.Add(t, one))
	})
}

// decideInBig evaluates f at growing precisions until the value, within the evaluation's
// error (a relative 2^(16 - prec), far above the Taylor series' and the roundings' error),
// has one float32 rounding. The functions here are transcendental at every argument that
// reaches this point (x != 0), so their values are never a float32 midpoint and this ends.
func decideInBig(f func(prec uint) *big.Float) float32 {
	for prec := uint(128); ; prec *= 2 {
		v := f(prec)
		err := new(big.Float).SetPrec(prec).SetMantExp(new(big.Float).Abs(v), 16-int(prec))
		lo := new(big.Float).SetPrec(prec).Sub(v, err)
		hi := new(big.Float).SetPrec(prec).Add(v, err)
		a, _ := lo.Float32()
		b, _ := hi.Float32()
		if math.Float32bits(a) == math.Float32bits(b) {
			return a
		}
	}
}

// bigExp is e^x at precision prec (relative error well below 2^(20 - prec) for |x| < 2^10).
func bigExp(x float64, prec uint) *big.Float {
	return bigExpOf(new(big.Float).SetFloat64(x), prec)
}

// bigExpOf is e^x at precision prec (relative error well below 2^(20 - prec) for |x| < 2^10):
// e^x = (e^(x / 2^k))^(2^k), the inner value by its Taylor series, |x / 2^k| < 2^-8.
func bigExpOf(x *big.Float, prec uint) *big.Float {
	work := prec + 32
	k := 8
	if e := x.MantExp(nil); e > 0 && x.Sign() != 0 {
		k += e
	}
	r := new(big.Float).SetPrec(work).SetMantExp(new(big.Float).SetPrec(work).Set(x), -k)
	sum := new(big.Float).SetPrec(work).SetInt64(1)
	term := new(big.Float).SetPrec(work).SetInt64(1)
	limit := new(big.Float).SetPrec(work).SetMantExp(big.NewFloat(1), -int(work))
	for n := int64(1); ; n++ {
		term.Mul(term, r)
		term.Quo(term, new(big.Float).SetPrec(work).SetInt64(n))
		sum.Add(sum, term)
		if new(big.Float).Abs(term).Cmp(limit) < 0 {
			break
		}
	}
	for i := 0; i < k; i++ {
		sum.Mul(sum, sum)
	}
	return sum.SetPrec(prec)
}

// softmax along axis (opset 13 on; before 13 on the input coerced to 2-D at axis): m =
// ReduceMax(x); d = x - m; e = CR exp(d); s = CR ReduceSum(e); y = e / s (numerics.md, 4).
func softmax(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireFloat32(n, in, 1); err != nil {
		return nil, err
	}
	shape := in[0].Shape
	rank := len(shape)
	defaultAxis := int64(-1)
	if n.Opset < 13 {
		defaultAxis = 1
	}
	axis, err := normalizeAxis(n, attrInt(n, "axis", defaultAxis), rank)
	if err != nil {
		return nil, err
	}
	outer, length, inner := elementCount(shape[:axis]), shape[axis], elementCount(shape[axis+1:])
	if n.Opset < 13 {
		outer, length, inner = elementCount(shape[:axis]), elementCount(shape[axis:]), 1
	}
	x := in[0].Float32s()
	e, ones := make([]float32, length), make([]float32, length)
	for i := range ones {
		ones[i] = 1
	}
	for o := 0; o < outer; o++ {
		for j := 0; j < inner; j++ {
			at := func(i int) int { return (o*length+i)*inner + j }
			m := x[at(0)]
			for i := 1; i < length && m == m; i++ {
				if v := x[at(i)]; v > m || v != v {
					m = v
					if v != v {
						break
					}
				}
			}
			for i := range e {
				e[i] = exp32(x[at(i)] - m)
			}
			s := dotRN32(e, ones, 1, 0)
			for i := range e {
				x[at(i)] = e[i] / s
			}
		}
	}
	return []*Tensor{float32Tensor(shape, x)}, nil
}
