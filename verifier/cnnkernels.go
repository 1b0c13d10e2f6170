package main

// Stage (b) of issue 30: the operators of convolutional networks, from docs/numerics.md
// (sections 2, 3.1, 3.2 and 4) and ONNX's operator definitions. Every float32 operation
// below is written with an explicit conversion where two could be fused (Go may contract
// x*y + z into one FMA on some architectures unless a conversion rounds the product).

import (
	"math"
	"math/big"
	"strconv"
)

// dataOf: a node's first input, present.
func dataOf(n *Node, in []*Tensor) (*Tensor, error) {
	if len(in) < 1 || in[0] == nil {
		return nil, badInput("%s %s: no input", n.OpType, quoteForMessage(n.Name))
	}
	return in[0], nil
}

// normalizeAxis maps a possibly negative axis into [0, rank).
func normalizeAxis(n *Node, axis int64, rank int) (int, error) {
	if axis < 0 {
		axis += int64(rank)
	}
	if axis < 0 || axis >= int64(rank) {
		return 0, badInput("%s %s: axis %d out of range for rank %d", n.OpType, quoteForMessage(n.Name), axis, rank)
	}
	return int(axis), nil
}

// concat joins its inputs along axis, copying values (any dtype).
func concat(n *Node, in []*Tensor) ([]*Tensor, error) {
	first, err := dataOf(n, in)
	if err != nil {
		return nil, err
	}
	axis, err := normalizeAxis(n, attrInt(n, "axis", 0), len(first.Shape))
	if err != nil {
		return nil, err
	}
	shape := append([]int{}, first.Shape...)
	shape[axis] = 0
	for _, t := range in {
		if t == nil || t.DType != first.DType || len(t.Shape) != len(shape) {
			return nil, badInput("Concat %s: inputs of different types or ranks", quoteForMessage(n.Name))
		}
		for d := range shape {
			if d != axis && t.Shape[d] != first.Shape[d] {
				return nil, badInput("Concat %s: shapes %v and %v differ off axis %d", quoteForMessage(n.Name), first.Shape, t.Shape, axis)
			}
		}
		shape[axis] += t.Shape[axis]
	}
	size := itemSizes[first.DType]
	inner := elementCount(shape[axis+1:]) * size
	data := make([]byte, 0, elementCount(shape)*size)
	for o := 0; o < elementCount(shape[:axis]); o++ {
		for _, t := range in {
			chunk := t.Shape[axis] * inner
			data = append(data, t.Data[o*chunk:(o+1)*chunk]...)
		}
	}
	return []*Tensor{{DType: first.DType, Shape: shape, Data: data}}, nil
}

// transpose permutes its input's axes (perm, by default reversed), copying values.
func transpose(n *Node, in []*Tensor) ([]*Tensor, error) {
	x, err := dataOf(n, in)
	if err != nil {
		return nil, err
	}
	rank := len(x.Shape)
	perm := make([]int, rank)
	for i := range perm {
		perm[i] = rank - 1 - i
	}
	if a, ok := n.Attributes["perm"]; ok {
		if len(a.Ints) != rank {
			return nil, badInput("Transpose %s: perm %v for rank %d", quoteForMessage(n.Name), a.Ints, rank)
		}
		seen := make([]bool, rank)
		for i, p := range a.Ints {
			if p < 0 || p >= int64(rank) || seen[p] {
				return nil, badInput("Transpose %s: perm %v is not a permutation", quoteForMessage(n.Name), a.Ints)
			}
			seen[p] = true
			perm[i] = int(p)
		}
	}
	return []*Tensor{permuted(x, perm)}, nil
}

// permuted is x with its axes in the order perm (output axis i is input axis perm[i]).
func permuted(x *Tensor, perm []int) *Tensor {
	rank := len(x.Shape)
	strides := make([]int, rank)
	stride := 1
	for d := rank - 1; d >= 0; d-- {
		strides[d] = stride
		stride *= x.Shape[d]
	}
	shape := make([]int, rank)
	from := make([]int, rank) // the input stride of each output axis
	for i, p := range perm {
		shape[i], from[i] = x.Shape[p], strides[p]
	}
	size := itemSizes[x.DType]
	data := make([]byte, 0, len(x.Data))
	counter := make([]int, rank)
	at := 0
	for i := elementCount(shape); i > 0; i-- {
		data = append(data, x.Data[at*size:(at+1)*size]...)
		for d := rank - 1; d >= 0; d-- {
			counter[d]++
			at += from[d]
			if counter[d] < shape[d] {
				break
			}
			at -= from[d] * counter[d]
			counter[d] = 0
		}
	}
	return &Tensor{DType: x.DType, Shape: shape, Data: data}
}

