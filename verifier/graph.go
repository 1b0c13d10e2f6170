package main

// The graph replay runs: onnx.proto's ModelProto read from the wire (its main graph's nodes,
// attributes, inputs, outputs and initializers), with the weights a container keeps in its
// tensor table (docs/container-format.md, "graph section" and "tensor table").

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
)

// onnx.proto field numbers replay reads besides those of onnxwire.go.
const (
	modelOpsetImport = 8
	opsetDomain      = 1
	opsetVersion     = 2

	graphInput  = 11
	graphOutput = 12

	nodeInput  = 1
	nodeOutput = 2
	nodeName   = 3
	nodeOpType = 4
	nodeDomain = 7

	attrName   = 1
	attrF      = 2
	attrI      = 3
	attrS      = 4
	attrFloats = 7
	attrInts   = 8
	attrStrs   = 9

	valueInfoName = 1

	tensorFloatData = 4
	tensorInt64Data = 7
	tensorRawData   = 9
)

// Attribute is one node attribute, as far as replay's kernels read attributes.
type Attribute struct {
	F       float32
	I       int64
	S       string
	Floats  []float32
	Ints    []int64
	Strings []string
	Subject bool // a graph or tensor attribute
	// Tensor is a tensor attribute's value (Constant's and ConstantOfShape's value), read with the
	// container's tensor table; TensorErr says why it could not be read (refused where it is used).
	Tensor    *Tensor
	TensorErr error
	tensor    []byte
}

// Node is one graph node.
type Node struct {
	Name, OpType, Domain string
	Inputs, Outputs      []string
	Attributes           map[string]*Attribute
	Opset                int64 // the model's opset version of the node's domain
}

// Graph is a model's main graph: nodes in their order, inputs that are not initializers,
// outputs, and the initializers' values.
type Graph struct {
	Nodes        []*Node
	Inputs       []string
	Outputs      []string
	Initializers map[string]*Tensor
	Opsets       map[string]int64
}

// ReadGraph reads a serialized ModelProto; weights stored in a container's table come from
// table (by table name), every other initializer from the graph itself.
func ReadGraph(model []byte, table map[string][]byte) (*Graph, error) {
	if err := ValidateModel(model); err != nil {
		return nil, badInput("the model is not a readable ONNX model (%v)", err)
	}
	fields, _ := parseMessage(model)
	g := &Graph{Initializers: map[string]*Tensor{}, Opsets: map[string]int64{}}
	var graph []byte
	for _, f := range fields {
		switch {
		case f.Number == modelGraph && f.Type == wireBytes:
			graph = f.Bytes
		case f.Number == modelOpsetImport && f.Type == wireBytes:
			domain, version := "", int64(0)
			inner, _ := parseMessage(f.Bytes)
			for _, o := range inner {
				if o.Number == opsetDomain && o.Type == wireBytes {
					domain = string(o.Bytes)
				} else if o.Number == opsetVersion && o.Type == wireVarint {
					version = int64(o.Varint)
				}
			}
			g.Opsets[domain] = version
		}
	}
	gfields, _ := parseMessage(graph)
	var declaredInputs []string
	for _, f := range gfields {
		if f.Type != wireBytes {
			continue
		}
		switch f.Number {
		case graphNode:
			n, err := readNode(f.Bytes)
			if err != nil {
				return nil, err
			}
			g.Nodes = append(g.Nodes, n)
		case graphInitializer:
			name, t, err := readInitializer(f.Bytes, table)
			if err != nil {
				return nil, err
			}
			g.Initializers[name] = t
		case graphSparseInitializer:
			return nil, badInput("the model has a sparse initializer, which replay does not read yet")
		case graphInput, graphOutput:
			name := valueInfoNameOf(f.Bytes)
			if f.Number == graphInput {
				declaredInputs = append(declaredInputs, name)
			} else {
				g.Outputs = append(g.Outputs, name)
			}
		}
	}
	for i, n := range g.Nodes {
		if n.Name == "" {
			n.Name = fmt.Sprintf("%s_%d", n.OpType, i) // as a log names an unnamed node (docs/audit-log.md)
		}
		for _, a := range n.Attributes {
			if a.tensor != nil {
				_, a.Tensor, a.TensorErr = readInitializer(a.tensor, table)
			}
		}
		n.Opset = g.Opsets[n.Domain]
		if n.Domain == "ai.onnx" {
			n.Opset = g.Opsets[""]
		}
	}
	// A graph input that an initializer also names is a weight (IR versions before 4 list them).
	for _, name := range declaredInputs {
		if _, weight := g.Initializers[name]; !weight {
			g.Inputs = append(g.Inputs, name)
		}
	}
	return g, nil
}

