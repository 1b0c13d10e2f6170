package main

// LSTM (every version; ONNX's operator definition, both layouts), float32, with the numerics of
// docs/numerics.md, section 5 ("Recurrent networks"): each gate's pre-activation is
// (((CR(X_t W^T) + CR(H_t-1 R^T)) + P * C) + Wb) + Rb, every addition and product an exact
// IEEE operation in float32, the sums of products correctly rounded (exactsum.go); the absent
// bias and peephole terms are skipped. The activations are the correctly rounded Sigmoid and
// Tanh (expkernels.go, transformerkernels.go).

// lstmActivations: the activation functions replay runs, by their ONNX names.
var lstmActivations = map[string]func(float32) float32{"Sigmoid": sigmoid32, "Tanh": tanh32}

// lstmDirection is one direction's weights and activations; gate rows are ordered i, o, f, c
// as in ONNX's W, R and B.
type lstmDirection struct {
	w, r         []float32 // [4H, I] and [4H, H]
	wb, rb, peep []float32 // [4H], [4H] and [3H] (Pi, Po, Pf), nil when absent
	f, g, h      func(float32) float32
	reverse      bool
	clip         float32 // 0: no clip attribute
	inputForget  bool
}

// lstmShape: the sizes of an LSTM node's operands.
type lstmShape struct{ seq, batch, input, hidden int }

// lstm runs layout 0; layout 1 (batch first) swaps the first two axes of X, the states and the
// outputs (Y's first three: [batch, seq, directions, hidden]).
func lstm(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireFloat32(n, in, 3); err != nil {
		return nil, err
	}
	switch attrInt(n, "layout", 0) {
	case 0:
		return lstmSequenceFirst(n, in)
	case 1:
		swapped := append([]*Tensor(nil), in...)
		for _, k := range []int{0, 5, 6} {
			if t := optionalAt(in, k); t != nil && len(t.Shape) == 3 {
				swapped[k] = permuted(t, []int{1, 0, 2})
			}
		}
		out, err := lstmSequenceFirst(n, swapped)
		if err != nil {
			return nil, err
		}
		return []*Tensor{permuted(out[0], []int{2, 0, 1, 3}), permuted(out[1], []int{1, 0, 2}), permuted(out[2], []int{1, 0, 2})}, nil
	}
	return nil, badInput("LSTM %s: layout %d", quoteForMessage(n.Name), attrInt(n, "layout", 0))
}

// lstmSequenceFirst is LSTM in layout 0; with sequence_lens, an entry's steps past its length leave Y at
// +0 and its state as it was, and the reverse direction starts at its last step.
func lstmSequenceFirst(n *Node, in []*Tensor) ([]*Tensor, error) {
	for _, k := range []int{3, 5, 6, 7} { // B, initial_h, initial_c, P
		if t := optionalAt(in, k); t != nil && t.DType != "<f4" {
			return nil, unsupportedDtype(n, t)
		}
	}
	directions, sh, err := lstmSetup(n, in)
	if err != nil {
		return nil, err
	}
	lengths, err := lstmLengths(n, optionalAt(in, 4), sh)
	if err != nil {
		return nil, err
	}
	numDir, hb := len(directions), sh.batch*sh.hidden
	state := func(t *Tensor) ([]float32, error) {
		if t == nil {
			return make([]float32, numDir*hb), nil
		}
		if len(t.Shape) != 3 || t.Shape[0] != numDir || t.Shape[1] != sh.batch || t.Shape[2] != sh.hidden {
			return nil, badInput("LSTM %s: an initial state of shape %v, not [%d %d %d]", quoteForMessage(n.Name), t.Shape, numDir, sh.batch, sh.hidden)
		}
		return t.Float32s(), nil
	}
	h, err := state(optionalAt(in, 5))
	if err != nil {
		return nil, err
	}
	c, err := state(optionalAt(in, 6))
	if err != nil {
		return nil, err
	}
	x := in[0].Float32s()
	y := make([]float32, sh.seq*numDir*hb) // steps past a batch entry's length stay 0
	for d, dir := range directions {
		for b := 0; b < sh.batch; b++ {
			hs, cs := h[d*hb+b*sh.hidden:][:sh.hidden], c[d*hb+b*sh.hidden:][:sh.hidden]
			if lengths[b] == 0 {
				// ONNX leaves it open; sealtrace's logs give a state of +0, not the initial one.
				for j := range hs {
					hs[j], cs[j] = 0, 0
				}
			}
			for k := 0; k < lengths[b]; k++ {
				t := k
				if dir.reverse {
					t = lengths[b] - 1 - k
				}
				dir.step(x[(t*sh.batch+b)*sh.input:][:sh.input], hs, cs)
				copy(y[((t*numDir+d)*sh.batch+b)*sh.hidden:], hs)
			}
		}
	}
	return []*Tensor{
		float32Tensor([]int{sh.seq, numDir, sh.batch, sh.hidden}, y),
		float32Tensor([]int{numDir, sh.batch, sh.hidden}, h),
		float32Tensor([]int{numDir, sh.batch, sh.hidden}, c),
	}, nil
}