// clip is min(max(x, low), high) (numerics.md, section 2: max then min; a NaN operand gives
// NaN, low > high gives high). Of x and low equal (+0 and -0) max keeps x; of the result
// and high equal, min gives high (sealtrace's logs, where numerics.md does not say).
// The bounds are inputs (opset 11 on) or attributes (opset 6).
func clip(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireFloat32(n, in, 1); err != nil {
		return nil, err
	}
	low, high := float32(math.Inf(-1)), float32(math.Inf(1))
	if a, ok := n.Attributes["min"]; ok {
		low = a.F
	}
	if a, ok := n.Attributes["max"]; ok {
		high = a.F
	}
	for k, bound := range []*float32{&low, &high} {
		if len(in) > k+1 && in[k+1] != nil {
			t := in[k+1]
			if t.DType != "<f4" || elementCount(t.Shape) != 1 {
				return nil, badInput("Clip %s: a bound must be a float32 scalar", quoteForMessage(n.Name))
			}
			*bound = t.Float32s()[0]
		}
	}
	x := in[0].Float32s()
	for i, v := range x {
		if v < low {
			v = low
		}
		if v == v && !(v < high) {
			v = high
		}
		x[i] = v
	}
	return []*Tensor{float32Tensor(in[0].Shape, x)}, nil
}

// maximum32 and minimum32: a NaN operand gives NaN (the first, if both are).
func maximum32(a, b float32) float32 {
	if a >= b || a != a {
		return a
	}
	return b
}

func minimum32(a, b float32) float32 {
	if a <= b || a != a {
		return a
	}
	return b
}

// hardSigmoid is max(0, min(1, x * alpha + beta)) + 0 (numerics.md, section 4).
func hardSigmoid32(x, alpha, beta float32) float32 {
	y := float32(x*alpha) + beta
	return maximum32(0, minimum32(1, y)) + 0
}

func hardSigmoid(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireFloat32(n, in, 1); err != nil {
		return nil, err
	}
	alpha, beta := attrFloat(n, "alpha", 0.2), attrFloat(n, "beta", 0.5)
	x := in[0].Float32s()
	for i, v := range x {
		x[i] = hardSigmoid32(v, alpha, beta)
	}
	return []*Tensor{float32Tensor(in[0].Shape, x)}, nil
}

// hardSwish is x * HardSigmoid(x, alpha = RN_float32(1/6), beta = 0.5).
func hardSwish(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireFloat32(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0].Float32s()
	for i, v := range x {
		x[i] = v * hardSigmoid32(v, float32(1.0/6.0), 0.5)
	}
	return []*Tensor{float32Tensor(in[0].Shape, x)}, nil
}

// batchNormalization (inference) per channel c of axis 1, in float32: f = scale / sqrt(var +
// eps); o = B - mean * f; y = x * f + o (numerics.md, section 4).
func batchNormalization(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireFloat32(n, in, 5); err != nil {
		return nil, err
	}
	if attrInt(n, "training_mode", 0) != 0 || len(n.Outputs) > 1 {
		return nil, badInput("BatchNormalization %s in training mode is not supported by sealverify replay yet", quoteForMessage(n.Name))
	}
	x := in[0]
	if len(x.Shape) < 2 {
		return nil, badInput("BatchNormalization %s: input of rank %d", quoteForMessage(n.Name), len(x.Shape))
	}
	channels := x.Shape[1]
	for _, t := range in[1:5] {
		if elementCount(t.Shape) != channels {
			return nil, badInput("BatchNormalization %s: a parameter of shape %v for %d channels", quoteForMessage(n.Name), t.Shape, channels)
		}
	}
	eps := attrFloat(n, "epsilon", 1e-5)
	scale, bias, mean, variance := in[1].Float32s(), in[2].Float32s(), in[3].Float32s(), in[4].Float32s()
	values := x.Float32s()
	inner := elementCount(x.Shape[2:])
	for c := 0; c < channels; c++ {
		f := scale[c] / sqrt32(variance[c]+eps)
		o := bias[c] - float32(mean[c]*f)
		for b := 0; b < x.Shape[0]; b++ {
			plane := values[(b*channels+c)*inner : (b*channels+c+1)*inner]
			for i, v := range plane {
				plane[i] = float32(v*f) + o
			}
		}
	}
	return []*Tensor{float32Tensor(x.Shape, values)}, nil
}

