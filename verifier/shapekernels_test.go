package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

// typed builds a tensor of an integer or boolean dtype from int64 values (reduced modulo 2^bits).
func typed(dtype string, shape []int, values ...int64) *Tensor {
	t := &Tensor{DType: dtype, Shape: shape, Data: make([]byte, len(values)*itemSizes[dtype])}
	for i, v := range values {
		putInt(dtype, t.Data, i, v)
	}
	return t
}

func f64(shape []int, values ...float64) *Tensor { return float64Tensor(shape, values) }

func wantTensor(t *testing.T, what string, got, want *Tensor) {
	t.Helper()
	if got.DType != want.DType || len(got.Shape) != len(want.Shape) || !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("%s: %s %v % x, want %s %v % x", what, got.DType, got.Shape, got.Data, want.DType, want.Shape, want.Data)
	}
	for i := range want.Shape {
		if got.Shape[i] != want.Shape[i] {
			t.Fatalf("%s: shape %v, want %v", what, got.Shape, want.Shape)
		}
	}
}

func TestIntegerArithmeticWrapsAndTruncates(t *testing.T) {
	a := typed("<i8", []int{4}, -7, 7, 5, math.MinInt64)
	b := typed("<i8", []int{4}, 2, -2, 0, -1)
	wantTensor(t, "int64 Div", runOne(t, opNode("Div", nil), a, b)[0], typed("<i8", []int{4}, -3, -3, 0, math.MinInt64))
	wantTensor(t, "int64 Mul wraps", runOne(t, opNode("Mul", nil), typed("<i8", []int{1}, 1<<62), typed("<i8", nil, 4))[0],
		typed("<i8", []int{1}, 0))
	wantTensor(t, "int8 Add wraps", runOne(t, opNode("Add", nil), typed("|i1", []int{2}, 127, -128), typed("|i1", []int{1}, 1))[0],
		typed("|i1", []int{2}, -128, -127))
	wantTensor(t, "uint8 Sub wraps", runOne(t, opNode("Sub", nil), typed("|u1", []int{1}, 3), typed("|u1", []int{1}, 5))[0],
		typed("|u1", []int{1}, 254))
	big := int64(-2) // uint64 2^64 - 2
	wantTensor(t, "uint64 Div is unsigned", runOne(t, opNode("Div", nil), typed("<u8", []int{1}, big), typed("<u8", []int{1}, 2))[0],
		typed("<u8", []int{1}, math.MaxInt64))
	wantTensor(t, "float64 Add", runOne(t, opNode("Add", nil), f64([]int{1}, 1.5), f64([]int{1}, 1e-17))[0], f64([]int{1}, 1.5))
	if _, err := runNode(opNode("Add", nil), []*Tensor{typed("<i8", []int{1}, 1), typed("<i4", []int{1}, 1)}); err == nil {
		t.Fatal("Add of int64 and int32 ran")
	}
}

