package main

// The data-movement, integer and boolean operators (issue 30, stages b and c): Split, Gather,
// Unsqueeze, Squeeze, Expand, Where, Equal, Constant, ConstantOfShape, Range, Cast, and the
// arithmetic operators on integers and float64. Copies are exact for every dtype; integer
// arithmetic wraps as two's complement; Cast and Range follow docs/numerics.md, section 5.

import (
	"encoding/binary"
	"math"
	"math/big"
)

// integerDtypes: the integer dtypes and whether each is signed.
var integerDtypes = map[string]bool{
	"|i1": true, "<i2": true, "<i4": true, "<i8": true, "|u1": false, "<u2": false, "<u4": false, "<u8": false,
}

// intAt reads element i of an integer or boolean tensor's bytes, sign- or zero-extended.
func intAt(dtype string, data []byte, i int) int64 {
	size := itemSizes[dtype]
	var u uint64
	for b := size - 1; b >= 0; b-- {
		u = u<<8 | uint64(data[i*size+b])
	}
	if integerDtypes[dtype] && size < 8 && u>>(8*size-1) != 0 {
		u |= ^uint64(0) << (8 * size) // sign extension
	}
	return int64(u)
}

// putInt writes v, reduced modulo 2^bits (two's complement), as element i of dtype.
func putInt(dtype string, data []byte, i int, v int64) {
	size := itemSizes[dtype]
	for b := 0; b < size; b++ {
		data[i*size+b] = byte(uint64(v) >> (8 * b))
	}
}

// float64Tensor encodes values as a float64 tensor, every NaN the canonical NaN.
func float64Tensor(shape []int, values []float64) *Tensor {
	data := make([]byte, 8*len(values))
	for i, v := range values {
		bits := math.Float64bits(v)
		if v != v {
			bits = 0x7FF8000000000000
		}
		binary.LittleEndian.PutUint64(data[8*i:], bits)
	}
	return &Tensor{DType: "<f8", Shape: shape, Data: data}
}

// Float64s decodes a float64 tensor's values.
func (t *Tensor) Float64s() []float64 {
	out := make([]float64, len(t.Data)/8)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:]))
	}
	return out
}

// requireInputs checks a node has its first count inputs.
func requireInputs(n *Node, in []*Tensor, count int) error {
	if len(in) < count {
		return badInput("%s %s: expected %d inputs, got %d", n.OpType, quoteForMessage(n.Name), count, len(in))
	}
	for _, t := range in[:count] {
		if t == nil {
			return badInput("%s %s: a required input is missing", n.OpType, quoteForMessage(n.Name))
		}
	}
	return nil
}

// indexList reads a 1-D (or scalar) int64 input, or an int32 one where ONNX allows it.
func indexList(n *Node, t *Tensor, what string) ([]int64, error) {
	if len(t.Shape) > 1 || (t.DType != "<i8" && t.DType != "<i4") {
		return nil, badInput("%s %s: %s must be a 1-D int64 tensor, not %s %v", n.OpType, quoteForMessage(n.Name), what, t.DType, t.Shape)
	}
	out := make([]int64, elementCount(t.Shape))
	for i := range out {
		out[i] = intAt(t.DType, t.Data, i)
	}
	return out, nil
}

// copyBroadcast copies x's elements into shape, broadcast as NumPy does (Expand, Where).
func copyBroadcast(x *Tensor, shape []int) []byte {
	size := itemSizes[x.DType]
	index := broadcastIndex(x.Shape, shape)
	data := make([]byte, len(index)*size)
	for i, at := range index {
		copy(data[i*size:(i+1)*size], x.Data[at*size:(at+1)*size])
	}
	return data
}

