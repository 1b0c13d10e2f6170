package main

// ConvTranspose (docs/numerics.md, section 3.1): each output element is RN(sum of x[i] w[t] over the
// (input position, tap) pairs that land on it, o = i * stride + t * dilation - pad, + bias[m]), one
// rounding, by the sums-of-products route of exactsum.go.

// convTransposeAxis is, for one spatial axis, the (input position, tap) pairs of each output
// position.
type convTransposeAxis struct {
	pairs [][][2]int
}

// convTransposePads reads pads, output_padding, output_shape and auto_pad as ONNX says: the output
// length stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - pads, or output_shape with the
// padding it implies.
func convTransposePads(n *Node, spatial, kernel, strides, dilations []int) (begin, end, out []int, err error) {
	rank := len(spatial)
	read := func(name string, length, fallback int) ([]int, error) {
		values := make([]int, length)
		a, ok := n.Attributes[name]
		for i := range values {
			values[i] = fallback
			if ok {
				if len(a.Ints) != length || a.Ints[i] < 0 || a.Ints[i] > 1<<31 {
					return nil, badInput("ConvTranspose %s: %s %v", quoteForMessage(n.Name), name, a.Ints)
				}
				values[i] = int(a.Ints[i])
			}
		}
		return values, nil
	}
	pads, err := read("pads", 2*rank, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	extra, err := read("output_padding", rank, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	begin, end, out = pads[:rank], pads[rank:], make([]int, rank)
	autoPad := attrString(n, "auto_pad", "NOTSET")
	_, shaped := n.Attributes["output_shape"]
	for i := 0; i < rank; i++ {
		full := strides[i]*(spatial[i]-1) + extra[i] + (kernel[i]-1)*dilations[i] + 1
		target := -1
		switch {
		case shaped:
			asked := n.Attributes["output_shape"].Ints
			if len(asked) != rank || asked[i] < 0 {
				return nil, nil, nil, badInput("ConvTranspose %s: output_shape %v", quoteForMessage(n.Name), asked)
			}
			target = int(asked[i])
		case autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER":
			target = spatial[i] * strides[i]
		case autoPad == "VALID":
			begin[i], end[i] = 0, 0
		case autoPad != "NOTSET" && autoPad != "":
			return nil, nil, nil, badInput("ConvTranspose %s: auto_pad %s", quoteForMessage(n.Name), quoteForMessage(autoPad))
		}
		if target >= 0 {
			total := full - target
			if total < 0 {
				return nil, nil, nil, badInput("ConvTranspose %s: an output longer than the input gives", quoteForMessage(n.Name))
			}
			begin[i], end[i] = total-total/2, total/2
			if autoPad == "SAME_UPPER" {
				begin[i], end[i] = total/2, total-total/2
			}
		}
		out[i] = full - begin[i] - end[i]
		if out[i] < 0 {
			return nil, nil, nil, badInput("ConvTranspose %s: pads longer than the output", quoteForMessage(n.Name))
		}
	}
	return begin, end, out, nil
}

// newConvTransposeAxis lists, for each output position of an axis, the pairs (i, t) with
// i * stride + t * dilation - pad = o.
func newConvTransposeAxis(length, kernel, stride, dilation, pad, out int) convTransposeAxis {
	axis := convTransposeAxis{pairs: make([][][2]int, out)}
	for i := 0; i < length; i++ {
		for t := 0; t < kernel; t++ {
			if o := i*stride + t*dilation - pad; o >= 0 && o < out {
				axis.pairs[o] = append(axis.pairs[o], [2]int{i, t})
			}
		}
	}
	return axis
}

// convOperands checks Conv's and ConvTranspose's input and weight (float32, of one rank, with the
// kernel_shape asked) and reads group.
func convOperands(n *Node, in []*Tensor) (x, w *Tensor, groups int, err error) {
	if err = requireFloat32(n, in, 2); err != nil {
		return nil, nil, 0, err
	}
	x, w = in[0], in[1]
	if len(x.Shape) < 3 || len(w.Shape) != len(x.Shape) {
		return nil, nil, 0, badInput("%s %s: input %v and weight %v", n.OpType, quoteForMessage(n.Name), x.Shape, w.Shape)
	}
	if a, ok := n.Attributes["kernel_shape"]; ok {
		for i, k := range a.Ints {
			if i+2 >= len(w.Shape) || int64(w.Shape[i+2]) != k {
				return nil, nil, 0, badInput("%s %s: kernel_shape %v for weight %v", n.OpType, quoteForMessage(n.Name), a.Ints, w.Shape)
			}
		}
	}
	return x, w, int(attrInt(n, "group", 1)), nil
}

// convTranspose: x [N, C, spatial...], w [C, M / group, kernel...], bias [M].
func convTranspose(n *Node, in []*Tensor) ([]*Tensor, error) {
	x, w, groups, err := convOperands(n, in)
	if err != nil {
		return nil, err
	}
	batch, channels, perGroup := x.Shape[0], x.Shape[1], w.Shape[1]
	if groups < 1 || w.Shape[0] != channels || channels%groups != 0 {
		return nil, badInput("ConvTranspose %s: %d channels, weight %v, %d groups", quoteForMessage(n.Name), channels, w.Shape, groups)
	}
	filters, inPerGroup := perGroup*groups, channels/groups
	rank := len(x.Shape) - 2
	spatial, kernel := x.Shape[2:], w.Shape[2:]
	strides, dilations := make([]int, rank), make([]int, rank)
	for i := range strides {
		strides[i], dilations[i] = 1, 1
		for name, into := range map[string][]int{"strides": strides, "dilations": dilations} {
			if a, ok := n.Attributes[name]; ok {
				if len(a.Ints) != rank || a.Ints[i] < 1 || a.Ints[i] > 1<<31 {
					return nil, badInput("ConvTranspose %s: %s %v", quoteForMessage(n.Name), name, a.Ints)
				}
				into[i] = int(a.Ints[i])
			}
		}
	}
	begin, _, out, err := convTransposePads(n, spatial, kernel, strides, dilations)
	if err != nil {
		return nil, err
	}
	bias := make([]float32, filters)
	if len(in) > 2 && in[2] != nil {
		if in[2].DType != "<f4" || elementCount(in[2].Shape) != filters {
			return nil, badInput("ConvTranspose %s: bias %s %v for %d filters", quoteForMessage(n.Name), in[2].DType, in[2].Shape, filters)
		}
		bias = in[2].Float32s()
	}
	shape := append([]int{batch, filters}, out...)
	if err := withinBudget(n, shape, "<f4"); err != nil {
		return nil, err
	}
	axes := make([]convTransposeAxis, rank)
	for d := range axes {
		axes[d] = newConvTransposeAxis(spatial[d], kernel[d], strides[d], dilations[d], begin[d], out[d])
	}
	xs, ws := x.Float32s(), w.Float32s()
	plane, tapCount, outPlane := elementCount(spatial), elementCount(kernel), elementCount(out)
	result := make([]float32, batch*filters*outPlane)
	position, choice := make([]int, rank), make([]int, rank)
	var xTaps, wTaps []float32
	for o := 0; o < outPlane; o++ {
		// Every combination of one pair per axis: an input position and a kernel tap, both flat.
		var at, taps []int
		counts := make([]int, rank)
		total := 1
		for d := range axes {
			counts[d] = len(axes[d].pairs[position[d]])
			total *= counts[d]
		}
		for c := range choice {
			choice[c] = 0
		}
		for k := 0; k < total; k++ {
			i, t := 0, 0
			for d := range axes {
				pair := axes[d].pairs[position[d]][choice[d]]
				i, t = i*spatial[d]+pair[0], t*kernel[d]+pair[1]
			}
			at, taps = append(at, i), append(taps, t)
			advance(choice, counts)
		}
		for b := 0; b < batch; b++ {
			for m := 0; m < filters; m++ {
				group, local := m/perGroup, m%perGroup
				xTaps, wTaps = xTaps[:0], wTaps[:0]
				for c := group * inPerGroup; c < (group+1)*inPerGroup; c++ {
					image, filter := xs[(b*channels+c)*plane:], ws[(c*perGroup+local)*tapCount:]
					for k := range at {
						xTaps, wTaps = append(xTaps, image[at[k]]), append(wTaps, filter[taps[k]])
					}
				}
				result[(b*filters+m)*outPlane+o] = dotRN32(xTaps, wTaps, 1, float64(bias[m]))
			}
		}
		advance(position, out)
	}
	return []*Tensor{float32Tensor(shape, result)}, nil
}
