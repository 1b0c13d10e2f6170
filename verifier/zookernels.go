package main

// The operators of the Magika file-type classifier and the int8 all-MiniLM-L6 export: Exp,
// Reciprocal, variadic Max, GlobalMaxPool, IsNaN, GreaterOrEqual, And and GatherND.

func reciprocal32(x float32) float32 { return 1 / x }

// broadcastAll is the common shape of every input and, for each input, the flat index of its
// element at each output position.
func broadcastAll(n *Node, in []*Tensor) ([]int, [][]int, error) {
	if len(in) == 0 {
		return nil, nil, badInput("%s %s: no inputs", n.OpType, quoteForMessage(n.Name))
	}
	shape := in[0].Shape
	for _, t := range in {
		if t == nil || t.DType != in[0].DType {
			return nil, nil, badInput("%s %s: inputs must all be present and of one type", n.OpType, quoteForMessage(n.Name))
		}
		var err error
		if shape, err = broadcastShape(shape, t.Shape); err != nil {
			return nil, nil, badInput("%s %s: %v", n.OpType, quoteForMessage(n.Name), err)
		}
	}
	index := make([][]int, len(in))
	for i, t := range in {
		index[i] = broadcastIndex(t.Shape, shape)
	}
	return shape, index, nil
}

// variadicMax folds its inputs left to right: on float32 a NaN operand gives NaN (the first NaN)
// and of equal values, zeros of either sign included, the later input is kept (sealtrace's logs
// show it, at every length); integers compare as integers.
func variadicMax(n *Node, in []*Tensor) ([]*Tensor, error) {
	shape, index, err := broadcastAll(n, in)
	if err != nil {
		return nil, err
	}
	dtype := in[0].DType
	count := elementCount(shape)
	if dtype == "<f4" {
		values := make([][]float32, len(in))
		for i, t := range in {
			values[i] = t.Float32s()
		}
		out := make([]float32, count)
		for j := range out {
			m := values[0][index[0][j]]
			for i := 1; i < len(in); i++ {
				if v := values[i][index[i][j]]; m == m && (v >= m || v != v) {
					m = v
				}
			}
			out[j] = m
		}
		return []*Tensor{float32Tensor(shape, out)}, nil
	}
	if _, integer := integerDtypes[dtype]; !integer {
		return nil, badInput("Max on %s is not supported by sealverify replay yet (float32 and integers)", dtype)
	}
	unsigned := !integerDtypes[dtype]
	data := make([]byte, count*itemSizes[dtype])
	for j := 0; j < count; j++ {
		m := intAt(dtype, in[0].Data, index[0][j])
		for i := 1; i < len(in); i++ {
			v := intAt(dtype, in[i].Data, index[i][j])
			if unsigned && uint64(v) > uint64(m) || !unsigned && v > m {
				m = v
			}
		}
		putInt(dtype, data, j, m)
	}
	return []*Tensor{{DType: dtype, Shape: shape, Data: data}}, nil
}

