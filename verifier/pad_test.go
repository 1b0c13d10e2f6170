package main

import (
	"strings"
	"testing"
)

func padNode(mode string, opset int64) *Node {
	n := opNode("Pad", map[string]*Attribute{"mode": {S: mode}})
	n.Opset = opset
	return n
}

func TestPadModes(t *testing.T) {
	x := f32([]int{1, 3}, 1, 2, 3)
	pads := func(v ...int64) *Tensor { return typed("<i8", []int{len(v)}, v...) }
	cases := []struct {
		mode  string
		pads  *Tensor
		shape []int
		want  []float32
	}{
		{"reflect", pads(0, 2, 0, 3), []int{1, 8}, []float32{3, 2, 1, 2, 3, 2, 1, 2}},
		{"reflect", pads(0, 5, 0, 0), []int{1, 8}, []float32{2, 1, 2, 3, 2, 1, 2, 3}}, // longer than the axis: periodic
		{"edge", pads(0, 2, 0, 1), []int{1, 6}, []float32{1, 1, 1, 2, 3, 3}},
		{"wrap", pads(0, 4, 0, 1), []int{1, 8}, []float32{3, 1, 2, 3, 1, 2, 3, 1}},
		{"constant", pads(1, -1, 0, 1), []int{2, 3}, []float32{0, 0, 0, 2, 3, 0}},
		{"reflect", pads(0, -1, 0, 2), []int{1, 4}, []float32{2, 3, 2, 3}}, // the cut axis [2, 3] is reflected
	}
	for _, c := range cases {
		out := runOne(t, padNode(c.mode, 19), x, c.pads)
		wantBits(t, c.mode, out[0], c.shape, c.want...)
	}
	one := runOne(t, padNode("reflect", 13), f32([]int{1}, 5), pads(2, 1))
	wantBits(t, "reflect of one element", one[0], []int{4}, 5, 5, 5, 5)
}

func TestPadConstantsAxesAndVersions(t *testing.T) {
	ints := typed("<i4", []int{2}, 7, -8)
	out := runOne(t, padNode("constant", 13), ints, typed("<i8", []int{2}, 1, 2), typed("<i4", nil, -1))
	wantTensor(t, "int32 constant", out[0], typed("<i4", []int{5}, -1, 7, -8, -1, -1))
	x := f32([]int{2, 2}, 1, 2, 3, 4)
	out = runOne(t, padNode("edge", 18), x, typed("<i8", []int{2}, 1, 0), nil, typed("<i8", []int{1}, -1))
	wantBits(t, "axes", out[0], []int{2, 3}, 1, 1, 2, 3, 3, 4)
	old := padNode("constant", 2)
	old.Attributes["pads"], old.Attributes["value"] = &Attribute{Ints: []int64{0, 1, 0, 0}}, &Attribute{F: negZero}
	out = runOne(t, old, x)
	wantBits(t, "opset 2's attributes", out[0], []int{2, 3}, negZero, 1, 2, negZero, 3, 4)
}

func TestPadRefusals(t *testing.T) {
	x := f32([]int{3}, 1, 2, 3)
	for what, run := range map[string]func() error{
		"mode \"wrap\"": func() error {
			_, err := runNode(padNode("wrap", 18), []*Tensor{x, typed("<i8", []int{2}, 1, 1)})
			return err
		},
		"3 pads": func() error {
			_, err := runNode(padNode("edge", 18), []*Tensor{x, typed("<i8", []int{3}, 1, 1, 1)})
			return err
		},
		"no elements": func() error {
			_, err := runNode(padNode("edge", 18), []*Tensor{x, typed("<i8", []int{2}, -3, 1)})
			return err
		},
		"remove more": func() error {
			_, err := runNode(padNode("constant", 18), []*Tensor{x, typed("<i8", []int{2}, -3, -1)})
			return err
		},
		"constant_value": func() error {
			_, err := runNode(padNode("constant", 18), []*Tensor{x, typed("<i8", []int{2}, 1, 1), typed("<i8", nil, 1)})
			return err
		},
	} {
		if err := run(); err == nil || !strings.Contains(err.Error(), what) {
			t.Fatalf("%s: %v", what, err)
		}
	}
}
