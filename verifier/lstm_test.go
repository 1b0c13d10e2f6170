package main

import (
	"strings"
	"testing"
)

// lstmNode is an LSTM node of hidden size 1 with the given attributes.
func lstmNode(attrs map[string]*Attribute) *Node {
	if attrs == nil {
		attrs = map[string]*Attribute{}
	}
	attrs["hidden_size"] = &Attribute{I: 1}
	return opNode("LSTM", attrs, "y", "y_h", "y_c")
}

func TestLSTMGateOrderAndState(t *testing.T) {
	// W's rows are i, o, f, c: only the cell candidate sees x, so i = o = f = sigmoid(0) = 0.5.
	x := f32([]int{2, 1, 1}, 1, 1)
	w, r := f32([]int{1, 4, 1}, 0, 0, 0, 1), f32([]int{1, 4, 1}, 0, 0, 0, 0)
	out := runOne(t, lstmNode(nil), x, w, r)
	c1 := float32(0.5 * tanh32(1))
	h1 := float32(0.5 * tanh32(c1))
	c2 := float32(float32(0.5*c1) + float32(0.5*tanh32(1)))
	h2 := float32(0.5 * tanh32(c2))
	wantBits(t, "Y", out[0], []int{2, 1, 1, 1}, h1, h2)
	wantBits(t, "Y_h", out[1], []int{1, 1, 1}, h2)
	wantBits(t, "Y_c", out[2], []int{1, 1, 1}, c2)

	// input_forget: f = 1 - i; the initial cell state 2 is forgotten by half.
	c0 := f32([]int{1, 1, 1}, 2)
	out = runOne(t, lstmNode(map[string]*Attribute{"input_forget": {I: 1}}), x.entry(0), w, r, nil, nil, nil, c0)
	wantBits(t, "input_forget Y_c", out[2], []int{1, 1, 1}, float32(1+float32(0.5*tanh32(1))))
}

func TestLSTMBiasPeepholeAndClip(t *testing.T) {
	x := f32([]int{1, 1, 1}, 3)
	w, r := f32([]int{1, 4, 1}, 1, 1, 1, 1), f32([]int{1, 4, 1}, 0, 0, 0, 0)
	b := f32([]int{1, 8}, 0, 0, 0, 0, 0.25, 0.25, 0.25, 0.25) // Rb only
	p := f32([]int{1, 3}, 0, 0, 0.5)                          // Pi, Po, Pf: f sees C
	c0 := f32([]int{1, 1, 1}, 2)
	clip := map[string]*Attribute{"clip": {F: 3.125}}
	out := runOne(t, lstmNode(clip), x, w, r, b, nil, nil, c0, p)
	i := sigmoid32(3.125)
	f := sigmoid32(3.125) // 3 + 1 + 0.25 clipped
	c := float32(float32(f*2) + float32(i*tanh32(3.125)))
	o := sigmoid32(3.125)
	wantBits(t, "Y_c", out[2], []int{1, 1, 1}, c)
	wantBits(t, "Y_h", out[1], []int{1, 1, 1}, float32(o*tanh32(c)))
}

func TestLSTMSequenceLensAndDirections(t *testing.T) {
	x := f32([]int{3, 2, 1}, 1, 2, 3, 4, 5, 6)
	w, r := f32([]int{2, 4, 1}, 0.5, -1, 0.25, 1, 1, 0.5, -0.5, 2), f32([]int{2, 4, 1}, 1, 1, 1, 1, -1, 0.5, 0.5, 0.5)
	lens := typed("<i4", []int{2}, 2, 0)
	h0 := f32([]int{2, 2, 1}, 7, 7, 7, 7)
	out := runOne(t, lstmNode(map[string]*Attribute{"direction": {S: "bidirectional"}}), x, w, r, nil, lens, h0, h0)
	// The second batch entry has no steps: its outputs are 0 and so is its final state
	// (sealtrace's logs; ONNX leaves it open).
	y := out[0].Float32s()
	for k := 0; k < 3; k++ {
		for d := 0; d < 2; d++ {
			if v := y[(k*2+d)*2+1]; v != 0 {
				t.Fatalf("Y at step %d direction %d of an empty sequence: %v", k, d, v)
			}
		}
	}
	if y[(2*2+0)*2] != 0 || y[(2*2+1)*2] != 0 {
		t.Fatalf("Y past the first sequence's length: %v", y)
	}
	wantBits(t, "Y_h of the empty sequence", f32([]int{2}, out[1].Float32s()[1], out[1].Float32s()[3]), []int{2}, 0, 0)
	// The reverse direction starts at the sequence's last step, not at the tensor's.
	seven := f32([]int{1, 1, 1}, 7)
	rev := runOne(t, lstmNode(map[string]*Attribute{"direction": {S: "reverse"}}), f32([]int{2, 1, 1}, 1, 3), w.entry(1), r.entry(1), nil, nil, seven, seven)
	wantBits(t, "reverse direction's Y_h = bidirectional's backward one", rev[1], []int{1, 1, 1}, out[1].Float32s()[2])
}

// entry is entry k along axis 0, the axis kept (of size 1).
func (t *Tensor) entry(k int) *Tensor {
	row := elementCount(t.Shape[1:])
	shape := append([]int{1}, t.Shape[1:]...)
	return float32Tensor(shape, t.Float32s()[k*row:(k+1)*row])
}

func TestLSTMRefusals(t *testing.T) {
	x, w, r := f32([]int{1, 1, 1}, 1), f32([]int{1, 4, 1}, 0, 0, 0, 0), f32([]int{1, 4, 1}, 0, 0, 0, 0)
	for what, attrs := range map[string]map[string]*Attribute{
		"Relu":             {"activations": {Strings: []string{"Relu", "Tanh", "Tanh"}}},
		"activation_alpha": {"activation_alpha": {Floats: []float32{1}}},
		"direction":        {"direction": {S: "sideways"}},
		"clip":             {"clip": {F: -1}},
		"layout":           {"layout": {I: 2}},
	} {
		_, err := runNode(lstmNode(attrs), []*Tensor{x, w, r})
		if err == nil || !strings.Contains(err.Error(), what) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if _, err := runNode(lstmNode(nil), []*Tensor{x, w, r, nil, typed("<i4", []int{1}, 2)}); err == nil {
		t.Fatal("a sequence length past the sequence ran")
	}
}
