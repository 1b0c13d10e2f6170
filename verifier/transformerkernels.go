package main

// Stage (c) of issue 30: the float operators of transformers (all-MiniLM-L6 in float32), from
// docs/numerics.md (sections 2, 3.2, 3.3 and 4) and ONNX's operator definitions: the correctly
// rounded erf, tanh and pow (a float64 filter, then math/big: see expkernels.go), the
// reductions, LayerNormalization's two-pass composite, Sqrt and Neg.

import (
	"encoding/binary"
	"math"
	"math/big"
)

// unary is an elementwise float32 operator.
func unary(f func(float32) float32) kernel {
	return func(n *Node, in []*Tensor) ([]*Tensor, error) {
		if err := requireFloat32(n, in, 1); err != nil {
			return nil, err
		}
		x := in[0].Float32s()
		for i, v := range x {
			x[i] = f(v)
		}
		return []*Tensor{float32Tensor(in[0].Shape, x)}, nil
	}
}

// erf32 is RN_float32(erf(x)); erf(+-0) = +-0, erf(+-inf) = +-1 (1 - erf(4) < 2^-25).
func erf32(x float32) float32 { return oddToOne(x, 4, math.Erf, bigErf) }

// tanh32 is RN_float32(tanh(x)); tanh(+-0) = +-0, tanh(+-inf) = +-1 (1 - tanh(10) < 2^-25).
func tanh32(x float32) float32 { return oddToOne(x, 10, math.Tanh, bigTanh) }

// oddToOne is RN_float32(f(x)) of an odd function f with f(0) = 0 that rounds to +-1 from
// |x| >= one on: the float64 value f64(x) where the bound decides, else exact(x, precision).
func oddToOne(x, one float32, f64 func(float64) float64, exact func(float64, uint) *big.Float) float32 {
	switch {
	case x != x || x == 0:
		return x
	case x >= one:
		return 1
	case x <= -one:
		return -1
	}
	if y, ok := roundedByBound(f64(float64(x)), float64FunctionBound); ok {
		return y
	}
	return decideInBig(func(prec uint) *big.Float { return exact(float64(x), prec) })
}

// bigTanh is tanh(x) = sign(x) (1 - t) / (1 + t), t = e^(-2|x|), at precision prec. 1 - t
// cancels by up to 150 bits for float32 arguments (|x| >= 2^-149): the work precision covers it.
func bigTanh(x float64, prec uint) *big.Float {
	work := prec + 192
	t := bigExp(-2*math.Abs(x), work)
	one := new(big.Float).SetPrec(work).SetInt64(1)
	y := new(big.Float).SetPrec(work).Sub(one, t)
	y.Quo(y, new(big.Float).SetPrec(work).Add(one, t))
	if x < 0 {
		y.Neg(y)
	}
	return y.SetPrec(prec)
}

// bigErf is erf(x) = 2 / sqrt(pi) e^(-x^2) sum_n 2^n x^(2n+1) / (1 3 5 ... (2n+1)) at precision
// prec, for |x| < 4: the terms are all of x's sign (no cancellation); the largest is below
// e^(x^2) times the first, which the work precision's 64 extra bits cover.
func bigErf(x float64, prec uint) *big.Float {
	work := prec + 64
	bx := new(big.Float).SetPrec(work).SetFloat64(x)
	twoX2 := new(big.Float).SetPrec(work).Mul(bx, bx)
	twoX2.Add(twoX2, twoX2)
	term := new(big.Float).SetPrec(work).Set(bx)
	sum := new(big.Float).SetPrec(work).Set(bx)
	limit := new(big.Float).SetPrec(work).SetMantExp(new(big.Float).Abs(bx), -int(work))
	for k := int64(3); new(big.Float).Abs(term).Cmp(limit) >= 0; k += 2 {
		term.Mul(term, twoX2)
		term.Quo(term, new(big.Float).SetPrec(work).SetInt64(k))
		sum.Add(sum, term)
	}
	sum.Mul(sum, bigExp(-x*x, work)) // x * x: exact, x a float32 value
	sum.Mul(sum, new(big.Float).SetPrec(work).SetInt64(2))
	return sum.Quo(sum, new(big.Float).SetPrec(work).Sqrt(bigPi(work))).SetPrec(prec)
}

