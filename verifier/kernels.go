package main

// replay's kernels, each written from docs/numerics.md (portable numerics, version 1) and ONNX's
// operator definitions. Stage (a) of issue 30: the operators of the ACAS Xu networks and the
// other fully connected ones; stage (b), convolutional networks'
// (cnnkernels.go); stage (c), transformers' (transformerkernels.go). Any other
// operator is refused by name.

import (
	"sort"
	"strings"
)

// kernel computes a node's outputs from its inputs (nil for an omitted optional input).
type kernel func(n *Node, in []*Tensor) ([]*Tensor, error)

// kernels: the operators replay runs (domain "" only).
var kernels = map[string]kernel{
	"Add":     arithmetic('+'),
	"Sub":     arithmetic('-'),
	"Mul":     arithmetic('*'),
	"Div":     arithmetic('/'),
	"Relu":    relu,
	"MatMul":  matMul,
	"Gemm":    gemm,
	"Flatten": flatten,
	"Reshape": reshape,

	"Concat":             concat,
	"Transpose":          transpose,
	"Clip":               clip,
	"MaxPool":            maxPool,
	"Conv":               conv,
	"AveragePool":        averagePool,
	"GlobalAveragePool":  globalAveragePool,
	"BatchNormalization": batchNormalization,
	"HardSigmoid":        hardSigmoid,
	"HardSwish":          hardSwish,
	"Sigmoid":            unary(sigmoid32),
	"Softmax":            softmax,
	"Identity":           identity,
	"Shape":              shapeOf,
	"Slice":              slice,

	"Split":           split,
	"Gather":          gather,
	"Unsqueeze":       unsqueeze,
	"Squeeze":         squeeze,
	"Expand":          expand,
	"Where":           where,
	"Equal":           equal,
	"Constant":        constant,
	"ConstantOfShape": constantOfShape,
	"Range":           rangeOf,
	"Cast":            cast,
	"Resize":          resize,
	"ConvTranspose":   convTranspose,

	"LayerNormalization": layerNormalization,
	"Erf":                unary(erf32),
	"Gelu":               gelu,
	"Tanh":               unary(tanh32),
	"Sqrt":               unary(sqrt32),
	"Neg":                unary(neg32),
	"Pow":                pow,
	"ReduceMean":         reduction(meanRN32),
	"ReduceSum":          reduction(sumRN32),
	"ReduceMax":          reduction(max32),
	"ReduceMin":          reduction(min32),

	"Exp":            unary(exp32),
	"Reciprocal":     unary(reciprocal32),
	"Max":            variadicMax,
	"GlobalMaxPool":  globalMaxPool,
	"IsNaN":          isNaN,
	"GreaterOrEqual": greaterOrEqual,
	"And":            and,
	"GatherND":       gatherND,
	"Pad":            pad,
	"LSTM":           lstm,
}