// arithmetic is Add, Sub, Mul or Div with broadcasting: in float32 and float64 one exact IEEE
// operation (numerics.md, section 2); on integers exact and reduced modulo 2^bits, Div
// truncating toward zero, x / 0 = 0 (sealtrace's logs, where numerics.md does not say).
func arithmetic(op byte) kernel {
	return func(n *Node, in []*Tensor) ([]*Tensor, error) {
		if err := requireInputs(n, in, 2); err != nil {
			return nil, err
		}
		a, b := in[0], in[1]
		if a.DType != b.DType {
			return nil, badInput("%s %s: operands of types %s and %s", n.OpType, quoteForMessage(n.Name), a.DType, b.DType)
		}
		shape, err := broadcastShape(a.Shape, b.Shape)
		if err != nil {
			return nil, badInput("%s %s: %v", n.OpType, quoteForMessage(n.Name), err)
		}
		ia, ib := broadcastIndex(a.Shape, shape), broadcastIndex(b.Shape, shape)
		switch _, integer := integerDtypes[a.DType]; {
		case a.DType == "<f4":
			return elementwise(func(x, y float32) float32 { return floatOp(op, x, y) })(n, in)
		case a.DType == "<f8":
			x, y := a.Float64s(), b.Float64s()
			out := make([]float64, len(ia))
			for i := range out {
				out[i] = floatOp(op, x[ia[i]], y[ib[i]])
			}
			return []*Tensor{float64Tensor(shape, out)}, nil
		case integer:
			data := make([]byte, len(ia)*itemSizes[a.DType])
			for i := range ia {
				putInt(a.DType, data, i, integerOp(op, a.DType, intAt(a.DType, a.Data, ia[i]), intAt(b.DType, b.Data, ib[i])))
			}
			return []*Tensor{{DType: a.DType, Shape: shape, Data: data}}, nil
		}
		return nil, badInput("%s on %s is not supported by sealverify replay yet (float32, float64 and integers)", n.OpType, a.DType)
	}
}

// floatOp: x op y, one IEEE operation in T (float32 or float64).
func floatOp[T float32 | float64](op byte, x, y T) T {
	switch op {
	case '+':
		return x + y
	case '-':
		return x - y
	case '*':
		return x * y
	}
	return x / y
}

// integerOp: x op y in the integers, to be reduced modulo 2^bits by putInt. Go's int64
// operations wrap, and its MinInt64 / -1 is MinInt64; uint64 divides unsigned.
func integerOp(op byte, dtype string, x, y int64) int64 {
	switch op {
	case '+':
		return x + y
	case '-':
		return x - y
	case '*':
		return x * y
	}
	switch {
	case y == 0:
		return 0
	case dtype == "<u8":
		return int64(uint64(x) / uint64(y))
	}
	return x / y
}

// equal is elementwise x == y (IEEE comparison for floats: NaN equals nothing, -0 equals +0),
// with broadcasting; a bool output.
func equal(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireInputs(n, in, 2); err != nil {
		return nil, err
	}
	a, b := in[0], in[1]
	if a.DType != b.DType {
		return nil, badInput("Equal %s: operands of types %s and %s", quoteForMessage(n.Name), a.DType, b.DType)
	}
	shape, err := broadcastShape(a.Shape, b.Shape)
	if err != nil {
		return nil, badInput("Equal %s: %v", quoteForMessage(n.Name), err)
	}
	ia, ib := broadcastIndex(a.Shape, shape), broadcastIndex(b.Shape, shape)
	out := make([]byte, len(ia))
	var same func(i, j int) bool
	_, integer := integerDtypes[a.DType]
	switch {
	case a.DType == "<f4":
		x, y := a.Float32s(), b.Float32s()
		same = func(i, j int) bool { return x[i] == y[j] }
	case a.DType == "<f8":
		x, y := a.Float64s(), b.Float64s()
		same = func(i, j int) bool { return x[i] == y[j] }
	case integer || a.DType == "|b1":
		same = func(i, j int) bool { return intAt(a.DType, a.Data, i) == intAt(b.DType, b.Data, j) }
	default:
		return nil, badInput("Equal on %s is not supported by sealverify replay yet", a.DType)
	}
	for i := range out {
		if same(ia[i], ib[i]) {
			out[i] = 1
		}
	}
	return []*Tensor{{DType: "|b1", Shape: shape, Data: out}}, nil
}

