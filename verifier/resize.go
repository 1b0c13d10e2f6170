package main

// Resize in its nearest mode (docs/numerics.md, section 5, "Resize"): a copy of values, at input
// positions computed in float32 as ONNX's formulas give them. The linear and cubic modes,
// tf_crop_and_resize, axes and keep_aspect_ratio_policy are refused by name.

import "math"

// resize is Resize (opset 10: X, scales; 11 on: X, roi, scales, sizes).
func resize(n *Node, in []*Tensor) ([]*Tensor, error) {
	x, err := dataOf(n, in)
	if err != nil {
		return nil, err
	}
	mode, transform, rounding := attrString(n, "mode", "nearest"), attrString(n, "coordinate_transformation_mode", "half_pixel"), attrString(n, "nearest_mode", "round_prefer_floor")
	if n.Opset < 11 {
		transform, rounding = "asymmetric", "floor" // Resize-10's only nearest behaviour
	}
	refused := ""
	switch {
	case mode != "nearest":
		refused = "mode " + mode
	case transform == "tf_crop_and_resize":
		refused = "coordinate_transformation_mode tf_crop_and_resize"
	case n.Attributes["axes"] != nil:
		refused = "the axes attribute"
	case attrString(n, "keep_aspect_ratio_policy", "stretch") != "stretch":
		refused = "keep_aspect_ratio_policy " + attrString(n, "keep_aspect_ratio_policy", "")
	}
	if refused != "" {
		return nil, badInput("Resize %s with %s is not supported by sealverify replay yet (nearest mode only)", quoteForMessage(n.Name), refused)
	}
	scalesAt, sizesAt := 2, 3
	if n.Opset < 11 {
		scalesAt = 1
	}
	rank := len(x.Shape)
	scales, shape := make([]float32, rank), make([]int, rank)
	switch {
	case len(in) > scalesAt && in[scalesAt] != nil && elementCount(in[scalesAt].Shape) > 0:
		if in[scalesAt].DType != "<f4" || elementCount(in[scalesAt].Shape) != rank {
			return nil, badInput("Resize %s: scales must be %d float32 values", quoteForMessage(n.Name), rank)
		}
		for d, s := range in[scalesAt].Float32s() {
			product := float32(x.Shape[d]) * s
			if !(s > 0) || product > float32(defaultMemoryBudget) {
				return nil, badInput("Resize %s: scale %v", quoteForMessage(n.Name), s)
			}
			scales[d], shape[d] = s, int(math.Floor(float64(product)))
		}
	case len(in) > sizesAt && in[sizesAt] != nil:
		sizes, err := indexList(n, in[sizesAt], "sizes")
		if err != nil {
			return nil, err
		}
		if len(sizes) != rank {
			return nil, badInput("Resize %s: %d sizes for rank %d", quoteForMessage(n.Name), len(sizes), rank)
		}
		if shape, err = dimensions(n, sizes); err != nil {
			return nil, err
		}
		for d := range scales {
			scales[d] = float32(shape[d]) / float32(x.Shape[d])
		}
	default:
		return nil, badInput("Resize %s: neither scales nor sizes", quoteForMessage(n.Name))
	}
	if err := withinBudget(n, shape, x.DType); err != nil {
		return nil, err
	}
	sources := make([][]int, rank) // the input index each output index of each axis copies
	for d := range sources {
		if sources[d], err = nearestSources(transform, rounding, x.Shape[d], shape[d], scales[d]); err != nil {
			return nil, badInput("Resize %s: %v", quoteForMessage(n.Name), err)
		}
	}
	size := itemSizes[x.DType]
	data := make([]byte, 0, elementCount(shape)*size)
	counter := make([]int, rank)
	for i := elementCount(shape); i > 0; i-- {
		at := 0
		for d, c := range counter {
			at = at*x.Shape[d] + sources[d][c]
		}
		data = append(data, x.Data[at*size:(at+1)*size]...)
		advance(counter, shape)
	}
	return []*Tensor{{DType: x.DType, Shape: shape, Data: data}}, nil
}

// nearestSources maps each output index of an axis (input length length, output length out,
// scale s) to its input index: the coordinate in float32 as ONNX's formula gives it, rounded
// as nearest_mode says, clamped into the axis.
func nearestSources(transform, rounding string, length, out int, s float32) ([]int, error) {
	sources := make([]int, out)
	l, o := float32(length), float32(out)
	for i := range sources {
		x := float32(i)
		var c float32
		switch transform {
		case "half_pixel":
			c = (x+0.5)/s - 0.5
		case "pytorch_half_pixel":
			if out > 1 {
				c = (x+0.5)/s - 0.5
			}
		case "align_corners":
			if out > 1 {
				c = float32(x*(l-1)) / (o - 1)
			}
		case "asymmetric":
			c = x / s
		case "half_pixel_symmetric":
			adjustment := o / float32(s*l)
			center := float32(l/2) * (1 - adjustment)
			c = float32(center+(x+0.5)/s) - 0.5
		default:
			return nil, badInput("coordinate_transformation_mode %s", quoteForMessage(transform))
		}
		var r float64
		switch floor := math.Floor(float64(c)); rounding {
		case "floor":
			r = floor
		case "ceil":
			r = math.Ceil(float64(c))
		case "round_prefer_floor", "round_prefer_ceil":
			r = math.Round(float64(c))
			if float64(c)-floor == 0.5 && rounding == "round_prefer_floor" {
				r = floor
			}
		default:
			return nil, badInput("nearest_mode %s", quoteForMessage(rounding))
		}
		sources[i] = int(math.Max(0, math.Min(r, float64(length-1))))
	}
	return sources, nil
}

func attrString(n *Node, name, fallback string) string {
	if a, ok := n.Attributes[name]; ok {
		return a.S
	}
	return fallback
}
