package main

// Pad (every version; ONNX's operator definition): a data-movement operator, so exact
// (docs/numerics.md, section 2). Each output position along an axis maps to an input position
// o - pad_begin; outside the input the mode decides: constant gives the value, edge the nearest
// edge, reflect the mirror image without repeating the edge (NumPy's "reflect", periodic for pads
// longer than the axis), wrap the periodic continuation. Negative pads remove elements first.

import "math"

// padModes: the modes each Pad version has (wrap from opset 19).
var padModes = map[string]bool{"constant": true, "reflect": true, "edge": true, "wrap": true}

// pad pads data of any dtype.
func pad(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	mode := "constant"
	if a, ok := n.Attributes["mode"]; ok {
		mode = a.S
	}
	if !padModes[mode] || (mode == "wrap" && n.Opset < 19) {
		return nil, badInput("Pad %s: mode %q is not one of Pad-%d's", quoteForMessage(n.Name), mode, n.Opset)
	}
	pads, fill, err := padArguments(n, in)
	if err != nil {
		return nil, err
	}
	rank := len(x.Shape)
	begin, shape := make([]int, rank), make([]int, rank)
	for d := range x.Shape {
		begin[d] = int(pads[d])
		shape[d] = x.Shape[d] + int(pads[d]) + int(pads[d+rank])
		if shape[d] < 0 {
			return nil, badInput("Pad %s: pads %v remove more than axis %d's %d elements", quoteForMessage(n.Name), pads, d, x.Shape[d])
		}
		if mode != "constant" && shape[d] > 0 && x.Shape[d]+minInt(pads[d], 0)+minInt(pads[d+rank], 0) <= 0 {
			return nil, badInput("Pad %s: mode %s cannot pad axis %d, which has no elements left", quoteForMessage(n.Name), mode, d)
		}
	}
	if err := withinBudget(n, shape, x.DType); err != nil {
		return nil, err
	}
	size := itemSizes[x.DType]
	strides := make([]int, rank)
	for d, stride := rank-1, 1; d >= 0; d-- {
		strides[d] = stride
		stride *= x.Shape[d]
	}
	data := make([]byte, elementCount(shape)*size)
	counter := make([]int, rank)
	for flat := 0; flat < elementCount(shape); flat++ {
		at, inside := 0, true
		for d := 0; d < rank && inside; d++ {
			var s int
			s, inside = padSource(mode, counter[d]-begin[d], x.Shape[d], pads[d], pads[d+rank])
			at += s * strides[d]
		}
		if inside {
			copy(data[flat*size:(flat+1)*size], x.Data[at*size:(at+1)*size])
		} else {
			copy(data[flat*size:(flat+1)*size], fill)
		}
		for d := rank - 1; d >= 0; d-- {
			counter[d]++
			if counter[d] < shape[d] {
				break
			}
			counter[d] = 0
		}
	}
	return []*Tensor{{DType: x.DType, Shape: shape, Data: data}}, nil
}

// padSource is the input position an output position s (counted from the input's start) copies
// along an axis of size length, with the given pads; false for the constant value. Negative
// pads first cut the axis to [lo, hi), and the modes extend what is left.
func padSource(mode string, s, length int, before, after int64) (int, bool) {
	lo, hi := -minInt(before, 0), length+minInt(after, 0)
	if s >= lo && s < hi {
		return s, true
	}
	kept := hi - lo
	r := s - lo
	switch mode {
	case "edge":
		if r < 0 {
			return lo, true
		}
		return hi - 1, true
	case "wrap":
		return lo + ((r%kept)+kept)%kept, true
	case "reflect":
		if kept == 1 {
			return lo, true
		}
		period := 2 * (kept - 1)
		r = ((r % period) + period) % period
		if r >= kept {
			r = period - r
		}
		return lo + r, true
	}
	return 0, false
}

func minInt(v int64, bound int) int {
	if v < int64(bound) {
		return int(v)
	}
	return bound
}

// padArguments reads the pads (2 * rank values, or one pair per listed axis from opset 18) and
// the constant value's bytes (zero unless given), from the inputs, or before opset 11 from the
// attributes pads and value.
func padArguments(n *Node, in []*Tensor) ([]int64, []byte, error) {
	x := in[0]
	rank := len(x.Shape)
	fill := make([]byte, itemSizes[x.DType])
	var pads []int64
	if n.Opset < 11 {
		if a, ok := n.Attributes["pads"]; ok {
			pads = a.Ints
		}
		if value, ok := n.Attributes["value"]; ok {
			if x.DType != "<f4" {
				return nil, nil, badInput("Pad %s: a value attribute on %s is not supported by sealverify replay yet", quoteForMessage(n.Name), x.DType)
			}
			fill = float32Tensor(nil, []float32{value.F}).Data
		}
		return checkedPads(n, pads, fill, rank)
	}
	if len(in) < 2 || in[1] == nil {
		return nil, nil, badInput("Pad %s: the pads input is missing", quoteForMessage(n.Name))
	}
	pads, err := indexList(n, in[1], "pads")
	if err != nil {
		return nil, nil, err
	}
	if len(in) > 2 && in[2] != nil {
		value := in[2]
		if value.DType != x.DType || elementCount(value.Shape) != 1 {
			return nil, nil, badInput("Pad %s: constant_value must be one %s value, not %s %v", quoteForMessage(n.Name), x.DType, value.DType, value.Shape)
		}
		fill = value.Data
	}
	if len(in) > 3 && in[3] != nil {
		axes, err := indexList(n, in[3], "axes")
		if err != nil {
			return nil, nil, err
		}
		if len(pads) != 2*len(axes) {
			return nil, nil, badInput("Pad %s: %d pads for %d axes", quoteForMessage(n.Name), len(pads), len(axes))
		}
		full := make([]int64, 2*rank)
		for k, axis := range axes {
			d, err := normalizeAxis(n, axis, rank)
			if err != nil {
				return nil, nil, err
			}
			full[d], full[d+rank] = pads[k], pads[k+len(axes)]
		}
		pads = full
	}
	return checkedPads(n, pads, fill, rank)
}

// checkedPads refuses pads of the wrong length or beyond any shape replay could hold.
func checkedPads(n *Node, pads []int64, fill []byte, rank int) ([]int64, []byte, error) {
	if len(pads) != 2*rank {
		return nil, nil, badInput("Pad %s: %d pads for rank %d", quoteForMessage(n.Name), len(pads), rank)
	}
	for _, p := range pads {
		if p > defaultMemoryBudget || p < -math.MaxInt32 {
			return nil, nil, badInput("Pad %s: pad %d", quoteForMessage(n.Name), p)
		}
	}
	return pads, fill, nil
}