// where picks x where the condition holds and y elsewhere, the three broadcast together.
func where(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireInputs(n, in, 3); err != nil {
		return nil, err
	}
	c, x, y := in[0], in[1], in[2]
	if c.DType != "|b1" || x.DType != y.DType {
		return nil, badInput("Where %s: a bool condition and two values of one type expected, got %s, %s, %s", quoteForMessage(n.Name), c.DType, x.DType, y.DType)
	}
	shape, err := broadcastShape(c.Shape, x.Shape)
	if err == nil {
		shape, err = broadcastShape(shape, y.Shape)
	}
	if err != nil {
		return nil, badInput("Where %s: %v", quoteForMessage(n.Name), err)
	}
	cs, xs, ys := copyBroadcast(c, shape), copyBroadcast(x, shape), copyBroadcast(y, shape)
	size := itemSizes[x.DType]
	for i, pick := range cs {
		if pick == 0 {
			copy(xs[i*size:(i+1)*size], ys[i*size:(i+1)*size])
		}
	}
	return []*Tensor{{DType: x.DType, Shape: shape, Data: xs}}, nil
}

// expand broadcasts its input to the broadcast of its shape and the shape asked.
func expand(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireInputs(n, in, 2); err != nil {
		return nil, err
	}
	asked, err := indexList(n, in[1], "the shape")
	if err != nil {
		return nil, err
	}
	dims, err := dimensions(n, asked)
	if err != nil {
		return nil, err
	}
	shape, err := broadcastShape(in[0].Shape, dims)
	if err != nil {
		return nil, badInput("Expand %s: %v", quoteForMessage(n.Name), err)
	}
	if err := withinBudget(n, shape, in[0].DType); err != nil {
		return nil, err
	}
	return []*Tensor{{DType: in[0].DType, Shape: shape, Data: copyBroadcast(in[0], shape)}}, nil
}

// dimensions checks a shape given as data: no negative dimension.
func dimensions(n *Node, values []int64) ([]int, error) {
	dims := make([]int, len(values))
	for i, d := range values {
		if d < 0 || d > defaultMemoryBudget {
			return nil, badInput("%s %s: dimension %d in %v", n.OpType, quoteForMessage(n.Name), d, values)
		}
		dims[i] = int(d)
	}
	return dims, nil
}

// withinBudget refuses an output a shape given as data would make larger than the memory budget.
func withinBudget(n *Node, shape []int, dtype string) error {
	total := int64(itemSizes[dtype])
	for _, d := range shape {
		if d != 0 && total > defaultMemoryBudget/int64(d) {
			return badInput("%s %s: an output of shape %v is larger than the memory budget", n.OpType, quoteForMessage(n.Name), shape)
		}
		total *= int64(d)
	}
	return nil
}

// gather takes the slices of data at indices along axis (negative indices count from the end).
func gather(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireInputs(n, in, 2); err != nil {
		return nil, err
	}
	data, indices := in[0], in[1]
	if indices.DType != "<i8" && indices.DType != "<i4" {
		return nil, badInput("Gather %s: indices of type %s (int32 or int64 expected)", quoteForMessage(n.Name), indices.DType)
	}
	if len(data.Shape) == 0 {
		return nil, badInput("Gather %s: a scalar to gather from", quoteForMessage(n.Name))
	}
	axis, err := normalizeAxis(n, attrInt(n, "axis", 0), len(data.Shape))
	if err != nil {
		return nil, err
	}
	dim, size := data.Shape[axis], itemSizes[data.DType]
	inner := elementCount(data.Shape[axis+1:]) * size
	count := elementCount(indices.Shape)
	shape := append(append(append([]int{}, data.Shape[:axis]...), indices.Shape...), data.Shape[axis+1:]...)
	out := make([]byte, 0, elementCount(shape)*size)
	for o := 0; o < elementCount(data.Shape[:axis]); o++ {
		for i := 0; i < count; i++ {
			k := intAt(indices.DType, indices.Data, i)
			if k < 0 {
				k += int64(dim)
			}
			if k < 0 || k >= int64(dim) {
				return nil, badInput("Gather %s: index %d out of range for dimension %d", quoteForMessage(n.Name), intAt(indices.DType, indices.Data, i), dim)
			}
			start := (o*dim + int(k)) * inner
			out = append(out, data.Data[start:start+inner]...)
		}
	}
	return []*Tensor{{DType: data.DType, Shape: shape, Data: out}}, nil
}