// bigPi is pi at precision prec, by Machin's formula: 16 atan(1/5) - 4 atan(1/239).
func bigPi(prec uint) *big.Float {
	work := prec + 16
	atanInverse := func(m int64) *big.Float {
		inv := new(big.Float).SetPrec(work).Quo(big.NewFloat(1).SetPrec(work), new(big.Float).SetPrec(work).SetInt64(m))
		square := new(big.Float).SetPrec(work).Mul(inv, inv)
		power := new(big.Float).SetPrec(work).Set(inv)
		sum := new(big.Float).SetPrec(work).Set(inv)
		limit := new(big.Float).SetPrec(work).SetMantExp(big.NewFloat(1), -int(work))
		for k := int64(3); power.Cmp(limit) >= 0; k += 2 {
			power.Mul(power, square)
			term := new(big.Float).SetPrec(work).Quo(power, new(big.Float).SetPrec(work).SetInt64(k))
			if k%4 == 3 {
				sum.Sub(sum, term)
			} else {
				sum.Add(sum, term)
			}
		}
		return sum
	}
	pi := new(big.Float).SetPrec(work).Mul(atanInverse(5), new(big.Float).SetPrec(work).SetInt64(16))
	return pi.Sub(pi, new(big.Float).SetPrec(work).Mul(atanInverse(239), new(big.Float).SetPrec(work).SetInt64(4)))
}

// neg32 is -x (a NaN is made canonical where the tensor is written).
func neg32(x float32) float32 { return -x }

// layerNormalization normalizes over the axes from axis on, in float32 (numerics.md, section
// 4): mean = CR ReduceMean(x); d = x - mean; var = CR ReduceMean(d * d); std = sqrt(var + eps);
// y = d / std; y = y * scale + B; the outputs Mean = mean and InvStdDev = 1 / std.
func layerNormalization(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireFloat32(n, in, 2); err != nil {
		return nil, err
	}
	if stash := attrInt(n, "stash_type", 1); stash != 1 {
		return nil, badInput("LayerNormalization %s with stash_type %d is not supported by sealverify replay yet (float32 only)", quoteForMessage(n.Name), stash)
	}
	x := in[0]
	axis, err := normalizeAxis(n, attrInt(n, "axis", -1), len(x.Shape))
	if err != nil {
		return nil, err
	}
	normalized := x.Shape[axis:]
	params := []*Tensor{in[1], nil}
	if len(in) > 2 && in[2] != nil {
		if in[2].DType != "<f4" {
			return nil, unsupportedDtype(n, in[2])
		}
		params[1] = in[2]
	}
	scaleBias := make([][]float32, 2)
	for k, t := range params {
		if t == nil {
			continue
		}
		shape, err := broadcastShape(t.Shape, normalized)
		if err != nil || elementCount(shape) != elementCount(normalized) {
			return nil, badInput("LayerNormalization %s: a parameter of shape %v for the normalized shape %v", quoteForMessage(n.Name), t.Shape, normalized)
		}
		values := t.Float32s()
		for _, at := range broadcastIndex(t.Shape, normalized) {
			scaleBias[k] = append(scaleBias[k], values[at])
		}
	}
	eps := attrFloat(n, "epsilon", 1e-5)
	values := x.Float32s()
	length := elementCount(normalized)
	groups := elementCount(x.Shape[:axis])
	means, invStd := make([]float32, groups), make([]float32, groups)
	squares := make([]float32, length)
	for g := 0; g < groups; g++ {
		row := values[g*length : (g+1)*length]
		mean := meanRN32(row)
		for i, v := range row {
			d := v - mean
			row[i] = d
			squares[i] = d * d
		}
		std := sqrt32(meanRN32(squares) + eps)
		for i, d := range row {
			y := d / std
			if scaleBias[0] != nil {
				y = float32(y * scaleBias[0][i])
			}
			if scaleBias[1] != nil {
				y += scaleBias[1][i]
			}
			row[i] = y
		}
		means[g], invStd[g] = mean, 1/std
	}
	statsShape := append([]int{}, x.Shape[:axis]...)
	for range normalized {
		statsShape = append(statsShape, 1)
	}
	return []*Tensor{float32Tensor(x.Shape, values), float32Tensor(statsShape, means), float32Tensor(statsShape, invStd)}, nil
}