// sqrt32 is float32's correctly rounded square root (rounding float64's correctly rounded root
// to float32 is innocuous: 53 >= 2 * 24 + 2).
func sqrt32(v float32) float32 { return float32(math.Sqrt(float64(v))) }

// window is the geometry of a convolution or pooling over the spatial axes.
type window struct {
	spatial, kernel, strides, dilations, padBegin, padEnd, out []int
}

// newWindow reads strides, dilations, pads and auto_pad (ONNX's rules; ceilMode for pools).
func newWindow(n *Node, spatial, kernel []int, ceilMode bool) (*window, error) {
	rank := len(spatial)
	w := &window{spatial: spatial, kernel: kernel}
	ints := func(name string, fallback int) ([]int, error) {
		out := make([]int, 0, 2*rank)
		a, ok := n.Attributes[name]
		if !ok {
			for i := 0; i < rank; i++ {
				out = append(out, fallback)
			}
			return out, nil
		}
		for _, v := range a.Ints {
			if v < 0 || v > 1<<31 {
				return nil, badInput("%s %s: %s %v", n.OpType, quoteForMessage(n.Name), name, a.Ints)
			}
			out = append(out, int(v))
		}
		return out, nil
	}
	var err error
	if w.strides, err = ints("strides", 1); err != nil {
		return nil, err
	}
	if w.dilations, err = ints("dilations", 1); err != nil {
		return nil, err
	}
	pads, err := ints("pads", 0)
	if err != nil {
		return nil, err
	}
	if _, ok := n.Attributes["pads"]; !ok {
		pads = append(pads, pads...)
	}
	if len(w.strides) != rank || len(w.dilations) != rank || len(pads) != 2*rank || len(kernel) != rank {
		return nil, badInput("%s %s: attributes of the wrong length for %d spatial axes", n.OpType, quoteForMessage(n.Name), rank)
	}
	w.padBegin, w.padEnd, w.out = pads[:rank], pads[rank:], make([]int, rank)
	autoPad := "NOTSET"
	if a, ok := n.Attributes["auto_pad"]; ok && a.S != "" {
		autoPad = a.S
	}
	for i := 0; i < rank; i++ {
		s := w.strides[i]
		if s == 0 || w.dilations[i] == 0 || kernel[i] == 0 {
			return nil, badInput("%s %s: a zero stride, dilation or kernel size", n.OpType, quoteForMessage(n.Name))
		}
		extent := (kernel[i]-1)*w.dilations[i] + 1
		switch autoPad {
		case "NOTSET":
			span := spatial[i] + w.padBegin[i] + w.padEnd[i] - extent
			if span < 0 {
				return nil, badInput("%s %s: the kernel is larger than the padded input", n.OpType, quoteForMessage(n.Name))
			}
			w.out[i] = span/s + 1
			if ceilMode {
				w.out[i] = (span+s-1)/s + 1
				if (w.out[i]-1)*s >= spatial[i]+w.padBegin[i] { // the last window starts in the end padding
					w.out[i]--
				}
			}
		case "VALID":
			if spatial[i] < extent {
				return nil, badInput("%s %s: the kernel is larger than the input", n.OpType, quoteForMessage(n.Name))
			}
			w.padBegin[i], w.padEnd[i], w.out[i] = 0, 0, (spatial[i]-extent)/s+1
		case "SAME_UPPER", "SAME_LOWER":
			w.out[i] = (spatial[i] + s - 1) / s
			total := (w.out[i]-1)*s + extent - spatial[i]
			if total < 0 {
				total = 0
			}
			w.padBegin[i] = total / 2
			if autoPad == "SAME_LOWER" {
				w.padBegin[i] = total - total/2
			}
			w.padEnd[i] = total - w.padBegin[i]
		default:
			return nil, badInput("%s %s: auto_pad %s", n.OpType, quoteForMessage(n.Name), quoteForMessage(autoPad))
		}
	}
	return w, nil
}

