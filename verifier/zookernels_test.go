package main

import (
	"math"
	"testing"
)

func TestMaxKeepsTheLaterOfEqualValuesAndPropagatesNaN(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	x := f32([]int{2, 3}, 0, negZero, nan, -inf, 1, 0)
	row := f32([]int{3}, negZero, 0, 1)
	got := runOne(t, opNode("Max", nil), x, row, f32(nil, negZero))[0]
	wantTensor(t, "Max", got, f32([]int{2, 3}, negZero, negZero, nan, negZero, 1, 1))
	ints := runOne(t, opNode("Max", nil), typed("<i8", []int{3}, -5, 7, math.MinInt64), typed("<i8", nil, -1))[0]
	wantTensor(t, "int64 Max", ints, typed("<i8", []int{3}, -1, 7, -1))
}

func TestGlobalMaxPoolOnThreeDimensions(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	x := f32([]int{1, 3, 2}, negZero, 0, float32(math.NaN()), 5, float32(math.Inf(-1)), negZero)
	wantTensor(t, "GlobalMaxPool", runOne(t, opNode("GlobalMaxPool", nil), x)[0],
		f32([]int{1, 3, 1}, 0, float32(math.NaN()), negZero))
}

func TestExpAndReciprocalAtTheirEdges(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	x := f32([]int{5}, negZero, 89, -100, float32(math.Inf(-1)), 2)
	wantTensor(t, "Exp", runOne(t, opNode("Exp", nil), x)[0],
		f32([]int{5}, 1, float32(math.Inf(1)), exp32(-100), 0, exp32(2)))
	if exp32(-100) == 0 || exp32(-100) >= 0x1p-126 {
		t.Fatalf("exp(-100) = %g, want a subnormal", exp32(-100))
	}
	wantTensor(t, "Reciprocal", runOne(t, opNode("Reciprocal", nil), x)[0],
		f32([]int{5}, float32(math.Inf(-1)), 1/float32(89), 1/float32(-100), negZero, 0.5))
}

func TestMasksCompareAsIEEE(t *testing.T) {
	nan, negZero := float32(math.NaN()), float32(math.Copysign(0, -1))
	x := f32([]int{4}, nan, negZero, -1, 0)
	wantTensor(t, "IsNaN", runOne(t, opNode("IsNaN", nil), x)[0], typed("|b1", []int{4}, 1, 0, 0, 0))
	ge := runOne(t, opNode("GreaterOrEqual", nil), x, f32(nil, 0))[0]
	wantTensor(t, "GreaterOrEqual", ge, typed("|b1", []int{4}, 0, 1, 0, 1))
	wantTensor(t, "int64 GreaterOrEqual", runOne(t, opNode("GreaterOrEqual", nil), typed("<i8", []int{2}, -1, 3), typed("<i8", []int{1}, 3))[0],
		typed("|b1", []int{2}, 0, 1))
	wantTensor(t, "And", runOne(t, opNode("And", nil), ge, typed("|b1", []int{2, 1}, 1, 0))[0],
		typed("|b1", []int{2, 4}, 0, 1, 0, 1, 0, 0, 0, 0))
}

func TestGatherNDWithAndWithoutBatchDims(t *testing.T) {
	data := f32([]int{2, 2, 3}, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
	whole := runOne(t, opNode("GatherND", nil), data, typed("<i8", []int{2, 3}, 1, -1, 0, 0, 0, -1))[0]
	wantTensor(t, "GatherND elements", whole, f32([]int{2}, 9, 2))
	batched := opNode("GatherND", map[string]*Attribute{"batch_dims": {I: 1}})
	rows := runOne(t, batched, data, typed("<i8", []int{2, 1, 1}, 1, -2))[0]
	wantTensor(t, "GatherND batch_dims 1", rows, f32([]int{2, 1, 3}, 3, 4, 5, 6, 7, 8))
	if _, err := runNode(opNode("GatherND", nil), []*Tensor{data, typed("<i8", []int{1}, 2)}); err == nil {
		t.Fatal("GatherND: an index out of range was accepted")
	}
}