func TestCastAtTheEdges(t *testing.T) {
	castTo := func(to int64, x *Tensor) *Tensor {
		return runOne(t, opNode("Cast", map[string]*Attribute{"to": {I: to}}), x)[0]
	}
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	x := f32([]int{6}, -2.2, 300, 255.9, nan, -inf, -0.5)
	wantTensor(t, "float to uint8 modulo 2^8", castTo(2, x), typed("|u1", []int{6}, 254, 44, 255, 0, 0, 0))
	wantTensor(t, "float to int64: NaN and inf are -2^63", castTo(7, x), typed("<i8", []int{6}, -2, 300, 255, math.MinInt64, math.MinInt64, 0))
	wantTensor(t, "float to int32", castTo(6, f32([]int{2}, 3e9, -3e9)), typed("<i4", []int{2}, 3000000000, -3000000000))
	wantTensor(t, "float to uint64 in [2^63, 2^64)", castTo(13, f64([]int{4}, 1e19, -1.5, 0x1p64, math.NaN())),
		typed("<u8", []int{4}, -8446744073709551616 /* 1e19 - 2^64 */, -1, math.MinInt64, math.MinInt64))
	wantTensor(t, "float to bool: NaN is true, -0 false", castTo(9, f32([]int{3}, nan, negZero, 1e-45)), typed("|b1", []int{3}, 1, 0, 1))
	wantTensor(t, "int64 beyond 2^53 to float32, one rounding", castTo(1, typed("<i8", []int{3}, 1<<53+1, 1<<24+1, 1<<60+1<<36+1)),
		f32([]int{3}, 0x1p53, 0x1p24, 0x1p60+0x1p37))
	wantTensor(t, "uint64 max to float32", castTo(1, typed("<u8", []int{1}, -1)), f32([]int{1}, 0x1p64))
	wantTensor(t, "int64 min to float64", castTo(11, typed("<i8", []int{1}, math.MinInt64)), f64([]int{1}, -0x1p63))
	wantTensor(t, "bool to int32", castTo(6, typed("|b1", []int{2}, 1, 0)), typed("<i4", []int{2}, 1, 0))
	wantTensor(t, "int64 to int8 modulo 2^8", castTo(3, typed("<i8", []int{2}, 200, -129)), typed("|i1", []int{2}, -56, 127))
	wantTensor(t, "float64 to float32 rounds once", castTo(1, f64([]int{2}, 1+0x1p-24, 1+0x1p-24+0x1p-50)), f32([]int{2}, 1, 1+0x1p-23))

	half := castTo(10, f64([]int{9}, 2049, 2051, 65519.99, 65520, 0x1p-25, 3*0x1p-26, -0x1p-14, math.NaN(), math.Copysign(0, -1)))
	want := []uint16{0x6800, 0x6802, 0x7BFF, 0x7C00, 0x0000, 0x0001, 0x8400, 0x7E00, 0x8000}
	for i, w := range want {
		if got := binary.LittleEndian.Uint16(half.Data[2*i:]); got != w {
			t.Fatalf("float16 %d: %#04x, want %#04x", i, got, w)
		}
	}
	wantTensor(t, "float16 to float32 exactly", castTo(1, half), f32([]int{9}, 2048, 2052, 65504, inf, 0, 0x1p-24, -0x1p-14, nan, negZero))
	if _, err := runNode(opNode("Cast", map[string]*Attribute{"to": {I: 16}}), []*Tensor{x}); err == nil || !strings.Contains(err.Error(), "data type 16") {
		t.Fatalf("Cast to bfloat16: %v", err)
	}
}

func TestGatherSplitAndAxes(t *testing.T) {
	x := f32([]int{2, 3}, 1, 2, 3, 4, 5, 6)
	wantBits(t, "Gather axis 1, negative index", runOne(t, opNode("Gather", map[string]*Attribute{"axis": {I: 1}}), x,
		typed("<i4", []int{2}, -1, 0))[0], []int{2, 2}, 3, 1, 6, 4)
	wantTensor(t, "Gather of a scalar index drops the axis", runOne(t, opNode("Gather", nil), typed("<i8", []int{4}, 1, 3, 80, 80),
		typed("<i8", nil, -2))[0], typed("<i8", nil, 80))
	if _, err := runNode(opNode("Gather", nil), []*Tensor{x, typed("<i8", nil, 2)}); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("Gather out of range: %v", err)
	}
	parts := runOne(t, opNode("Split", map[string]*Attribute{"axis": {I: -1}, "num_outputs": {I: 2}}, "a", "b"), x)
	wantBits(t, "Split uneven, first", parts[0], []int{2, 2}, 1, 2, 4, 5)
	wantBits(t, "Split uneven, last", parts[1], []int{2, 1}, 3, 6)
	parts = runOne(t, opNode("Split", nil, "a", "b"), x, typed("<i8", []int{2}, 0, 2))
	if elementCount(parts[0].Shape) != 0 || parts[0].Shape[0] != 0 {
		t.Fatalf("Split of an empty part: %v", parts[0].Shape)
	}
	if _, err := runNode(opNode("Split", nil, "a", "b"), []*Tensor{f32([]int{3}, 1, 2, 3)}); err == nil {
		t.Fatal("Split of 3 into 2 equal parts ran")
	}
	unsqueezed := runOne(t, opNode("Unsqueeze", nil), x, typed("<i8", []int{2}, -1, 0))[0]
	if len(unsqueezed.Shape) != 4 || unsqueezed.Shape[0] != 1 || unsqueezed.Shape[3] != 1 {
		t.Fatalf("Unsqueeze -1, 0: %v", unsqueezed.Shape)
	}
	squeezed := runOne(t, opNode("Squeeze", nil), unsqueezed)[0]
	if len(squeezed.Shape) != 2 {
		t.Fatalf("Squeeze without axes: %v", squeezed.Shape)
	}
	if _, err := runNode(opNode("Squeeze", nil), []*Tensor{x, typed("<i8", []int{1}, 0)}); err == nil {
		t.Fatal("Squeeze of an axis of size 2 ran")
	}
}