// globalMaxPool is ReduceMax over all spatial axes: a NaN anywhere gives NaN, and of zeros +0
// if the plane holds one (sealtrace's logs show it, where MaxPool keeps the first of equal
// values). Any rank from 3 up ([N, C, ...]).
func globalMaxPool(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireFloat32(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if len(x.Shape) < 3 {
		return nil, badInput("GlobalMaxPool %s: input of rank %d, expected at least 3", quoteForMessage(n.Name), len(x.Shape))
	}
	xs := x.Float32s()
	planes, plane := x.Shape[0]*x.Shape[1], elementCount(x.Shape[2:])
	out := make([]float32, planes)
	for p := range out {
		out[p] = max32(xs[p*plane : (p+1)*plane])
	}
	shape := []int{x.Shape[0], x.Shape[1]}
	for range x.Shape[2:] {
		shape = append(shape, 1)
	}
	return []*Tensor{float32Tensor(shape, out)}, nil
}

// isNaN is a bool tensor, true where a float element is NaN.
func isNaN(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	var values []float64
	switch x.DType {
	case "<f4":
		for _, v := range x.Float32s() {
			values = append(values, float64(v))
		}
	case "<f8":
		values = x.Float64s()
	default:
		return nil, badInput("IsNaN on %s is not supported by sealverify replay yet (float32 and float64)", x.DType)
	}
	out := make([]byte, len(values))
	for i, v := range values {
		if v != v {
			out[i] = 1
		}
	}
	return []*Tensor{{DType: "|b1", Shape: x.Shape, Data: out}}, nil
}

// greaterOrEqual is x >= y elementwise with broadcasting (IEEE: NaN compares false, -0 >= +0).
func greaterOrEqual(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireInputs(n, in, 2); err != nil {
		return nil, err
	}
	shape, index, err := broadcastAll(n, in)
	if err != nil {
		return nil, err
	}
	a, b := in[0], in[1]
	var atLeast func(i, j int) bool
	_, integer := integerDtypes[a.DType]
	switch {
	case a.DType == "<f4":
		x, y := a.Float32s(), b.Float32s()
		atLeast = func(i, j int) bool { return x[i] >= y[j] }
	case a.DType == "<f8":
		x, y := a.Float64s(), b.Float64s()
		atLeast = func(i, j int) bool { return x[i] >= y[j] }
	case integer && integerDtypes[a.DType]:
		atLeast = func(i, j int) bool { return intAt(a.DType, a.Data, i) >= intAt(b.DType, b.Data, j) }
	case integer:
		atLeast = func(i, j int) bool { return uint64(intAt(a.DType, a.Data, i)) >= uint64(intAt(b.DType, b.Data, j)) }
	default:
		return nil, badInput("GreaterOrEqual on %s is not supported by sealverify replay yet", a.DType)
	}
	out := make([]byte, elementCount(shape))
	for k := range out {
		if atLeast(index[0][k], index[1][k]) {
			out[k] = 1
		}
	}
	return []*Tensor{{DType: "|b1", Shape: shape, Data: out}}, nil
}

// and is the logical conjunction of two bool tensors with broadcasting.
func and(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireInputs(n, in, 2); err != nil {
		return nil, err
	}
	shape, index, err := broadcastAll(n, in)
	if err != nil {
		return nil, err
	}
	if in[0].DType != "|b1" {
		return nil, badInput("And %s: operands of type %s, expected bool", quoteForMessage(n.Name), in[0].DType)
	}
	out := make([]byte, elementCount(shape))
	for k := range out {
		if in[0].Data[index[0][k]] != 0 && in[1].Data[index[1][k]] != 0 {
			out[k] = 1
		}
	}
	return []*Tensor{{DType: "|b1", Shape: shape, Data: out}}, nil
}

// gatherND copies, for each index tuple of the last axis of indices, the slice of data it
// names, the first batch_dims axes of data and indices walked together. Negative indices
// count from the end; one out of range is bad input.
func gatherND(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireInputs(n, in, 2); err != nil {
		return nil, err
	}
	data, indices := in[0], in[1]
	if indices.DType != "<i8" && indices.DType != "<i4" {
		return nil, badInput("GatherND %s: indices of type %s, expected int64", quoteForMessage(n.Name), indices.DType)
	}
	b := int(attrInt(n, "batch_dims", 0))
	q := len(indices.Shape)
	if q < 1 || b < 0 || b >= q || b >= len(data.Shape) {
		return nil, badInput("GatherND %s: batch_dims %d for ranks %d and %d", quoteForMessage(n.Name), b, len(data.Shape), q)
	}
	depth := indices.Shape[q-1]
	if b+depth > len(data.Shape) {
		return nil, badInput("GatherND %s: index tuples of length %d for data of rank %d", quoteForMessage(n.Name), depth, len(data.Shape))
	}
	for i := 0; i < b; i++ {
		if data.Shape[i] != indices.Shape[i] {
			return nil, badInput("GatherND %s: batch dimensions %v and %v differ", quoteForMessage(n.Name), data.Shape[:b], indices.Shape[:b])
		}
	}
	shape := append(append([]int{}, indices.Shape[:q-1]...), data.Shape[b+depth:]...)
	if err := withinBudget(n, shape, data.DType); err != nil {
		return nil, err
	}
	item := itemSizes[data.DType]
	sliceBytes := elementCount(data.Shape[b+depth:]) * item
	batchBytes := elementCount(data.Shape[b:]) * item
	tuplesPerBatch := elementCount(indices.Shape[b : q-1])
	tuples := elementCount(indices.Shape[:q-1])
	out := make([]byte, 0, tuples*sliceBytes)
	for t := 0; t < tuples; t++ {
		offset := (t / tuplesPerBatch) * batchBytes
		stride := batchBytes
		for k := 0; k < depth; k++ {
			dim := data.Shape[b+k]
			stride /= dim
			v := intAt(indices.DType, indices.Data, t*depth+k)
			if v < -int64(dim) || v >= int64(dim) {
				return nil, badInput("GatherND %s: index %d out of range for a dimension of %d", quoteForMessage(n.Name), v, dim)
			}
			if v < 0 {
				v += int64(dim)
			}
			offset += int(v) * stride
		}
		out = append(out, data.Data[offset:offset+sliceBytes]...)
	}
	return []*Tensor{{DType: data.DType, Shape: shape, Data: out}}, nil
}