// taps calls visit for every output position (its flat index) with, for every kernel tap in
// row-major order (the first axis's taps outermost), the tap's flat index in the kernel and
// the input position's flat index, or -1 where the tap falls in the padding.
func (w *window) taps(visit func(out int, tap, at []int)) {
	rank := len(w.spatial)
	tapCount := elementCount(w.kernel)
	tap, at := make([]int, tapCount), make([]int, tapCount)
	position, k := make([]int, rank), make([]int, rank)
	for out := 0; out < elementCount(w.out); out++ {
		for t := 0; t < tapCount; t++ {
			flat := 0
			for d := 0; d < rank; d++ {
				p := position[d]*w.strides[d] - w.padBegin[d] + k[d]*w.dilations[d]
				if p < 0 || p >= w.spatial[d] {
					flat = -1
					break
				}
				flat = flat*w.spatial[d] + p
			}
			tap[t], at[t] = t, flat
			advance(k, w.kernel)
		}
		visit(out, tap, at)
		advance(position, w.out)
	}
}

// tapsInPaddedInput counts a window's taps inside the input padded by pads (AveragePool's
// count_include_pad counts these, not those past the end padding that ceil_mode adds).
func (w *window) tapsInPaddedInput(position []int) int {
	count := 1
	for d := range w.spatial {
		inside := 0
		for k := 0; k < w.kernel[d]; k++ {
			p := position[d]*w.strides[d] - w.padBegin[d] + k*w.dilations[d]
			if p >= -w.padBegin[d] && p < w.spatial[d]+w.padEnd[d] {
				inside++
			}
		}
		count *= inside
	}
	return count
}

// advance steps a row-major counter within dims, wrapping to zeros at the end.
func advance(counter, dims []int) {
	for d := len(dims) - 1; d >= 0; d-- {
		counter[d]++
		if counter[d] < dims[d] {
			return
		}
		counter[d] = 0
	}
}

// conv is RN(sum over the group's input channels and kernel taps of x * w + bias[m]), padding
// values 0 (numerics.md, section 3.1), with ONNX's strides, dilations, pads and groups.
func conv(n *Node, in []*Tensor) ([]*Tensor, error) {
	x, w, groups, err := convOperands(n, in)
	if err != nil {
		return nil, err
	}
	batch, channels, filters, perGroup := x.Shape[0], x.Shape[1], w.Shape[0], w.Shape[1]
	if groups < 1 || channels != perGroup*groups || filters%groups != 0 {
		return nil, badInput("Conv %s: %d channels, weight %v, %d groups", quoteForMessage(n.Name), channels, w.Shape, groups)
	}
	bias := make([]float32, filters)
	if len(in) > 2 && in[2] != nil {
		if in[2].DType != "<f4" {
			return nil, unsupportedDtype(n, in[2])
		}
		if elementCount(in[2].Shape) != filters {
			return nil, badInput("Conv %s: bias %v for %d filters", quoteForMessage(n.Name), in[2].Shape, filters)
		}
		bias = in[2].Float32s()
	}
	geometry, err := newWindow(n, x.Shape[2:], w.Shape[2:], false)
	if err != nil {
		return nil, err
	}
	xs, ws := x.Float32s(), w.Float32s()
	plane, tapCount, outPlane := elementCount(x.Shape[2:]), elementCount(w.Shape[2:]), elementCount(geometry.out)
	out := make([]float32, batch*filters*outPlane)
	// A filter's weights, channel by channel and tap by tap, are one contiguous run of w; the
	// window's inputs are gathered once per group and position, for all of the group's filters.
	xTaps, weights := make([]float32, perGroup*tapCount), perGroup*tapCount
	perFilterGroup := filters / groups
	geometry.taps(func(position int, _, at []int) {
		for b := 0; b < batch; b++ {
			for g := 0; g < groups; g++ {
				for c := 0; c < perGroup; c++ {
					image := xs[(b*channels+g*perGroup+c)*plane:]
					for t, a := range at {
						xTaps[c*tapCount+t] = 0
						if a >= 0 {
							xTaps[c*tapCount+t] = image[a]
						}
					}
				}
				for m := g * perFilterGroup; m < (g+1)*perFilterGroup; m++ {
					out[(b*filters+m)*outPlane+position] = dotRN32(xTaps, ws[m*weights:(m+1)*weights], 1, float64(bias[m]))
				}
			}
		}
	})
	shape := append([]int{batch, filters}, geometry.out...)
	return []*Tensor{float32Tensor(shape, out)}, nil
}