// split cuts its input along axis into the parts the split input (opset 13 on) or attribute
// gives, else into equal parts (opset 18's num_outputs: the last one smaller where they do not
// divide evenly).
func split(n *Node, in []*Tensor) ([]*Tensor, error) {
	x, err := dataOf(n, in)
	if err != nil {
		return nil, err
	}
	axis, err := normalizeAxis(n, attrInt(n, "axis", 0), len(x.Shape))
	if err != nil {
		return nil, err
	}
	dim, parts := x.Shape[axis], len(n.Outputs)
	var sizes []int64
	if a, ok := n.Attributes["split"]; ok && n.Opset < 13 {
		sizes = a.Ints
	} else if len(in) > 1 && in[1] != nil {
		if sizes, err = indexList(n, in[1], "split"); err != nil {
			return nil, err
		}
	}
	if sizes == nil {
		each := (dim + parts - 1) / parts
		if _, ok := n.Attributes["num_outputs"]; !ok && dim%parts != 0 {
			return nil, badInput("Split %s: %d does not split into %d equal parts", quoteForMessage(n.Name), dim, parts)
		}
		for left := dim; left > 0 || len(sizes) < parts; left -= each {
			if left < each {
				each = left
			}
			sizes = append(sizes, int64(each))
		}
	}
	total := int64(0)
	for _, s := range sizes {
		if s < 0 {
			return nil, badInput("Split %s: a negative part in %v", quoteForMessage(n.Name), sizes)
		}
		total += s
	}
	if total != int64(dim) || len(sizes) != parts {
		return nil, badInput("Split %s: parts %v for dimension %d and %d outputs", quoteForMessage(n.Name), sizes, dim, parts)
	}
	size := itemSizes[x.DType]
	inner := elementCount(x.Shape[axis+1:]) * size
	out := make([]*Tensor, parts)
	begin := 0
	for p, s := range sizes {
		shape := append([]int{}, x.Shape...)
		shape[axis] = int(s)
		data := make([]byte, 0, elementCount(shape)*size)
		for o := 0; o < elementCount(x.Shape[:axis]); o++ {
			row := x.Data[(o*dim+begin)*inner:]
			data = append(data, row[:int(s)*inner]...)
		}
		out[p] = &Tensor{DType: x.DType, Shape: shape, Data: data}
		begin += int(s)
	}
	return out, nil
}

// axesOf reads Unsqueeze's and Squeeze's axes: an input from opset 13 on, an attribute before.
func axesOf(n *Node, in []*Tensor) ([]int64, bool, error) {
	if n.Opset < 13 {
		a, ok := n.Attributes["axes"]
		if !ok {
			return nil, false, nil
		}
		return a.Ints, true, nil
	}
	if len(in) < 2 || in[1] == nil {
		return nil, false, nil
	}
	axes, err := indexList(n, in[1], "axes")
	return axes, true, err
}

