package main

// Correctly rounded sums of products (docs/numerics.md, section 3.1): RN(alpha * sum_k x_k y_k +
// addend), one rounding of the exact value. The spec defines the result by the exact value
// alone, so it is computed here in two ways that give the same bits: a float64 sum with a
// rigorous error bound, kept when both ends of the bound round to the same float32; otherwise
// the exact value itself, in math/big.

import (
	"math"
	"math/big"
)

// exactPrecision holds every value exactDot makes exactly: a product x * y of float32 values
// has its lowest bit at or above 2^-298 and its magnitude below 2^256, so a sum of up to 2^62
// of them needs at most 616 bits, times alpha (24 significant bits) 640, plus the addend (a
// product of two float32 values) one more; big.Float adds and multiplies exactly within them.
const exactPrecision = 1024

// float64Unit is the unit roundoff of float64, 2^-53.
const float64Unit = 0x1p-53

// dotRN32 is RN_float32(alpha * sum_k x[k] y[k] + addend), x and y of equal length, addend
// the exact value beta * c (a product of two float32 values, exact in float64).
func dotRN32(x, y []float32, alpha float32, addend float64) float32 {
	var sum, sumAbs float64
	for k := range x {
		p := float64(x[k]) * float64(y[k]) // exact: 24 + 24 bits fit float64's 53
		sum += p
		sumAbs += math.Abs(p)
	}
	a := float64(alpha)
	// Finite products are below 2^256 and there are fewer than 2^62 of them, so sumAbs is finite
	// exactly when every product is: only then are infinite and NaN products looked for.
	var seen nonFinite
	if math.IsInf(sumAbs, 0) || sumAbs != sumAbs {
		for k := range x {
			seen.see(float64(x[k]) * float64(y[k]))
		}
	}
	// IEEE's rules for what is not finite; they do not depend on the order of the sum.
	if seen.nan || seen.posInf || seen.negInf {
		return float32(a*seen.sum() + addend)
	}
	if math.IsInf(addend, 0) || addend != addend || math.IsInf(a, 0) || a != a {
		// The exact sum is finite: only its sign matters against an infinite alpha.
		sign := float64(exactDot(x, y, 1, 0).Sign())
		return float32(a*sign + addend)
	}
	// The recursive float64 sum of n exact terms is within (n - 1) u sum|p| of the exact sum
	// (Jeannerod and Rump, 2013); sumAbs itself is within n u of its value, and the two
	// operations after it add at most u of their results each: the bound below doubles that.
	n := float64(len(x) + 2)
	v := a*sum + addend
	err := 2 * (math.Abs(a)*n*float64Unit*sumAbs + 2*float64Unit*(math.Abs(a*sum)+math.Abs(addend)+math.Abs(v)))
	lo, hi := float32(v-err), float32(v+err)
	if math.Float32bits(lo) == math.Float32bits(hi) {
		return lo
	}
	exact := exactDot(x, y, alpha, addend)
	if exact.Sign() == 0 {
		return 0 // an exact zero sum is +0
	}
	rounded, _ := exact.Float32() // to nearest even, with gradual underflow and overflow to infinity
	return rounded
}

// nonFinite records the NaN and infinite terms of a sum.
type nonFinite struct{ nan, posInf, negInf bool }

func (s *nonFinite) see(v float64) {
	switch {
	case v != v:
		s.nan = true
	case math.IsInf(v, 1):
		s.posInf = true
	case math.IsInf(v, -1):
		s.negInf = true
	}
}

// sum is IEEE's sum of the terms seen, some not finite: NaN with a NaN or with infinities of
// both signs, else the infinity; it does not depend on the order of the sum.
func (s *nonFinite) sum() float64 {
	switch {
	case s.nan || (s.posInf && s.negInf):
		return math.NaN()
	case s.negInf:
		return math.Inf(-1)
	}
	return math.Inf(1)
}

// exactDot is alpha * sum_k x[k] y[k] + addend, exactly; every value finite.
func exactDot(x, y []float32, alpha float32, addend float64) *big.Float {
	total := new(big.Float).SetPrec(exactPrecision)
	term := new(big.Float).SetPrec(exactPrecision)
	for k := range x {
		total.Add(total, term.SetFloat64(float64(x[k])*float64(y[k])))
	}
	total.Mul(total, term.SetFloat64(float64(alpha)))
	return total.Add(total, term.SetFloat64(addend))
}
