package main

// Cast (docs/numerics.md, section 5, "Cast"): into a float type one rounding, to nearest even,
// of the source's exact value; float to integer truncation toward zero, then reduction modulo
// 2^bits, with NaN, infinities and magnitudes of 2^63 or more giving -2^63 reduced the same way
// (uint64 takes every value in [0, 2^64) exactly); to bool, nonzero (NaN included) is true.

import (
	"encoding/binary"
	"math"
	"math/big"
)

// castable: the dtypes Cast reads and writes here (ONNX's string, bfloat16 and float8 types are
// refused by name).
var castable = map[string]bool{
	"<f4": true, "<f8": true, "<f2": true, "|b1": true,
	"|i1": true, "<i2": true, "<i4": true, "<i8": true, "|u1": true, "<u2": true, "<u4": true, "<u8": true,
}

func cast(n *Node, in []*Tensor) ([]*Tensor, error) {
	x, err := dataOf(n, in)
	if err != nil {
		return nil, err
	}
	to := attrInt(n, "to", 0)
	target, known := numpyDtypes[to]
	if !known || !castable[target] {
		return nil, badInput("Cast %s to ONNX data type %d is not supported by sealverify replay yet", quoteForMessage(n.Name), to)
	}
	if !castable[x.DType] {
		return nil, badInput("Cast %s from %s is not supported by sealverify replay yet", quoteForMessage(n.Name), x.DType)
	}
	count := elementCount(x.Shape)
	out := &Tensor{DType: target, Shape: x.Shape, Data: make([]byte, count*itemSizes[target])}
	for i := 0; i < count; i++ {
		if isFloatDtype(x.DType) {
			castFloat(out, i, floatAt(x, i))
		} else {
			castInteger(out, i, intAt(x.DType, x.Data, i), x.DType == "<u8")
		}
	}
	return []*Tensor{out}, nil
}

func isFloatDtype(dtype string) bool { return dtype == "<f4" || dtype == "<f8" || dtype == "<f2" }

// floatAt is element i of a float tensor, exactly, as a float64.
func floatAt(t *Tensor, i int) float64 {
	switch t.DType {
	case "<f4":
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:])))
	case "<f2":
		return float16ToFloat64(binary.LittleEndian.Uint16(t.Data[2*i:]))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:]))
}

// castFloat writes the float v as element i of out.
func castFloat(out *Tensor, i int, v float64) {
	switch out.DType {
	case "<f4":
		copy(out.Data[4*i:], float32Tensor(nil, []float32{float32(v)}).Data)
	case "<f8":
		copy(out.Data[8*i:], float64Tensor(nil, []float64{v}).Data)
	case "<f2":
		binary.LittleEndian.PutUint16(out.Data[2*i:], float64ToFloat16(v))
	case "|b1":
		if v != 0 {
			out.Data[i] = 1
		}
	case "<u8":
		switch {
		case v >= 0x1p63 && v < 0x1p64:
			binary.LittleEndian.PutUint64(out.Data[8*i:], uint64(v))
		default:
			putInt(out.DType, out.Data, i, truncateToInt64(v))
		}
	default:
		putInt(out.DType, out.Data, i, truncateToInt64(v))
	}
}

// truncateToInt64 is v truncated toward zero, or -2^63 for NaN, infinities and magnitudes of
// 2^63 or more (x86-64's "integer indefinite", written here so that every CPU gives it).
func truncateToInt64(v float64) int64 {
	if v != v || v >= 0x1p63 || v <= -0x1p63 {
		return math.MinInt64
	}
	return int64(v)
}

// castInteger writes the integer v (an unsigned 64-bit value when unsigned) as element i of out.
func castInteger(out *Tensor, i int, v int64, unsigned bool) {
	switch out.DType {
	case "<f4", "<f8", "<f2":
		exact := new(big.Float).SetInt64(v)
		if unsigned {
			exact.SetUint64(uint64(v))
		}
		if out.DType == "<f4" {
			f, _ := exact.Float32() // the nearest float32, ties to even: one rounding
			castFloat(out, i, float64(f))
			return
		}
		f, _ := exact.Float64()
		if out.DType == "<f2" && math.Abs(f) > 0x1p53 {
			f = math.Copysign(math.Inf(1), f) // far beyond float16's range: no second rounding matters
		}
		castFloat(out, i, f)
	case "|b1":
		if v != 0 {
			out.Data[i] = 1
		}
	default:
		putInt(out.DType, out.Data, i, v)
	}
}

// float16ToFloat64 decodes an IEEE binary16 value.
func float16ToFloat64(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exponent, fraction := int(h>>10&0x1F), float64(h&0x3FF)
	switch exponent {
	case 0:
		return sign * math.Ldexp(fraction, -24)
	case 0x1F:
		if fraction != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * math.Ldexp(1024+fraction, exponent-25)
}

// float64ToFloat16 is RN_float16(v): to nearest even, gradual underflow, overflow to infinity
// at and beyond 65520 (the midpoint between 65504 and 2^16); NaN is the canonical 0x7E00.
func float64ToFloat16(v float64) uint16 {
	if v != v {
		return 0x7E00
	}
	var sign uint16
	if math.Signbit(v) {
		sign, v = 0x8000, -v
	}
	switch {
	case v >= 65520:
		return sign | 0x7C00
	case v < 0x1p-14: // subnormal or zero: units of 2^-24, rounded once
		return sign | uint16(math.RoundToEven(math.Ldexp(v, 24)))
	}
	_, e := math.Frexp(v) // v = f * 2^e, f in [0.5, 1)
	e--
	mantissa := math.RoundToEven(math.Ldexp(v, 10-e)) // in [1024, 2048], exact before rounding
	if mantissa == 2048 {
		mantissa, e = 1024, e+1
	}
	return sign | uint16(e+15)<<10 | uint16(mantissa-1024)
}