// unsqueeze inserts dimensions of size 1 at axes (counted in the output's rank).
func unsqueeze(n *Node, in []*Tensor) ([]*Tensor, error) {
	x, err := dataOf(n, in)
	if err != nil {
		return nil, err
	}
	axes, given, err := axesOf(n, in)
	if err != nil {
		return nil, err
	}
	if !given {
		return nil, badInput("Unsqueeze %s: no axes", quoteForMessage(n.Name))
	}
	rank := len(x.Shape) + len(axes)
	inserted := make([]bool, rank)
	for _, a := range axes {
		axis, err := normalizeAxis(n, a, rank)
		if err != nil {
			return nil, err
		}
		if inserted[axis] {
			return nil, badInput("Unsqueeze %s: axis %d twice in %v", quoteForMessage(n.Name), axis, axes)
		}
		inserted[axis] = true
	}
	shape := make([]int, 0, rank)
	next := 0
	for _, one := range inserted {
		if one {
			shape = append(shape, 1)
		} else {
			shape = append(shape, x.Shape[next])
			next++
		}
	}
	return []*Tensor{{DType: x.DType, Shape: shape, Data: x.Data}}, nil
}

// squeeze removes the dimensions of size 1 at axes, or all of them without axes.
func squeeze(n *Node, in []*Tensor) ([]*Tensor, error) {
	x, err := dataOf(n, in)
	if err != nil {
		return nil, err
	}
	axes, given, err := axesOf(n, in)
	if err != nil {
		return nil, err
	}
	removed := make([]bool, len(x.Shape))
	for d, size := range x.Shape {
		removed[d] = !given && size == 1
	}
	for _, a := range axes {
		axis, err := normalizeAxis(n, a, len(x.Shape))
		if err != nil {
			return nil, err
		}
		if x.Shape[axis] != 1 {
			return nil, badInput("Squeeze %s: axis %d has size %d", quoteForMessage(n.Name), axis, x.Shape[axis])
		}
		removed[axis] = true
	}
	shape := []int{}
	for d, size := range x.Shape {
		if !removed[d] {
			shape = append(shape, size)
		}
	}
	return []*Tensor{{DType: x.DType, Shape: shape, Data: x.Data}}, nil
}

// constantValue is a Constant's or ConstantOfShape's value attribute.
func constantValue(n *Node, a *Attribute) (*Tensor, error) {
	if a.TensorErr != nil {
		return nil, badInput("%s %s: its value: %v", n.OpType, quoteForMessage(n.Name), a.TensorErr)
	}
	if a.Tensor == nil {
		return nil, badInput("%s %s: its value is not a tensor", n.OpType, quoteForMessage(n.Name))
	}
	return a.Tensor, nil
}

// constant is its value: value (a tensor), value_float(s) or value_int(s).
func constant(n *Node, _ []*Tensor) ([]*Tensor, error) {
	for name, a := range n.Attributes {
		switch name {
		case "value":
			t, err := constantValue(n, a)
			return []*Tensor{t}, err
		case "value_float":
			return []*Tensor{float32Tensor(nil, []float32{a.F})}, nil
		case "value_floats":
			return []*Tensor{float32Tensor([]int{len(a.Floats)}, a.Floats)}, nil
		case "value_int":
			return []*Tensor{int64Tensor(nil, []int64{a.I})}, nil
		case "value_ints":
			return []*Tensor{int64Tensor([]int{len(a.Ints)}, a.Ints)}, nil
		}
	}
	return nil, badInput("Constant %s: a value of a kind sealverify replay does not support yet (sparse or strings)", quoteForMessage(n.Name))
}

// constantOfShape fills the shape its input gives with value's one element (float32 0 by default).
func constantOfShape(n *Node, in []*Tensor) ([]*Tensor, error) {
	x, err := dataOf(n, in)
	if err != nil {
		return nil, err
	}
	asked, err := indexList(n, x, "the shape")
	if err != nil {
		return nil, err
	}
	shape, err := dimensions(n, asked)
	if err != nil {
		return nil, err
	}
	value := float32Tensor(nil, []float32{0})
	if a, ok := n.Attributes["value"]; ok {
		if value, err = constantValue(n, a); err != nil {
			return nil, err
		}
		if elementCount(value.Shape) != 1 {
			return nil, badInput("ConstantOfShape %s: a value of shape %v (one element expected)", quoteForMessage(n.Name), value.Shape)
		}
	}
	if err := withinBudget(n, shape, value.DType); err != nil {
		return nil, err
	}
	return []*Tensor{{DType: value.DType, Shape: shape, Data: copyBroadcast(&Tensor{DType: value.DType, Data: value.Data}, shape)}}, nil
}