// poolInput checks a pool's input and reads its window.
func poolInput(n *Node, in []*Tensor) (*Tensor, *window, error) {
	if err := requireFloat32(n, in, 1); err != nil {
		return nil, nil, err
	}
	x := in[0]
	kernel, ok := n.Attributes["kernel_shape"]
	if len(x.Shape) < 3 || !ok || len(kernel.Ints) != len(x.Shape)-2 {
		return nil, nil, badInput("%s %s: input %v, kernel_shape required for its spatial axes", n.OpType, quoteForMessage(n.Name), x.Shape)
	}
	sizes := make([]int, len(kernel.Ints))
	for i, k := range kernel.Ints {
		if k < 1 || k > 1<<31 {
			return nil, nil, badInput("%s %s: kernel_shape %v", n.OpType, quoteForMessage(n.Name), kernel.Ints)
		}
		sizes[i] = int(k)
	}
	geometry, err := newWindow(n, x.Shape[2:], sizes, attrInt(n, "ceil_mode", 0) != 0)
	return x, geometry, err
}

// maxPool is exact: the largest value of each window's taps in the input (padding is never
// the maximum), the first of equal values. A NaN tap gives NaN; but where Indices are asked
// for (flat indices into the input), NaN taps are passed over unless the window's first tap
// (padding included, of value -inf) is one (sealtrace's logs, where numerics.md does not say).
func maxPool(n *Node, in []*Tensor) ([]*Tensor, error) {
	x, geometry, err := poolInput(n, in)
	if err != nil {
		return nil, err
	}
	if attrInt(n, "storage_order", 0) != 0 {
		return nil, badInput("MaxPool %s: storage_order 1 is not supported by sealverify replay yet", quoteForMessage(n.Name))
	}
	xs := x.Float32s()
	planes, plane, outPlane := x.Shape[0]*x.Shape[1], elementCount(x.Shape[2:]), elementCount(geometry.out)
	withIndices := len(n.Outputs) > 1
	out, indices := make([]float32, planes*outPlane), make([]int64, planes*outPlane)
	geometry.taps(func(position int, _, at []int) {
		for p := 0; p < planes; p++ {
			best, bestAt, started := float32(math.Inf(-1)), -1, false
			for _, a := range at {
				if a < 0 {
					started = true // a padding tap, of value -inf
					continue
				}
				v := xs[p*plane+a]
				if !started || v > best || (bestAt < 0 && v == best) || (!withIndices && v != v) {
					best, bestAt = v, a
				}
				started = true
				if !withIndices && v != v {
					break
				}
			}
			out[p*outPlane+position], indices[p*outPlane+position] = best, int64(p*plane+bestAt)
		}
	})
	shape := append([]int{x.Shape[0], x.Shape[1]}, geometry.out...)
	result := []*Tensor{float32Tensor(shape, out)}
	if withIndices {
		result = append(result, int64Tensor(shape, indices))
	}
	return result, nil
}

// int64Tensor encodes values as an int64 tensor.
func int64Tensor(shape []int, values []int64) *Tensor {
	data := make([]byte, 8*len(values))
	for i, v := range values {
		for b := 0; b < 8; b++ {
			data[8*i+b] = byte(uint64(v) >> (8 * b))
		}
	}
	return &Tensor{DType: "<i8", Shape: shape, Data: data}
}