// reduction is a Reduce* operator: each output element is f of the slice over the reduced
// axes (the axes input from ReduceSum 13 and the others' opset 18 on, else the attribute; none
// given: every axis, or nothing with noop_with_empty_axes), keepdims as ONNX says.
func reduction(f func([]float32) float32) kernel {
	return func(n *Node, in []*Tensor) ([]*Tensor, error) {
		if err := requireFloat32(n, in, 1); err != nil {
			return nil, err
		}
		x := in[0]
		rank := len(x.Shape)
		var axes []int64
		if a, ok := n.Attributes["axes"]; ok {
			axes = a.Ints
		}
		if len(in) > 1 && in[1] != nil {
			if in[1].DType != "<i8" || len(in[1].Shape) != 1 {
				return nil, badInput("%s %s: axes must be a 1-D int64 tensor", n.OpType, quoteForMessage(n.Name))
			}
			axes = in[1].Int64s()
		}
		if len(axes) == 0 && attrInt(n, "noop_with_empty_axes", 0) != 0 {
			return []*Tensor{x}, nil
		}
		reduced := make([]bool, rank)
		for _, a := range axes {
			d, err := normalizeAxis(n, a, rank)
			if err != nil {
				return nil, err
			}
			reduced[d] = true
		}
		if len(axes) == 0 {
			for d := range reduced {
				reduced[d] = true
			}
		}
		keep := attrInt(n, "keepdims", 1) != 0
		var outShape, kept, sliceShape []int
		for d, size := range x.Shape {
			switch {
			case !reduced[d]:
				outShape, kept = append(outShape, size), append(kept, size)
			case keep:
				outShape = append(outShape, 1)
			}
			if reduced[d] {
				sliceShape = append(sliceShape, size)
			}
		}
		// Each element's output position and its place in its slice, in C order.
		values := x.Float32s()
		outCount, sliceLen := elementCount(kept), elementCount(sliceShape)
		slices := make([]float32, outCount*sliceLen)
		counter := make([]int, rank)
		for _, v := range values {
			out, at := 0, 0
			for d, c := range counter {
				if reduced[d] {
					at = at*x.Shape[d] + c
				} else {
					out = out*x.Shape[d] + c
				}
			}
			slices[out*sliceLen+at] = v
			advance(counter, x.Shape)
		}
		result := make([]float32, outCount)
		for o := range result {
			result[o] = f(slices[o*sliceLen : (o+1)*sliceLen])
		}
		return []*Tensor{float32Tensor(outShape, result)}, nil
	}
}

// sumRN32 is RN_float32(sum x), +0 for no values (numerics.md, section 3.2).
func sumRN32(x []float32) float32 {
	ones := make([]float32, len(x))
	for i := range ones {
		ones[i] = 1
	}
	return dotRN32(x, ones, 1, 0)
}

// max32 is the largest value, -inf for no values, NaN if any is NaN; of zeros, +0 if there is
// one (IEEE 754-2019's maximum orders -0 below +0).
func max32(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		switch {
		case v != v:
			return v
		case v > m || v == 0 && m == 0 && !math.Signbit(float64(v)):
			m = v
		}
	}
	return m
}

// min32 is the smallest value, +inf for no values, NaN if any is NaN; of zeros, -0 if there is one.
func min32(x []float32) float32 {
	m := float32(math.Inf(1))
	for _, v := range x {
		switch {
		case v != v:
			return v
		case v < m || v == 0 && m == 0 && math.Signbit(float64(v)):
			m = v
		}
	}
	return m
}