// optionalAt is input k, nil when omitted.
func optionalAt(in []*Tensor, k int) *Tensor {
	if k < len(in) {
		return in[k]
	}
	return nil
}

// step advances one batch entry's state (h, c) by one input x.
func (dir *lstmDirection) step(x, h, c []float32) {
	hidden, input := len(h), len(x)
	// pre is a gate's pre-activation for hidden unit j; peephole is the gate's row of P
	// (-1: none), cell the cell state it sees.
	pre := func(gate, j, peephole int, cell float32) float32 {
		row := gate*hidden + j
		v := float32(dotRN32(x, dir.w[row*input:][:input], 1, 0) + dotRN32(h, dir.r[row*hidden:][:hidden], 1, 0))
		if dir.peep != nil && peephole >= 0 {
			v = float32(v + float32(dir.peep[peephole*hidden+j]*cell))
		}
		if dir.wb != nil {
			v = float32(float32(v+dir.wb[row]) + dir.rb[row])
		}
		if dir.clip > 0 {
			v = clipTo(v, dir.clip)
		}
		return v
	}
	newH := make([]float32, hidden)
	for j := 0; j < hidden; j++ {
		i := dir.f(pre(0, j, 0, c[j]))
		f := float32(1 - i)
		if !dir.inputForget {
			f = dir.f(pre(2, j, 2, c[j]))
		}
		candidate := dir.g(pre(3, j, -1, 0))
		cell := float32(float32(f*c[j]) + float32(i*candidate))
		o := dir.f(pre(1, j, 1, cell))
		c[j] = cell
		newH[j] = float32(o * dir.h(cell))
	}
	copy(h, newH)
}

// clipTo is ONNX's clip attribute, min(max(v, -bound), bound), a NaN staying NaN.
func clipTo(v, bound float32) float32 {
	switch {
	case v < -bound:
		return -bound
	case v > bound:
		return bound
	}
	return v
}