func valueInfoNameOf(b []byte) string {
	fields, _ := parseMessage(b)
	for _, f := range fields {
		if f.Number == valueInfoName && f.Type == wireBytes {
			return string(f.Bytes)
		}
	}
	return ""
}

func readNode(b []byte) (*Node, error) {
	fields, _ := parseMessage(b)
	n := &Node{Attributes: map[string]*Attribute{}}
	for _, f := range fields {
		if f.Type != wireBytes {
			continue
		}
		switch f.Number {
		case nodeInput:
			n.Inputs = append(n.Inputs, string(f.Bytes))
		case nodeOutput:
			n.Outputs = append(n.Outputs, string(f.Bytes))
		case nodeName:
			n.Name = string(f.Bytes)
		case nodeOpType:
			n.OpType = string(f.Bytes)
		case nodeDomain:
			n.Domain = string(f.Bytes)
		case nodeAttribute:
			name, a, err := readAttribute(f.Bytes)
			if err != nil {
				return nil, err
			}
			n.Attributes[name] = a
		}
	}
	return n, nil
}

func readAttribute(b []byte) (string, *Attribute, error) {
	fields, _ := parseMessage(b)
	a := &Attribute{}
	name := ""
	for _, f := range fields {
		switch {
		case f.Number == attrName && f.Type == wireBytes:
			name = string(f.Bytes)
		case f.Number == attrF && f.Type == wireFixed32:
			a.F = math.Float32frombits(binary.LittleEndian.Uint32(b[f.End-4 : f.End]))
		case f.Number == attrI && f.Type == wireVarint:
			a.I = int64(f.Varint)
		case f.Number == attrS && f.Type == wireBytes:
			a.S = string(f.Bytes)
		case f.Number == attrStrs && f.Type == wireBytes:
			a.Strings = append(a.Strings, string(f.Bytes))
		case f.Number == attrInts && f.Type == wireVarint:
			a.Ints = append(a.Ints, int64(f.Varint))
		case f.Number == attrInts && f.Type == wireBytes:
			values, err := packedVarints(f.Bytes)
			if err != nil {
				return "", nil, badInput("attribute %s: %v", quoteForMessage(name), err)
			}
			a.Ints = append(a.Ints, values...)
		case f.Number == attrFloats && f.Type == wireFixed32:
			a.Floats = append(a.Floats, math.Float32frombits(binary.LittleEndian.Uint32(b[f.End-4:f.End])))
		case f.Number == attrFloats && f.Type == wireBytes && len(f.Bytes)%4 == 0:
			for i := 0; i < len(f.Bytes); i += 4 {
				a.Floats = append(a.Floats, math.Float32frombits(binary.LittleEndian.Uint32(f.Bytes[i:])))
			}
		case f.Number == attrT && f.Type == wireBytes:
			a.Subject, a.tensor = true, f.Bytes
		case f.Number == attrG, f.Number == attrTensors, f.Number == attrGraphs,
			f.Number == attrSparseTensor, f.Number == attrSparseTensors:
			a.Subject = true
		}
	}
	return name, a, nil
}

func packedVarints(b []byte) ([]int64, error) {
	var out []int64
	for pos := 0; pos < len(b); {
		v, next, err := readVarint(b, pos)
		if err != nil {
			return nil, err
		}
		out = append(out, int64(v))
		pos = next
	}
	return out, nil
}