// pow is RN(x^y) elementwise with broadcasting, x float32 and y of its own type (float32,
// float64, int32 or int64: never first rounded to x's type), IEEE 754's special cases.
func pow(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireFloat32(n, in, 1); err != nil {
		return nil, err
	}
	if len(in) < 2 || in[1] == nil {
		return nil, badInput("Pow %s: no exponent", quoteForMessage(n.Name))
	}
	var exponents []float64
	var odd []bool // whether each exponent is an odd integer, from its own type
	switch y := in[1]; y.DType {
	case "<f4":
		for _, v := range y.Float32s() {
			exponents = append(exponents, float64(v))
		}
	case "<f8":
		for i := 0; i < len(y.Data)/8; i++ {
			exponents = append(exponents, math.Float64frombits(binary.LittleEndian.Uint64(y.Data[8*i:])))
		}
	case "<i8":
		for _, v := range y.Int64s() {
			exponents, odd = append(exponents, float64(v)), append(odd, v%2 != 0)
		}
	case "<i4":
		for i := 0; i < len(y.Data)/4; i++ {
			v := int32(binary.LittleEndian.Uint32(y.Data[4*i:]))
			exponents, odd = append(exponents, float64(v)), append(odd, v%2 != 0)
		}
	default:
		return nil, unsupportedDtype(n, y)
	}
	if odd == nil {
		for _, e := range exponents {
			odd = append(odd, isOddInteger(e))
		}
	}
	shape, err := broadcastShape(in[0].Shape, in[1].Shape)
	if err != nil {
		return nil, badInput("Pow %s: %v", quoteForMessage(n.Name), err)
	}
	x := in[0].Float32s()
	ix, iy := broadcastIndex(in[0].Shape, shape), broadcastIndex(in[1].Shape, shape)
	out := make([]float32, len(ix))
	for i := range out {
		out[i] = pow32(x[ix[i]], exponents[iy[i]], odd[iy[i]])
	}
	return []*Tensor{float32Tensor(shape, out)}, nil
}

// isOddInteger: whether a float64 is an odd integer (every float64 of 2^53 or more is even).
func isOddInteger(y float64) bool {
	return math.Abs(y) < 1<<53 && y == math.Trunc(y) && math.Mod(y, 2) != 0
}

// pow32 is RN_float32(x^y), odd saying whether y is an odd integer (exactly, from y's type):
// IEEE 754's special cases (those of C99's pow), then |x|^y with x's sign for an odd y.
func pow32(x float32, y float64, odd bool) float32 {
	ax := math.Abs(float64(x))
	switch {
	case y == 0 || x == 1:
		return 1
	case x != x || y != y:
		return float32(math.NaN())
	case x < 0 && !math.IsInf(ax, 0) && !math.IsInf(y, 0) && y != math.Trunc(y):
		return float32(math.NaN())
	}
	negative := math.Signbit(float64(x)) && odd
	sign := func(v float32) float32 {
		if negative {
			return -v
		}
		return v
	}
	if ax == 0 || ax == 1 || math.IsInf(ax, 0) || math.IsInf(y, 0) {
		return sign(float32(math.Pow(ax, y))) // exact: 0, 1 or infinity
	}
	// Far out of float32's range (2^-150 .. 2^128) the result is 0 or infinity, however rounded.
	if scale := y * math.Log2(ax); scale > 130 {
		return sign(float32(math.Inf(1)))
	} else if scale < -152 {
		return sign(0)
	}
	if exact, ok := exactPower(float32(ax), y); ok {
		return sign(exact)
	}
	// Go's math.Pow squares for the integer part of y: its relative error grows with |y| up to
	// about |y| float64 ulps, which the bound covers with a wide margin.
	if v, ok := roundedByBound(math.Pow(ax, y), float64FunctionBound+math.Abs(y)*0x1p-48); ok {
		return sign(v)
	}
	return sign(decideInBig(func(prec uint) *big.Float { return bigPow(ax, y, prec) }))
}