func TestBroadcastingCopies(t *testing.T) {
	wantBits(t, "Expand both ways", runOne(t, opNode("Expand", nil), f32([]int{2, 1}, 1, 2), typed("<i8", []int{3}, 2, 1, 3))[0],
		[]int{2, 2, 3}, 1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2)
	nan := float32(math.NaN())
	wantTensor(t, "Equal: NaN equals nothing, -0 equals +0", runOne(t, opNode("Equal", nil), f32([]int{3}, nan, negZero, 1), f32([]int{1}, nan))[0],
		typed("|b1", []int{3}, 0, 0, 0))
	wantTensor(t, "Equal of zeros", runOne(t, opNode("Equal", nil), f32([]int{2}, negZero, 1), f32(nil, 0))[0], typed("|b1", []int{2}, 1, 0))
	wantTensor(t, "Where broadcast three ways", runOne(t, opNode("Where", nil), typed("|b1", []int{2, 1}, 1, 0),
		typed("<i8", []int{3}, 1, 2, 3), typed("<i8", nil, -1))[0], typed("<i8", []int{2, 3}, 1, 2, 3, -1, -1, -1))
	value := &Attribute{Tensor: typed("<i8", []int{1}, 7)}
	wantTensor(t, "ConstantOfShape int64", runOne(t, opNode("ConstantOfShape", map[string]*Attribute{"value": value}), typed("<i8", []int{2}, 1, 2))[0],
		typed("<i8", []int{1, 2}, 7, 7))
	wantBits(t, "ConstantOfShape of an empty shape", runOne(t, opNode("ConstantOfShape", nil), typed("<i8", []int{0}))[0], nil, 0)
	if _, err := runNode(opNode("Expand", nil), []*Tensor{f32([]int{1}, 1), typed("<i8", []int{3}, 1<<20, 1<<20, 1<<20)}); err == nil ||
		!strings.Contains(err.Error(), "memory budget") {
		t.Fatalf("Expand past the budget: %v", err)
	}
}

func TestRange(t *testing.T) {
	tenth := float32(0.1)
	got := runOne(t, opNode("Range", nil), f32(nil, 0), f32(nil, 1), f32(nil, tenth))[0].Float32s()
	// ceil(1 / RN32(0.1)) = 10 elements, each the float32 sum of the one before and delta.
	if len(got) != 10 || got[9] != float32(float32(float32(float32(float32(float32(float32(float32(tenth+tenth)+tenth)+tenth)+tenth)+tenth)+tenth)+tenth)+tenth) {
		t.Fatalf("float32 Range: %v", got)
	}
	wantTensor(t, "int64 Range down", runOne(t, opNode("Range", nil), typed("<i8", nil, 10), typed("<i8", nil, 1), typed("<i8", nil, -3))[0],
		typed("<i8", []int{3}, 10, 7, 4))
	wantTensor(t, "int32 Range empty", runOne(t, opNode("Range", nil), typed("<i4", nil, 1), typed("<i4", nil, 1), typed("<i4", nil, 1))[0],
		typed("<i4", []int{0}))
	wantTensor(t, "int64 Range across the whole type", runOne(t, opNode("Range", nil), typed("<i8", nil, math.MinInt64), typed("<i8", nil, math.MaxInt64),
		typed("<i8", nil, math.MaxInt64))[0], typed("<i8", []int{3}, math.MinInt64, -1, math.MaxInt64-1))
	if _, err := runNode(opNode("Range", nil), []*Tensor{f32(nil, 0), f32(nil, 1), f32(nil, 0)}); err == nil {
		t.Fatal("Range with a zero delta ran")
	}
}