// rangeOf is Range: integers exactly; floats as numerics.md section 5 says: the count
// ceil(RN_T(limit - start) / delta) with the division in float64, out[0] = start, out[i] =
// RN_T(out[i-1] + delta).
func rangeOf(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireInputs(n, in, 3); err != nil {
		return nil, err
	}
	dtype := in[0].DType
	for _, t := range in {
		if t.DType != dtype || elementCount(t.Shape) != 1 || len(t.Shape) > 1 {
			return nil, badInput("Range %s: start, limit and delta must be scalars of one type", quoteForMessage(n.Name))
		}
	}
	var count float64
	switch dtype {
	case "<f4":
		start, limit, delta := in[0].Float32s()[0], in[1].Float32s()[0], in[2].Float32s()[0]
		count = math.Ceil(float64(limit-start) / float64(delta))
		values := make([]float32, 0)
		if err := rangeCount(n, count, 4); err != nil {
			return nil, err
		}
		for v, i := start, 0; float64(i) < count; v, i = v+delta, i+1 {
			values = append(values, v)
		}
		return []*Tensor{float32Tensor([]int{len(values)}, values)}, nil
	case "<f8":
		start, limit, delta := in[0].Float64s()[0], in[1].Float64s()[0], in[2].Float64s()[0]
		count = math.Ceil((limit - start) / delta)
		if err := rangeCount(n, count, 8); err != nil {
			return nil, err
		}
		values := make([]float64, 0)
		for v, i := start, 0; float64(i) < count; v, i = v+delta, i+1 {
			values = append(values, v)
		}
		return []*Tensor{float64Tensor([]int{len(values)}, values)}, nil
	case "<i2", "<i4", "<i8":
		start, limit, delta := intAt(dtype, in[0].Data, 0), intAt(dtype, in[1].Data, 0), intAt(dtype, in[2].Data, 0)
		if delta == 0 {
			return nil, badInput("Range %s: a zero delta", quoteForMessage(n.Name))
		}
		span := new(big.Int).Sub(big.NewInt(limit), big.NewInt(start))
		d := big.NewInt(delta)
		q, m := new(big.Int).QuoRem(span, d, new(big.Int)) // truncated; ceil adds one where it rounded down
		if m.Sign() != 0 && (m.Sign() > 0) == (d.Sign() > 0) {
			q.Add(q, big.NewInt(1))
		}
		if q.Sign() < 0 {
			q.SetInt64(0)
		}
		if !q.IsInt64() {
			return nil, badInput("Range %s: too many elements", quoteForMessage(n.Name))
		}
		if err := rangeCount(n, float64(q.Int64()), itemSizes[dtype]); err != nil {
			return nil, err
		}
		total := int(q.Int64())
		data := make([]byte, total*itemSizes[dtype])
		for i := 0; i < total; i++ {
			putInt(dtype, data, i, start+int64(i)*delta)
		}
		return []*Tensor{{DType: dtype, Shape: []int{total}, Data: data}}, nil
	}
	return nil, badInput("Range on %s is not supported by sealverify replay yet", dtype)
}

// rangeCount refuses a count that is not a number, or an output larger than the budget.
func rangeCount(n *Node, count float64, size int) error {
	if count != count || count > float64(defaultMemoryBudget/int64(size)) {
		return badInput("Range %s: %v elements", quoteForMessage(n.Name), count)
	}
	return nil
}