// SupportedOps lists the operators replay runs, for its refusals.
func SupportedOps() string {
	names := make([]string, 0, len(kernels))
	for name := range kernels {
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// unsupportedDtype refuses a tensor type a kernel has no portable definition for yet.
func unsupportedDtype(n *Node, t *Tensor) error {
	return badInput("%s on %s is not supported by sealverify replay yet (float32 only)", n.OpType, t.DType)
}

// requireFloat32 checks the first inputs of a node are float32 tensors.
func requireFloat32(n *Node, in []*Tensor, count int) error {
	if len(in) < count {
		return badInput("%s %s: expected %d inputs, got %d", n.OpType, quoteForMessage(n.Name), count, len(in))
	}
	for _, t := range in[:count] {
		if t == nil {
			return badInput("%s %s: a required input is missing", n.OpType, quoteForMessage(n.Name))
		}
		if t.DType != "<f4" {
			return unsupportedDtype(n, t)
		}
	}
	return nil
}

// broadcastShape is NumPy's (ONNX's multidirectional) broadcast of two shapes.
func broadcastShape(a, b []int) ([]int, error) {
	rank := len(a)
	if len(b) > rank {
		rank = len(b)
	}
	out := make([]int, rank)
	for i := range out {
		da, db := 1, 1
		if j := i - (rank - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (rank - len(b)); j >= 0 {
			db = b[j]
		}
		switch {
		case da == db || db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			return nil, badInput("shapes %v and %v do not broadcast", a, b)
		}
	}
	return out, nil
}

// broadcastIndex maps each flat index of shape out to the flat index of an operand of shape
// in, broadcast to out.
func broadcastIndex(in, out []int) []int {
	strides := make([]int, len(out))
	stride := 1
	for i := len(in) - 1; i >= 0; i-- {
		j := i + len(out) - len(in)
		if in[i] != 1 {
			strides[j] = stride
		}
		stride *= in[i]
	}
	index := make([]int, elementCount(out))
	counter := make([]int, len(out))
	at := 0
	for flat := range index {
		index[flat] = at
		for d := len(out) - 1; d >= 0; d-- {
			counter[d]++
			at += strides[d]
			if counter[d] < out[d] {
				break
			}
			at -= strides[d] * counter[d]
			counter[d] = 0
		}
	}
	return index
}

// elementwise is a binary operator that is one exact IEEE operation in float32 (numerics.md,
// section 2), with broadcasting. Go rounds each float32 operation to float32.
func elementwise(op func(a, b float32) float32) kernel {
	return func(n *Node, in []*Tensor) ([]*Tensor, error) {
		if err := requireFloat32(n, in, 2); err != nil {
			return nil, err
		}
		shape, err := broadcastShape(in[0].Shape, in[1].Shape)
		if err != nil {
			return nil, badInput("%s %s: %v", n.OpType, quoteForMessage(n.Name), err)
		}
		a, b := in[0].Float32s(), in[1].Float32s()
		ia, ib := broadcastIndex(in[0].Shape, shape), broadcastIndex(in[1].Shape, shape)
		out := make([]float32, len(ia))
		for i := range out {
			out[i] = op(a[ia[i]], b[ib[i]])
		}
		return []*Tensor{float32Tensor(shape, out)}, nil
	}
}

// relu is max(x, 0); a zero result is +0 and NaN stays NaN.
func relu(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireFloat32(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0].Float32s()
	for i, v := range x {
		if !(v > 0) && v == v {
			x[i] = 0
		}
	}
	return []*Tensor{float32Tensor(in[0].Shape, x)}, nil
}

// matMul is NumPy's matmul (1-D operands promoted, batch dimensions broadcast), each element
// RN(sum_k a[i,k] b[k,j]).
func matMul(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireFloat32(n, in, 2); err != nil {
		return nil, err
	}
	as, bs := in[0].Shape, in[1].Shape
	if len(as) == 0 || len(bs) == 0 {
		return nil, badInput("MatMul %s: a scalar operand", quoteForMessage(n.Name))
	}
	if len(as) == 1 {
		as = []int{1, as[0]}
	}
	if len(bs) == 1 {
		bs = []int{bs[0], 1}
	}
	rows, inner, cols := as[len(as)-2], as[len(as)-1], bs[len(bs)-1]
	if bs[len(bs)-2] != inner {
		return nil, badInput("MatMul %s: shapes %v and %v do not multiply", quoteForMessage(n.Name), in[0].Shape, in[1].Shape)
	}
	batch, err := broadcastShape(as[:len(as)-2], bs[:len(bs)-2])
	if err != nil {
		return nil, badInput("MatMul %s: %v", quoteForMessage(n.Name), err)
	}
	ia, ib := broadcastIndex(as[:len(as)-2], batch), broadcastIndex(bs[:len(bs)-2], batch)
	a, b := in[0].Float32s(), in[1].Float32s()
	out := make([]float32, 0, len(ia)*rows*cols)
	column := make([]float32, inner)
	for m := range ia {
		am, bm := a[ia[m]*rows*inner:], b[ib[m]*inner*cols:]
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				for k := range column {
					column[k] = bm[k*cols+j]
				}
				out = append(out, dotRN32(am[i*inner:(i+1)*inner], column, 1, 0))
			}
		}
	}
	shape := append(append([]int{}, batch...), as[len(as)-2], cols)
	if len(in[0].Shape) == 1 {
		shape = append(shape[:len(shape)-2], cols)
	}
	if len(in[1].Shape) == 1 {
		shape = shape[:len(shape)-1]
	}
	return []*Tensor{float32Tensor(shape, out)}, nil
}

// gemm is RN(alpha * sum_k A[i,k] B[k,j] + beta * C[i,j]), A and B transposed as asked, C
// broadcast to the result (numerics.md, section 3.1).
func gemm(n *Node, in []*Tensor) ([]*Tensor, error) {
	if err := requireFloat32(n, in, 2); err != nil {
		return nil, err
	}
	alpha, beta := attrFloat(n, "alpha", 1), attrFloat(n, "beta", 1)
	transA, transB := attrInt(n, "transA", 0) != 0, attrInt(n, "transB", 0) != 0
	if len(in[0].Shape) != 2 || len(in[1].Shape) != 2 {
		return nil, badInput("Gemm %s: A and B must be 2-D", quoteForMessage(n.Name))
	}
	rows, inner := in[0].Shape[0], in[0].Shape[1]
	if transA {
		rows, inner = inner, rows
	}
	innerB, cols := in[1].Shape[0], in[1].Shape[1]
	if transB {
		innerB, cols = cols, innerB
	}
	if innerB != inner {
		return nil, badInput("Gemm %s: shapes %v and %v do not multiply", quoteForMessage(n.Name), in[0].Shape, in[1].Shape)
	}
	addend := make([]float64, rows*cols)
	if len(in) > 2 && in[2] != nil {
		if in[2].DType != "<f4" {
			return nil, unsupportedDtype(n, in[2])
		}
		shape, err := broadcastShape(in[2].Shape, []int{rows, cols})
		if err != nil || len(shape) != 2 || shape[0] != rows || shape[1] != cols {
			return nil, badInput("Gemm %s: C of shape %v does not broadcast to [%d %d]", quoteForMessage(n.Name), in[2].Shape, rows, cols)
		}
		c := in[2].Float32s()
		for i, at := range broadcastIndex(in[2].Shape, shape) {
			addend[i] = float64(beta) * float64(c[at]) // exact: two float32 values
		}
	}
	a, b := in[0].Float32s(), in[1].Float32s()
	row, column := make([]float32, inner), make([]float32, inner)
	out := make([]float32, rows*cols)
	for i := 0; i < rows; i++ {
		for k := range row {
			if transA {
				row[k] = a[k*rows+i]
			} else {
				row[k] = a[i*inner+k]
			}
		}
		for j := 0; j < cols; j++ {
			for k := range column {
				if transB {
					column[k] = b[j*inner+k]
				} else {
					column[k] = b[k*cols+j]
				}
			}
			out[i*cols+j] = dotRN32(row, column, alpha, addend[i*cols+j])
		}
	}
	return []*Tensor{float32Tensor([]int{rows, cols}, out)}, nil
}

// flatten copies its input as the 2-D [prod(shape[:axis]), prod(shape[axis:])].
func flatten(n *Node, in []*Tensor) ([]*Tensor, error) {
	if len(in) < 1 || in[0] == nil {
		return nil, badInput("Flatten %s: no input", quoteForMessage(n.Name))
	}
	rank := len(in[0].Shape)
	axis := int(attrInt(n, "axis", 1))
	if axis < 0 {
		axis += rank
	}
	if axis < 0 || axis > rank {
		return nil, badInput("Flatten %s: axis %d out of range for rank %d", quoteForMessage(n.Name), axis, rank)
	}
	shape := []int{elementCount(in[0].Shape[:axis]), elementCount(in[0].Shape[axis:])}
	return []*Tensor{{DType: in[0].DType, Shape: shape, Data: in[0].Data}}, nil
}

// reshape copies its input into the shape its second input gives (0 copies the input's
// dimension unless allowzero, -1 is inferred).
func reshape(n *Node, in []*Tensor) ([]*Tensor, error) {
	if len(in) < 2 || in[0] == nil || in[1] == nil || in[1].DType != "<i8" || len(in[1].Shape) != 1 {
		return nil, badInput("Reshape %s: expects data and a 1-D int64 shape", quoteForMessage(n.Name))
	}
	allowZero := attrInt(n, "allowzero", 0) != 0
	requested := in[1].Int64s()
	shape := make([]int, len(requested))
	known, inferred := 1, -1
	for i, d := range requested {
		switch {
		case d == -1 && inferred < 0:
			inferred = i
			continue
		case d == 0 && !allowZero:
			if i >= len(in[0].Shape) {
				return nil, badInput("Reshape %s: 0 at %d copies no input dimension", quoteForMessage(n.Name), i)
			}
			shape[i] = in[0].Shape[i]
		case d >= 0:
			shape[i] = int(d)
		default:
			return nil, badInput("Reshape %s: invalid shape %v", quoteForMessage(n.Name), requested)
		}
		known *= shape[i]
	}
	count := elementCount(in[0].Shape)
	if inferred >= 0 {
		if known == 0 || count%known != 0 {
			return nil, badInput("Reshape %s: cannot infer -1 in %v for %d elements", quoteForMessage(n.Name), requested, count)
		}
		shape[inferred] = count / known
	}
	if elementCount(shape) != count {
		return nil, badInput("Reshape %s: shape %v does not hold %d elements", quoteForMessage(n.Name), requested, count)
	}
	return []*Tensor{{DType: in[0].DType, Shape: shape, Data: in[0].Data}}, nil
}

func attrInt(n *Node, name string, fallback int64) int64 {
	if a, ok := n.Attributes[name]; ok {
		return a.I
	}
	return fallback
}

func attrFloat(n *Node, name string, fallback float32) float32 {
	if a, ok := n.Attributes[name]; ok {
		return a.F
	}
	return fallback
}

// runNode runs one node with its kernel, or refuses an operator replay does not implement.
func runNode(n *Node, in []*Tensor) ([]*Tensor, error) {
	k, ok := kernels[n.OpType]
	if n.Domain != "" && n.Domain != "ai.onnx" || !ok {
		name := n.OpType
		if n.Domain != "" {
			name = n.Domain + "." + n.OpType
		}
		return nil, badInput("operator %s (node %s) is not supported by sealverify replay yet (it runs %s)", name, quoteForMessage(n.Name), SupportedOps())
	}
	out, err := k(n, in)
	if err != nil {
		return nil, err
	}
	if len(out) < len(n.Outputs) {
		return nil, badInput("%s %s: %d outputs asked, %d computed", n.OpType, quoteForMessage(n.Name), len(n.Outputs), len(out))
	}
	return out, nil
}