func TestResizeNearest(t *testing.T) {
	attrs := func(transform, rounding string) map[string]*Attribute {
		return map[string]*Attribute{"mode": {S: "nearest"}, "coordinate_transformation_mode": {S: transform}, "nearest_mode": {S: rounding}}
	}
	x := f32([]int{1, 1, 2, 2}, 1, 2, 3, 4)
	up := runOne(t, opNode("Resize", attrs("asymmetric", "floor")), x, nil, f32([]int{4}, 1, 1, 2, 2))[0]
	wantBits(t, "2x nearest, asymmetric floor", up, []int{1, 1, 4, 4}, 1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4)
	// sizes 14 -> 18: the scale is RN32(18 / 14) and x / scale is taken in float32 (in float64
	// index 9 would copy 6).
	row := make([]float32, 14)
	for i := range row {
		row[i] = float32(i)
	}
	sized := runOne(t, opNode("Resize", attrs("asymmetric", "floor")), f32([]int{1, 14}, row...), nil, nil, typed("<i8", []int{2}, 1, 18))[0]
	wantBits(t, "sizes, float32 scale", sized, []int{1, 18}, 0, 0, 1, 2, 3, 3, 4, 5, 6, 7, 7, 8, 9, 10, 10, 11, 12, 13)
	// 96 * RN32(3.1979165) is 306.99998 exactly but 307 in float32: 307 outputs.
	long := runOne(t, opNode("Resize", attrs("half_pixel", "round_prefer_ceil")), f32([]int{96}, make([]float32, 96)...), nil, f32([]int{1}, 3.1979165))[0]
	if long.Shape[0] != 307 {
		t.Fatalf("output length: %v", long.Shape)
	}
	half := runOne(t, opNode("Resize", attrs("half_pixel", "round_prefer_floor")), f32([]int{4}, 1, 2, 3, 4), nil, f32([]int{1}, 0.5))[0]
	wantBits(t, "half_pixel 0.5x: coordinate 0.5 rounds to the floor", half, []int{2}, 1, 3)
	half = runOne(t, opNode("Resize", attrs("half_pixel", "round_prefer_ceil")), f32([]int{4}, 1, 2, 3, 4), nil, f32([]int{1}, 0.5))[0]
	wantBits(t, "half_pixel 0.5x: coordinate 0.5 rounds to the ceiling", half, []int{2}, 2, 4)
	corners := runOne(t, opNode("Resize", attrs("align_corners", "round_prefer_floor")), f32([]int{3}, 1, 2, 3), nil, f32([]int{1}, 2))[0]
	wantBits(t, "align_corners", corners, []int{6}, 1, 1, 2, 2, 3, 3)
	for _, refused := range []map[string]*Attribute{{"mode": {S: "linear"}}, attrs("tf_crop_and_resize", "floor")} {
		if _, err := runNode(opNode("Resize", refused), []*Tensor{x, nil, f32([]int{4}, 1, 1, 2, 2)}); err == nil || !strings.Contains(err.Error(), "not supported") {
			t.Fatalf("Resize %v: %v", refused, err)
		}
	}
}

func TestConvTransposeScattersEachInput(t *testing.T) {
	x, w := f32([]int{1, 1, 2}, 1, 2), f32([]int{1, 1, 2}, 1, 10)
	wantBits(t, "stride 2: no overlap", runOne(t, opNode("ConvTranspose", map[string]*Attribute{"strides": ints(2)}), x, w)[0],
		[]int{1, 1, 4}, 1, 10, 2, 20)
	wantBits(t, "stride 1: overlapping taps add, bias too", runOne(t, opNode("ConvTranspose", nil), x, w, f32([]int{1}, 0.5))[0],
		[]int{1, 1, 3}, 1.5, 12.5, 20.5)
	wantBits(t, "a pad at the start, output_padding at the end", runOne(t, opNode("ConvTranspose",
		map[string]*Attribute{"pads": ints(1, 0), "output_padding": ints(1), "strides": ints(2)}), x, w)[0], []int{1, 1, 4}, 10, 2, 20, 0)
	wantBits(t, "output_shape pads the start more (NOTSET)", runOne(t, opNode("ConvTranspose",
		map[string]*Attribute{"output_shape": ints(3), "strides": ints(2)}), x, w)[0], []int{1, 1, 3}, 10, 2, 20)
	wantBits(t, "SAME_UPPER pads the end more", runOne(t, opNode("ConvTranspose",
		map[string]*Attribute{"auto_pad": {S: "SAME_UPPER"}, "strides": ints(1)}), x, w)[0], []int{1, 1, 2}, 1, 12)
	// Two groups of one channel each: channel c only reaches filter c.
	grouped := runOne(t, opNode("ConvTranspose", map[string]*Attribute{"group": {I: 2}}), f32([]int{1, 2, 1}, 2, 3), f32([]int{2, 1, 1}, 5, 7))[0]
	wantBits(t, "groups", grouped, []int{1, 2, 1}, 10, 21)
	// 1 + 2^-25 + 3 * 2^-26 rounds once to 1 + 2^-23; added in float32 one term at a time it would be 1.
	once := runOne(t, opNode("ConvTranspose", nil), f32([]int{1, 1, 2}, 1, 0x1p-25), f32([]int{1, 1, 2}, 1, 1), f32([]int{1}, 3*0x1p-26))[0]
	wantBits(t, "the sum rounds once", once, []int{1, 1, 3}, 1, 1+0x1p-23, 5*0x1p-26)
}
