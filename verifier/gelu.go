package main

// Gelu (ONNX opset 20), correctly rounded as a whole function of the float32 argument
// (docs/numerics.md, section 3.3): gelu(x) = x Phi(x) = x erfc(-x / sqrt 2) / 2 for approximate
// "none", gelu_tanh(x) = x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2 for "tanh", the
// constants exact reals. As exp's route (expkernels.go): a float64 value under a bound, else
// math/big at growing precision.

import (
	"math"
	"math/big"
)

// gelu is Gelu elementwise, in the mode its approximate attribute names.
func gelu(n *Node, in []*Tensor) ([]*Tensor, error) {
	switch mode := attrString(n, "approximate", "none"); mode {
	case "none":
		return unary(gelu32)(n, in)
	case "tanh":
		return unary(geluTanh32)(n, in)
	default:
		return nil, badInput("Gelu %s with approximate %s is not supported by sealverify replay", quoteForMessage(n.Name), quoteForMessage(mode))
	}
}

// geluSpecial is the result at the arguments both modes share: NaN, zeros (the sign kept) and
// +inf stay; -inf gives NaN, the product -inf * 0 of the definition (sealtrace's logs, and
// ONNX's function body, say so); from 6 on the result rounds to x (1 - Phi(6) and
// 1 - sigmoid(2 sqrt(2 / pi) (6 + 0.044715 * 216)) are below 2^-26, under half of x's lower
// gap, 2^-24 x); below zeroBelow its magnitude is under 2^-150, and it rounds to -0.
func geluSpecial(x, zeroBelow float32) (float32, bool) {
	switch {
	case x != x || x == 0 || x >= 6:
		return x, true
	case math.IsInf(float64(x), -1):
		return float32(math.NaN()), true
	case x < zeroBelow:
		return float32(math.Copysign(0, -1)), true
	}
	return 0, false
}

// gelu32 is RN_float32(x Phi(x)). Below -14.5, |x Phi(x)| < phi(x) = e^(-x^2 / 2) / sqrt(2 pi)
// < 2^-152. The float64 value takes erfc at z = -x / sqrt 2, whose rounding (2^-52 relative)
// moves erfc(z) by up to (2 z^2 + 1) = (x^2 + 1) times as much (relatively) for z > 0, far less
// for z < 0: the bound covers that four times over, beside math.Erfc's own few ulps.
func gelu32(x float32) float32 {
	if y, ok := geluSpecial(x, -14.5); ok {
		return y
	}
	xf := float64(x)
	bound := float64FunctionBound + (xf*xf+1)*0x1p-50
	if y, ok := roundedByBound(xf*math.Erfc(-xf*(1/math.Sqrt2))/2, bound); ok {
		return y
	}
	return decideInBig(func(prec uint) *big.Float { return bigGelu(xf, prec) })
}

// geluTanh32 is RN_float32(gelu_tanh(x)) = RN_float32(x / (1 + e^(-w))), w = 2 sqrt(2 / pi)
// (x + 0.044715 x^3): 1 + tanh(w / 2) = 2 / (1 + e^(-w)), which does not cancel for x << 0.
// Below -11, |x| e^w < 2^-158 (and decreasing), so the result rounds to -0. w in float64 is
// within 2^-50 |w| (six roundings), which moves the result by as much relatively (the
// derivative of ln(1 / (1 + e^(-w))) is below 1): the bound covers it four times over.
func geluTanh32(x float32) float32 {
	if y, ok := geluSpecial(x, -11); ok {
		return y
	}
	xf := float64(x)
	const a, twoSqrt2OverPi = 0.044715, 2 * math.Sqrt2 / math.SqrtPi
	w := twoSqrt2OverPi * (xf + a*(xf*xf*xf))
	if y, ok := roundedByBound(xf/(1+math.Exp(-w)), float64FunctionBound+math.Abs(w)*0x1p-48); ok {
		return y
	}
	return decideInBig(func(prec uint) *big.Float { return bigGeluTanh(xf, prec) })
}

// bigGelu is x Phi(x) = x / 2 + x^2 phi(x) S at precision prec, phi(x) = e^(-x^2 / 2) /
// sqrt(2 pi) and S = sum_n x^(2n) / (1 3 5 ... (2n+1)) (Phi's series: terms of one sign; x^2 is
// exact). For x < 0 the sum cancels x / 2 down to |x Phi(x)| >= phi(x) / 2 (|x| >= 1; Phi(x)
// > 1/7 above -1): by at most 0.73 x^2 + 6 bits for |x| <= 14.5, which the work precision adds.
func bigGelu(x float64, prec uint) *big.Float {
	work := prec + 64 + uint(math.Ceil(0.75*x*x))
	square := new(big.Float).SetPrec(work).SetFloat64(x * x) // exact: x is a float32 value
	term := new(big.Float).SetPrec(work).SetInt64(1)
	sum := new(big.Float).SetPrec(work).SetInt64(1)
	limit := new(big.Float).SetPrec(work).SetMantExp(big.NewFloat(1), -int(work))
	// Past k = x^2 each term is below half the one before, so the tail is below the last term.
	for k := int64(3); term.Cmp(limit) >= 0 || float64(k) < 2*x*x; k += 2 {
		term.Mul(term, square)
		term.Quo(term, new(big.Float).SetPrec(work).SetInt64(k))
		sum.Add(sum, term)
	}
	sum.Mul(sum, square)
	sum.Mul(sum, bigExp(-x*x/2, work)) // -x^2 / 2: exact
	twoPi := bigPi(work)
	sum.Quo(sum, new(big.Float).SetPrec(work).Sqrt(twoPi.Mul(twoPi, new(big.Float).SetPrec(work).SetInt64(2))))
	half := new(big.Float).SetPrec(work).SetFloat64(x / 2) // exact
	return sum.Add(sum, half).SetPrec(prec)
}

// bigGeluTanh is x / (1 + e^(-w)), w = 2 sqrt(2 / pi) (x + 0.044715 x^3), at precision prec;
// |w| < 120 for the arguments that get here, so w's relative error of 2^(4 - work) moves e^(-w)
// by under 2^(11 - work) relatively.
func bigGeluTanh(x float64, prec uint) *big.Float {
	work := prec + 32
	num := func(v int64) *big.Float { return new(big.Float).SetPrec(work).SetInt64(v) }
	bx := new(big.Float).SetPrec(work).SetFloat64(x)
	w := new(big.Float).SetPrec(work).SetFloat64(x * x) // exact, and so is x^3 at work >= 160 bits
	w.Mul(w, bx)
	w.Mul(w, new(big.Float).SetPrec(work).Quo(num(44715), num(1000000)))
	w.Add(w, bx)
	w.Mul(w, new(big.Float).SetPrec(work).Sqrt(new(big.Float).SetPrec(work).Quo(num(2), bigPi(work))))
	w.Mul(w, num(-2))
	denominator := bigExpOf(w, work)
	denominator.Add(denominator, num(1))
	return bx.Quo(bx, denominator).SetPrec(prec)
}