// lstmSetup checks the attributes and weights and splits them by direction.
func lstmSetup(n *Node, in []*Tensor) ([]*lstmDirection, lstmShape, error) {
	name := quoteForMessage(n.Name)
	direction := "forward"
	if a, ok := n.Attributes["direction"]; ok {
		direction = a.S
	}
	numDir := map[string]int{"forward": 1, "reverse": 1, "bidirectional": 2}[direction]
	if numDir == 0 {
		return nil, lstmShape{}, badInput("LSTM %s: direction %q", name, direction)
	}
	x, w, r := in[0], in[1], in[2]
	if len(x.Shape) != 3 || len(w.Shape) != 3 || len(r.Shape) != 3 {
		return nil, lstmShape{}, badInput("LSTM %s: X, W and R must have rank 3", name)
	}
	sh := lstmShape{seq: x.Shape[0], batch: x.Shape[1], input: x.Shape[2], hidden: int(attrInt(n, "hidden_size", int64(r.Shape[2])))}
	H := sh.hidden
	if w.Shape[0] != numDir || w.Shape[1] != 4*H || w.Shape[2] != sh.input || r.Shape[0] != numDir || r.Shape[1] != 4*H || r.Shape[2] != H {
		return nil, lstmShape{}, badInput("LSTM %s: W %v and R %v do not fit X %v, hidden_size %d and %d direction(s)", name, w.Shape, r.Shape, x.Shape, H, numDir)
	}
	names := []string{"Sigmoid", "Tanh", "Tanh", "Sigmoid", "Tanh", "Tanh"}[:3*numDir]
	if a, ok := n.Attributes["activations"]; ok {
		if a.Strings == nil || len(a.Strings) != 3*numDir {
			return nil, lstmShape{}, badInput("LSTM %s: %d activations for %d direction(s)", name, len(a.Strings), numDir)
		}
		names = a.Strings
	}
	if _, ok := n.Attributes["activation_alpha"]; ok {
		return nil, lstmShape{}, badInput("LSTM %s: activation_alpha is not supported by sealverify replay yet", name)
	}
	if _, ok := n.Attributes["activation_beta"]; ok {
		return nil, lstmShape{}, badInput("LSTM %s: activation_beta is not supported by sealverify replay yet", name)
	}
	clip := attrFloat(n, "clip", 0)
	if _, ok := n.Attributes["clip"]; ok && !(clip > 0) {
		return nil, lstmShape{}, badInput("LSTM %s: clip %v is not a positive threshold", name, clip)
	}
	b, p := optionalAt(in, 3), optionalAt(in, 7)
	if b != nil && (len(b.Shape) != 2 || b.Shape[0] != numDir || b.Shape[1] != 8*H) {
		return nil, lstmShape{}, badInput("LSTM %s: B of shape %v, not [%d %d]", name, b.Shape, numDir, 8*H)
	}
	if p != nil && (len(p.Shape) != 2 || p.Shape[0] != numDir || p.Shape[1] != 3*H) {
		return nil, lstmShape{}, badInput("LSTM %s: P of shape %v, not [%d %d]", name, p.Shape, numDir, 3*H)
	}
	wv, rv := w.Float32s(), r.Float32s()
	directions := make([]*lstmDirection, numDir)
	for d := range directions {
		fs := make([]func(float32) float32, 3)
		for k := range fs {
			f, ok := lstmActivations[names[3*d+k]]
			if !ok {
				return nil, lstmShape{}, badInput("LSTM %s: activation %s is not supported by sealverify replay yet (Sigmoid and Tanh)", name, names[3*d+k])
			}
			fs[k] = f
		}
		dir := &lstmDirection{
			w: wv[d*4*H*sh.input:][:4*H*sh.input], r: rv[d*4*H*H:][:4*H*H],
			f: fs[0], g: fs[1], h: fs[2], reverse: direction == "reverse" || d == 1,
			clip: clip, inputForget: attrInt(n, "input_forget", 0) != 0,
		}
		if b != nil {
			bv := b.Float32s()[d*8*H:]
			dir.wb, dir.rb = bv[:4*H], bv[4*H:8*H]
		}
		if p != nil {
			dir.peep = p.Float32s()[d*3*H:][:3*H]
		}
		directions[d] = dir
	}
	return directions, sh, nil
}

// lstmLengths reads sequence_lens (int32, each within [0, seq]; every entry seq when absent).
func lstmLengths(n *Node, t *Tensor, sh lstmShape) ([]int, error) {
	lengths := make([]int, sh.batch)
	for b := range lengths {
		lengths[b] = sh.seq
	}
	if t == nil {
		return lengths, nil
	}
	if t.DType != "<i4" || len(t.Shape) != 1 || t.Shape[0] != sh.batch {
		return nil, badInput("LSTM %s: sequence_lens must be int32 of shape [%d], not %s %v", quoteForMessage(n.Name), sh.batch, t.DType, t.Shape)
	}
	for b := range lengths {
		v := intAt(t.DType, t.Data, b)
		if v < 0 || v > int64(sh.seq) {
			return nil, badInput("LSTM %s: sequence length %d outside [0, %d]", quoteForMessage(n.Name), v, sh.seq)
		}
		lengths[b] = int(v)
	}
	return lengths, nil
}