// averagePool adds each window's taps in order, one spatial axis after another (the first
// axis's taps, then the next axis's), each addition rounded to float32, then divides by the
// count: the taps in the input, or with count_include_pad those in the padded input
// (numerics.md, section 4).
func averagePool(n *Node, in []*Tensor) ([]*Tensor, error) {
	x, geometry, err := poolInput(n, in)
	if err != nil {
		return nil, err
	}
	includePad := attrInt(n, "count_include_pad", 0) != 0
	xs := x.Float32s()
	planes, plane, outPlane := x.Shape[0]*x.Shape[1], elementCount(x.Shape[2:]), elementCount(geometry.out)
	out := make([]float32, planes*outPlane)
	position := make([]int, len(geometry.out))
	grid := make([]float32, elementCount(geometry.kernel))
	geometry.taps(func(index int, _, at []int) {
		count := 0
		if includePad {
			count = geometry.tapsInPaddedInput(position)
		} else {
			for _, a := range at {
				if a >= 0 {
					count++
				}
			}
		}
		for p := 0; p < planes; p++ {
			for t, a := range at {
				grid[t] = 0 // a tap in the padding adds +0, which changes no sum that starts at +0
				if a >= 0 {
					grid[t] = xs[p*plane+a]
				}
			}
			out[p*outPlane+index] = sumAxisByAxis(grid, geometry.kernel) / float32(count)
		}
		advance(position, geometry.out)
	})
	shape := append([]int{x.Shape[0], x.Shape[1]}, geometry.out...)
	return []*Tensor{float32Tensor(shape, out)}, nil
}

// sumAxisByAxis adds a kernel-shaped grid (row-major) along its first axis, from +0 and in
// order, each addition rounded to float32; then the sums along the next axis; and so on.
func sumAxisByAxis(grid []float32, kernel []int) float32 {
	values := append([]float32(nil), grid...)
	for _, k := range kernel {
		rest := len(values) / k
		sums := make([]float32, rest)
		for j := range sums {
			for i := 0; i < k; i++ {
				sums[j] += values[i*rest+j]
			}
		}
		values = sums
	}
	return values[0]
}