// exactPower is RN_float32(x^y) for x > 0 when x^y is a rational number whose odd part has at
// most 64 bits: the only values that can be a rounding midpoint of float32 (an odd significand
// of 25 bits or fewer), which decideInBig could never decide. With x = X 2^ex (X odd) and y =
// m 2^-j (m odd, j >= 0), x^y is rational only if X is a 2^j-th power W^(2^j) and 2^j divides
// ex m; X < 2^24 and W >= 3 odd leave j <= 3 when X > 1. A negative y with X > 1 gives 1 /
// W^|m|, not a dyadic number.
func exactPower(x float32, y float64) (float32, bool) {
	frac, ex := math.Frexp(float64(x))
	X := uint64(frac * (1 << 53))
	ex -= 53
	for X%2 == 0 {
		X /= 2
		ex++
	}
	m, j := y, 0
	for m != math.Trunc(m) {
		m *= 2
		j++
	}
	// An integer y: X^y 2^(ex y) (m may be even; j is 0).
	if X > 1 && (m < 0 || j > 3 || m > 64) {
		return 0, false
	}
	root := uint64(1)
	if X > 1 {
		root = uint64(math.Round(math.Pow(float64(X), math.Ldexp(1, -j))))
		check := new(big.Int).Exp(new(big.Int).SetUint64(root), big.NewInt(int64(1)<<j), nil)
		if check.Cmp(new(big.Int).SetUint64(X)) != 0 {
			return 0, false
		}
	}
	// exponent of two: ex m / 2^j must be an integer.
	twos := float64(ex) * m
	if math.Mod(twos, math.Ldexp(1, j)) != 0 {
		return 0, false
	}
	power := int(twos / math.Ldexp(1, j))
	value := new(big.Float).SetPrec(4096)
	if m >= 0 {
		value.SetInt(new(big.Int).Exp(new(big.Int).SetUint64(root), big.NewInt(int64(m)), nil))
	} else {
		value.SetInt64(1) // root is 1 here: a power of two
	}
	value.SetMantExp(value, power)
	rounded, _ := value.Float32() // to nearest even, gradual underflow, overflow to infinity
	return rounded, true
}

// bigPow is x^y = e^(y ln x) for x > 0, at precision prec; |y ln x| < 106 (the result within
// float32's range, give or take), so an absolute error of the exponent of 2^(-prec - 24)
// is a relative error of the result below 2^(16 - prec).
func bigPow(x, y float64, prec uint) *big.Float {
	work := prec + 48
	exponent := bigLog(x, work)
	exponent.Mul(exponent, new(big.Float).SetPrec(work).SetFloat64(y))
	return bigExpOf(exponent, work).SetPrec(prec)
}

// bigLog is ln x for x > 0 at precision prec: x = f 2^e, f in [1/2, 1), ln x = 2 atanh((f - 1)
// / (f + 1)) + e ln 2, ln 2 = 2 atanh(1/3); each atanh by its series (|t| <= 1/3).
func bigLog(x float64, prec uint) *big.Float {
	work := prec + 32
	atanh := func(t *big.Float) *big.Float {
		square := new(big.Float).SetPrec(work).Mul(t, t)
		power := new(big.Float).SetPrec(work).Set(t)
		sum := new(big.Float).SetPrec(work).Set(t)
		limit := new(big.Float).SetPrec(work).SetMantExp(big.NewFloat(1), -int(work)-4)
		for k := int64(3); new(big.Float).Abs(power).Cmp(limit) >= 0; k += 2 {
			power.Mul(power, square)
			sum.Add(sum, new(big.Float).SetPrec(work).Quo(power, new(big.Float).SetPrec(work).SetInt64(k)))
		}
		return sum.Mul(sum, new(big.Float).SetPrec(work).SetInt64(2))
	}
	f, e := math.Frexp(x)
	one := new(big.Float).SetPrec(work).SetInt64(1)
	bf := new(big.Float).SetPrec(work).SetFloat64(f)
	t := new(big.Float).SetPrec(work).Sub(bf, one)
	t.Quo(t, new(big.Float).SetPrec(work).Add(bf, one))
	result := atanh(t)
	third := new(big.Float).SetPrec(work).Quo(one, new(big.Float).SetPrec(work).SetInt64(3))
	ln2 := atanh(third)
	result.Add(result, ln2.Mul(ln2, new(big.Float).SetPrec(work).SetInt64(int64(e))))
	return result.SetPrec(prec)
}