// readInitializer: a TensorProto's name and value; a reference to the container's table takes
// the table's bytes; otherwise raw_data, float_data or int64_data.
func readInitializer(b []byte, table map[string][]byte) (string, *Tensor, error) {
	ref, err := parseTensor(b)
	if err != nil {
		return "", nil, badInput("initializer: %v", err)
	}
	dtype, known := numpyDtypes[ref.DataType]
	if !known {
		return "", nil, badInput("initializer %s: ONNX data type %d is not one replay reads yet", quoteForMessage(ref.Name), ref.DataType)
	}
	t := &Tensor{DType: dtype}
	for _, d := range ref.Dims {
		if d < 0 {
			return "", nil, badInput("initializer %s: a negative dimension", quoteForMessage(ref.Name))
		}
		t.Shape = append(t.Shape, int(d))
	}
	want := elementCount(t.Shape) * itemSizes[dtype]
	var values bytes.Buffer
	inTable := false // an empty tensor's region in the table is empty too
	for _, kv := range ref.External {
		if kv[0] == "sealtrace.tensor" {
			data, ok := table[kv[1]]
			if !ok {
				return "", nil, badInput("initializer %s refers to tensor %s, not in the container", quoteForMessage(ref.Name), quoteForMessage(kv[1]))
			}
			values.Write(data)
			inTable = true
		}
	}
	if len(ref.External) > 0 && !inTable {
		return "", nil, badInput("initializer %s: its data is in an external file, which replay does not read (seal the model)", quoteForMessage(ref.Name))
	}
	fields, _ := parseMessage(b)
	for _, f := range fields {
		switch {
		case f.Number == tensorRawData && f.Type == wireBytes:
			values.Write(f.Bytes)
		case f.Number == tensorFloatData && f.Type == wireBytes && dtype == "<f4":
			values.Write(f.Bytes) // packed fixed32: already little-endian float32
		case f.Number == tensorFloatData && f.Type == wireFixed32 && dtype == "<f4":
			values.Write(b[f.End-4 : f.End])
		case f.Number == tensorInt64Data && dtype == "<i8":
			ints := []int64{int64(f.Varint)}
			if f.Type == wireBytes {
				if ints, err = packedVarints(f.Bytes); err != nil {
					return "", nil, badInput("initializer %s: %v", quoteForMessage(ref.Name), err)
				}
			}
			for _, v := range ints {
				var word [8]byte
				binary.LittleEndian.PutUint64(word[:], uint64(v))
				values.Write(word[:])
			}
		}
	}
	if values.Len() != want {
		return "", nil, badInput("initializer %s: %d bytes of data for %d element(s) of %s (a storage replay does not read yet)", quoteForMessage(ref.Name), values.Len(), elementCount(t.Shape), dtype)
	}
	t.Data = values.Bytes()
	return ref.Name, t, nil
}

// ReadModelFile reads the model a replay runs: a container's graph section with its tensor
// table (each region's bytes checked against the header's chunk digests as they are read, so
// that what runs is what was verified), or an ONNX file whose weights it holds itself.
func ReadModelFile(path string, budget int64) (*Graph, error) {
	f, size, err := openRegular(path, "model")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, preambleSize)
	n, _ := io.ReadFull(f, head)
	if !ClaimsContainer(path, head[:n]) {
		model, err := readRegular(path, "model", budget)
		if err != nil {
			return nil, err
		}
		return ReadGraph(model, nil)
	}
	if n < preambleSize {
		return nil, badInput("%s: not a well-formed container (truncated)", path)
	}
	headerLen := int64(binary.LittleEndian.Uint32(head[12:16]))
	if headerLen < 2 || headerLen > maxHeaderSize || preambleSize+headerLen > size {
		return nil, badInput("%s: not a well-formed container (header length)", path)
	}
	headerBytes := make([]byte, headerLen)
	if _, err := f.ReadAt(headerBytes, preambleSize); err != nil {
		return nil, badInput("%s: truncated while being read", path)
	}
	doc, err := readCanonicalHeader(headerBytes)
	if err != nil {
		return nil, badInput("%s: not a well-formed container: %v", path, err)
	}
	hdr, err := parseContainerHeader(doc, binary.LittleEndian.Uint32(head[8:12]))
	if err != nil {
		return nil, badInput("%s: not a well-formed container: %v", path, err)
	}
	dataStart := alignUp(preambleSize + headerLen)
	var total int64
	table := map[string][]byte{}
	var graph []byte
	for _, r := range hdr.regions {
		total += r.length
		if total > budget || dataStart+r.offset+r.length > size {
			return nil, badInput("%s: the model is larger than the memory budget or the file", path)
		}
		data := make([]byte, r.length)
		if _, err := f.ReadAt(data, dataStart+r.offset); err != nil {
			return nil, badInput("%s: truncated while being read", path)
		}
		for i, want := range r.chunks {
			end := int64(i+1) * hdr.chunkSize
			if end > r.length {
				end = r.length
			}
			sum := sha256.Sum256(data[int64(i)*hdr.chunkSize : end])
			if hex.EncodeToString(sum[:]) != want {
				return nil, badInput("%s: %s %s changed since it was verified", path, r.kind, quoteForMessage(r.name))
			}
		}
		if r.kind == "section" {
			graph = data
		} else {
			table[r.name] = data
		}
	}
	return ReadGraph(graph, table)
}