// globalAveragePool is the correctly rounded mean over the spatial axes of each channel.
func globalAveragePool(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireFloat32(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if len(x.Shape) < 3 {
		return nil, badInput("GlobalAveragePool %s: input of rank %d", quoteForMessage(n.Name), len(x.Shape))
	}
	xs := x.Float32s()
	planes, plane := x.Shape[0]*x.Shape[1], elementCount(x.Shape[2:])
	out := make([]float32, planes)
	for p := range out {
		out[p] = meanRN32(xs[p*plane : (p+1)*plane])
	}
	shape := []int{x.Shape[0], x.Shape[1]}
	for range x.Shape[2:] {
		shape = append(shape, 1)
	}
	return []*Tensor{float32Tensor(shape, out)}, nil
}

// meanRN32 is RN_float32(sum x / n), one rounding of the exact value (numerics.md, section
// 3.2); NaN for no values; IEEE's rules for infinities and NaN; an exact zero is +0.
func meanRN32(x []float32) float32 {
	if len(x) == 0 {
		return float32(math.NaN())
	}
	var sum, sumAbs float64
	var seen nonFinite
	for _, v := range x {
		f := float64(v)
		seen.see(f)
		sum += f
		sumAbs += math.Abs(f)
	}
	if seen.nan || seen.posInf || seen.negInf {
		return float32(seen.sum())
	}
	// The float64 sum of n float32 values is within (n - 1) u sumAbs of the exact sum, so the
	// mean within u sumAbs, plus u of itself for the division; the bound doubles that.
	count := float64(len(x))
	mean := sum / count
	err := 2 * float64Unit * (2*sumAbs + 2*math.Abs(mean))
	lo, hi := float32(mean-err), float32(mean+err)
	if math.Float32bits(lo) == math.Float32bits(hi) {
		return lo
	}
	exact := new(big.Rat)
	for _, v := range x {
		exact.Add(exact, new(big.Rat).SetFloat64(float64(v)))
	}
	if exact.Sign() == 0 {
		return 0
	}
	rounded, _ := exact.Quo(exact, new(big.Rat).SetInt64(int64(len(x)))).Float32()
	if rounded == 0 && exact.Sign() < 0 {
		return float32(math.Copysign(0, -1))
	}
	return rounded
}

// identity passes its input on.
func identity(n *Node, in []*Tensor) ([]*Tensor, error) {
	x, err := dataOf(n, in)
	if err != nil {
		return nil, err
	}
	return []*Tensor{x}, nil
}

// clampIndex is ONNX's start/end normalization: negative counts from the end, then into [lo, hi].
func clampIndex(v int64, dim, lo, hi int) int {
	if v < 0 {
		v += int64(dim)
	}
	if v < int64(lo) {
		return lo
	}
	if v > int64(hi) {
		return hi
	}
	return int(v)
}

// shapeOf is the input's shape as int64, dimensions start to end (opset 15's attributes).
func shapeOf(n *Node, in []*Tensor) ([]*Tensor, error) {
	x, err := dataOf(n, in)
	if err != nil {
		return nil, err
	}
	rank := len(x.Shape)
	start := clampIndex(attrInt(n, "start", 0), rank, 0, rank)
	end := clampIndex(attrInt(n, "end", int64(rank)), rank, 0, rank)
	dims := []int64{}
	for i := start; i < end; i++ {
		dims = append(dims, int64(x.Shape[i]))
	}
	return []*Tensor{int64Tensor([]int{len(dims)}, dims)}, nil
}

// slice copies data[starts:ends:steps] along axes (opset 10 on: starts, ends, axes and steps
// are int64 inputs), any dtype.
func slice(n *Node, in []*Tensor) ([]*Tensor, error) {
	x, err := dataOf(n, in)
	if err != nil {
		return nil, err
	}
	ints := func(k int) ([]int64, error) {
		if len(in) <= k || in[k] == nil {
			return nil, nil
		}
		if len(in[k].Shape) != 1 {
			return nil, badInput("Slice %s: input %d must be 1-D", quoteForMessage(n.Name), k)
		}
		return indexList(n, in[k], "input "+strconv.Itoa(k))
	}
	starts, err1 := ints(1)
	ends, err2 := ints(2)
	axes, err3 := ints(3)
	steps, err4 := ints(4)
	for _, e := range []error{err1, err2, err3, err4} {
		if e != nil {
			return nil, e
		}
	}
	if len(in) < 3 || len(starts) != len(ends) || (axes != nil && len(axes) != len(starts)) || (steps != nil && len(steps) != len(starts)) {
		return nil, badInput("Slice %s: starts, ends, axes and steps of different lengths (attributes of opset 1 are not read)", quoteForMessage(n.Name))
	}
	rank := len(x.Shape)
	first, step, shape := make([]int, rank), make([]int, rank), append([]int{}, x.Shape...)
	for d := range step {
		step[d] = 1
	}
	for i := range starts {
		axis := i
		if axes != nil {
			if axis, err = normalizeAxis(n, axes[i], rank); err != nil {
				return nil, err
			}
		}
		s := int64(1)
		if steps != nil {
			s = steps[i]
		}
		dim := x.Shape[axis]
		if s == 0 {
			return nil, badInput("Slice %s: a zero step", quoteForMessage(n.Name))
		}
		var begin, end int
		if s > 0 {
			begin, end = clampIndex(starts[i], dim, 0, dim), clampIndex(ends[i], dim, 0, dim)
		} else {
			begin, end = clampIndex(starts[i], dim, 0, dim-1), clampIndex(ends[i], dim, -1, dim-1)
		}
		count := 0
		if s > 0 && end > begin {
			count = (end - begin + int(s) - 1) / int(s)
		} else if s < 0 && begin > end {
			count = (begin - end - int(s) - 1) / int(-s)
		}
		first[axis], step[axis], shape[axis] = begin, int(s), count
	}
	strides := make([]int, rank)
	stride := 1
	for d := rank - 1; d >= 0; d-- {
		strides[d] = stride
		stride *= x.Shape[d]
	}
	size := itemSizes[x.DType]
	data := make([]byte, 0, elementCount(shape)*size)
	counter := make([]int, rank)
	for i := elementCount(shape); i > 0; i-- {
		at := 0
		for d := range counter {
			at += (first[d] + counter[d]*step[d]) * strides[d]
		}
		data = append(data, x.Data[at*size:(at+1)*size]...)
		advance(counter, shape)
	}
	return []*Tensor{{DType: x.DType, Shape: shape, Data: data}}, nil
}
