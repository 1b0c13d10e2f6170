package main

// Just enough of the protobuf wire format and of onnx.proto's field numbers to find the
// TensorProtos of a model (container graph references, external data) and its top-level
// metadata_props. Nothing is decoded that the checks do not use.

import (
	"errors"
	"fmt"
)

// Wire types.
const (
	wireVarint     = 0
	wireFixed64    = 1
	wireBytes      = 2
	wireStartGroup = 3
	wireEndGroup   = 4
	wireFixed32    = 5
)

// maxMessageDepth bounds nesting (protobuf's own default recursion limit is 100).
const maxMessageDepth = 100

var errWire = errors.New("not a well-formed protobuf message")

// wireField is one field record of a message.
type wireField struct {
	Number uint64
	Type   int
	Varint uint64
	Bytes  []byte // wireBytes: the payload
	Start  int    // the record's first byte (its tag) in the message
	End    int    // one past its last byte
}

func readVarint(b []byte, pos int) (uint64, int, error) {
	var v uint64
	for i := 0; i < 10; i++ {
		if pos+i >= len(b) {
			return 0, 0, errWire
		}
		c := b[pos+i]
		// A tenth byte's bits past 64 are dropped, as protobuf readers do.
		v |= uint64(c&0x7F) << (7 * uint(i))
		if c < 0x80 {
			return v, pos + i + 1, nil
		}
	}
	return 0, 0, errWire
}

// parseMessage splits a message into its field records. Groups (wire types 3/4) are skipped
// whole, as a protobuf reader keeps them as unknown fields.
func parseMessage(b []byte) ([]wireField, error) {
	var fields []wireField
	pos := 0
	for pos < len(b) {
		start := pos
		f, next, err := readField(b, pos, 0)
		if err != nil {
			return nil, err
		}
		if f.Type == wireEndGroup {
			return nil, errWire
		}
		f.Start, f.End = start, next
		fields = append(fields, f)
		pos = next
	}
	return fields, nil
}

func readField(b []byte, pos int, depth int) (wireField, int, error) {
	start := pos
	tag, pos, err := readVarint(b, pos)
	if err != nil || pos-start > 5 || tag > 1<<32-1 {
		return wireField{}, 0, errWire
	}
	f := wireField{Number: tag >> 3, Type: int(tag & 7)}
	if f.Number == 0 || f.Number > 1<<29-1 {
		return wireField{}, 0, errWire
	}
	switch f.Type {
	case wireVarint:
		f.Varint, pos, err = readVarint(b, pos)
		if err != nil {
			return wireField{}, 0, err
		}
	case wireFixed64:
		if pos+8 > len(b) {
			return wireField{}, 0, errWire
		}
		pos += 8
	case wireFixed32:
		if pos+4 > len(b) {
			return wireField{}, 0, errWire
		}
		pos += 4
	case wireBytes:
		n, next, err := readVarint(b, pos)
		if err != nil {
			return wireField{}, 0, err
		}
		if n > uint64(len(b)-next) {
			return wireField{}, 0, errWire
		}
		f.Bytes = b[next : next+int(n)]
		pos = next + int(n)
	case wireStartGroup:
		if depth >= maxMessageDepth {
			return wireField{}, 0, errWire
		}
		for {
			inner, next, err := readField(b, pos, depth+1)
			if err != nil {
				return wireField{}, 0, err
			}
			pos = next
			if inner.Type == wireEndGroup {
				if inner.Number != f.Number {
					return wireField{}, 0, errWire
				}
				break
			}
		}
	case wireEndGroup:
	default:
		return wireField{}, 0, errWire
	}
	return f, pos, nil
}

// onnx.proto field numbers of the messages that can hold a TensorProto.
const (
	modelGraph        = 7
	modelMetadata     = 14
	modelTrainingInfo = 20
	modelFunctions    = 25

	graphNode              = 1
	graphInitializer       = 5
	graphSparseInitializer = 15

	nodeAttribute = 5

	attrT             = 5
	attrG             = 6
	attrTensors       = 10
	attrGraphs        = 11
	attrSparseTensor  = 22
	attrSparseTensors = 23

	sparseValues  = 1
	sparseIndices = 2

	functionNode           = 7
	functionAttributeProto = 11

	trainingInitialization = 1
	trainingAlgorithm      = 2

	tensorDims         = 1
	tensorDataType     = 2
	tensorName         = 8
	tensorExternalData = 13
	tensorDataLocation = 14

	entryKey   = 1
	entryValue = 2
)

// TensorRef is one TensorProto of a model, with what the checks read of it.
type TensorRef struct {
	Name         string
	DataType     int64
	Dims         []int64
	External     [][2]string // external_data entries, in order
	DataLocation int64
}

// message kinds walked for TensorProtos
type messageKind int

const (
	kindModel messageKind = iota
	kindGraph
	kindNode
	kindAttribute
	kindSparse
	kindFunction
	kindTraining
)

// childKinds: which fields of which message hold which message (or a TensorProto: -1).
var childKinds = map[messageKind]map[uint64]messageKind{
	kindModel:     {modelGraph: kindGraph, modelTrainingInfo: kindTraining, modelFunctions: kindFunction},
	kindGraph:     {graphNode: kindNode, graphInitializer: -1, graphSparseInitializer: kindSparse},
	kindNode:      {nodeAttribute: kindAttribute},
	kindAttribute: {attrT: -1, attrG: kindGraph, attrTensors: -1, attrGraphs: kindGraph, attrSparseTensor: kindSparse, attrSparseTensors: kindSparse},
	kindSparse:    {sparseValues: -1, sparseIndices: -1},
	kindFunction:  {functionNode: kindNode, functionAttributeProto: kindAttribute},
	kindTraining:  {trainingInitialization: kindGraph, trainingAlgorithm: kindGraph},
}

// ModelTensors returns every TensorProto of a serialized ModelProto: initializers (of every
// graph and subgraph), tensor-valued attributes, sparse tensors' values and indices, in
// functions and training graphs too.
func ModelTensors(model []byte) ([]TensorRef, error) {
	if err := ValidateModel(model); err != nil {
		return nil, err
	}
	var out []TensorRef
	err := walkTensors(model, kindModel, 0, &out)
	return out, err
}

func walkTensors(msg []byte, kind messageKind, depth int, out *[]TensorRef) error {
	if depth > maxMessageDepth {
		return fmt.Errorf("messages nested more than %d deep", maxMessageDepth)
	}
	fields, err := parseMessage(msg)
	if err != nil {
		return err
	}
	children := childKinds[kind]
	for _, f := range fields {
		child, ok := children[f.Number]
		if !ok || f.Type != wireBytes {
			continue
		}
		if child == -1 {
			t, err := parseTensor(f.Bytes)
			if err != nil {
				return err
			}
			*out = append(*out, t)
			continue
		}
		if err := walkTensors(f.Bytes, child, depth+1, out); err != nil {
			return err
		}
	}
	return nil
}

func parseTensor(b []byte) (TensorRef, error) {
	var t TensorRef
	fields, err := parseMessage(b)
	if err != nil {
		return t, err
	}
	for _, f := range fields {
		switch {
		case f.Number == tensorDims && f.Type == wireVarint:
			t.Dims = append(t.Dims, int64(f.Varint))
		case f.Number == tensorDims && f.Type == wireBytes: // packed
			for pos := 0; pos < len(f.Bytes); {
				v, next, err := readVarint(f.Bytes, pos)
				if err != nil {
					return t, err
				}
				t.Dims = append(t.Dims, int64(v))
				pos = next
			}
		case f.Number == tensorDataType && f.Type == wireVarint:
			t.DataType = int64(int32(f.Varint))
		case f.Number == tensorName && f.Type == wireBytes:
			t.Name = string(f.Bytes)
		case f.Number == tensorDataLocation && f.Type == wireVarint:
			t.DataLocation = int64(int32(f.Varint))
		case f.Number == tensorExternalData && f.Type == wireBytes:
			key, value, err := parseEntry(f.Bytes)
			if err != nil {
				return t, err
			}
			t.External = append(t.External, [2]string{key, value})
		}
	}
	return t, nil
}

// parseEntry reads a StringStringEntryProto.
func parseEntry(b []byte) (string, string, error) {
	fields, err := parseMessage(b)
	if err != nil {
		return "", "", err
	}
	var key, value string
	for _, f := range fields {
		if f.Type != wireBytes {
			continue
		}
		switch f.Number {
		case entryKey:
			key = string(f.Bytes)
		case entryValue:
			value = string(f.Bytes)
		}
	}
	return key, value, nil
}

// onnxDtypes: ONNX TensorProto.DataType numbers and the container's dtype names, with bits per
// element.
var onnxDtypes = map[int64]string{
	1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
	10: "float16", 11: "double", 12: "uint32", 13: "uint64", 14: "complex64", 15: "complex128",
	16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz",
	21: "uint4", 22: "int4", 23: "float4e2m1", 24: "float8e8m0", 25: "uint2", 26: "int2",
}

var dtypeBits = map[string]int64{
	"float": 32, "uint8": 8, "int8": 8, "uint16": 16, "int16": 16, "int32": 32, "int64": 64, "bool": 8,
	"float16": 16, "double": 64, "uint32": 32, "uint64": 64, "complex64": 64, "complex128": 128,
	"bfloat16": 16, "float8e4m3fn": 8, "float8e4m3fnuz": 8, "float8e5m2": 8, "float8e5m2fnuz": 8,
	"uint4": 4, "int4": 4, "float4e2m1": 4, "float8e8m0": 8, "uint2": 2, "int2": 2,
}

// fieldKind: how onnx.proto declares a field number of a message: a message of a type, or a
// repeated number that may be packed (protobuf readers check a packed list's encoding).
type fieldKind struct {
	msg    string
	packed int // 0: not packable; wireVarint, wireFixed32 or wireFixed64
}

const (
	packedVarint  = wireVarint
	packedFixed32 = wireFixed32
	packedFixed64 = wireFixed64
)

// onnxMessages: onnx.proto's messages, their message-typed fields and packable repeated
// fields (generated from onnx 1.23's descriptors; scalar and string fields need no entry).
var onnxMessages = map[string]map[uint64]fieldKind{
	"AttributeProto":               {5: {msg: "TensorProto"}, 6: {msg: "GraphProto"}, 22: {msg: "SparseTensorProto"}, 14: {msg: "TypeProto"}, 7: {packed: packedFixed32}, 8: {packed: packedVarint}, 10: {msg: "TensorProto"}, 11: {msg: "GraphProto"}, 23: {msg: "SparseTensorProto"}, 15: {msg: "TypeProto"}},
	"DeviceConfigurationProto":     {},
	"FunctionProto":                {11: {msg: "AttributeProto"}, 7: {msg: "NodeProto"}, 9: {msg: "OperatorSetIdProto"}, 12: {msg: "ValueInfoProto"}, 14: {msg: "StringStringEntryProto"}},
	"GraphProto":                   {1: {msg: "NodeProto"}, 5: {msg: "TensorProto"}, 15: {msg: "SparseTensorProto"}, 11: {msg: "ValueInfoProto"}, 12: {msg: "ValueInfoProto"}, 13: {msg: "ValueInfoProto"}, 14: {msg: "TensorAnnotation"}, 16: {msg: "StringStringEntryProto"}},
	"IntIntListEntryProto":         {2: {packed: packedVarint}},
	"ModelProto":                   {8: {msg: "OperatorSetIdProto"}, 7: {msg: "GraphProto"}, 14: {msg: "StringStringEntryProto"}, 20: {msg: "TrainingInfoProto"}, 25: {msg: "FunctionProto"}, 26: {msg: "DeviceConfigurationProto"}},
	"NodeDeviceConfigurationProto": {2: {msg: "ShardingSpecProto"}},
	"NodeProto":                    {5: {msg: "AttributeProto"}, 9: {msg: "StringStringEntryProto"}, 10: {msg: "NodeDeviceConfigurationProto"}},
	"OperatorSetIdProto":           {},
	"ShardedDimProto":              {2: {msg: "SimpleShardedDimProto"}},
	"ShardingSpecProto":            {2: {packed: packedVarint}, 3: {msg: "IntIntListEntryProto"}, 4: {msg: "ShardedDimProto"}},
	"SimpleShardedDimProto":        {},
	"SparseTensorProto":            {1: {msg: "TensorProto"}, 2: {msg: "TensorProto"}, 3: {packed: packedVarint}},
	"StringStringEntryProto":       {},
	"TensorAnnotation":             {2: {msg: "StringStringEntryProto"}},
	"TensorProto":                  {1: {packed: packedVarint}, 3: {msg: "TensorProto_Segment"}, 4: {packed: packedFixed32}, 5: {packed: packedVarint}, 7: {packed: packedVarint}, 13: {msg: "StringStringEntryProto"}, 10: {packed: packedFixed64}, 11: {packed: packedVarint}, 16: {msg: "StringStringEntryProto"}},
	"TensorProto_Segment":          {},
	"TensorShapeProto":             {1: {msg: "TensorShapeProto_Dimension"}},
	"TensorShapeProto_Dimension":   {},
	"TrainingInfoProto":            {1: {msg: "GraphProto"}, 2: {msg: "GraphProto"}, 3: {msg: "StringStringEntryProto"}, 4: {msg: "StringStringEntryProto"}},
	"TypeProto":                    {1: {msg: "TypeProto_Tensor"}, 4: {msg: "TypeProto_Sequence"}, 5: {msg: "TypeProto_Map"}, 9: {msg: "TypeProto_Optional"}, 8: {msg: "TypeProto_SparseTensor"}, 7: {msg: "TypeProto_Opaque"}},
	"TypeProto_Map":                {2: {msg: "TypeProto"}},
	"TypeProto_Opaque":             {},
	"TypeProto_Optional":           {1: {msg: "TypeProto"}},
	"TypeProto_Sequence":           {1: {msg: "TypeProto"}},
	"TypeProto_SparseTensor":       {2: {msg: "TensorShapeProto"}},
	"TypeProto_Tensor":             {2: {msg: "TensorShapeProto"}},
	"ValueInfoProto":               {2: {msg: "TypeProto"}, 4: {msg: "StringStringEntryProto"}},
}

// ValidateModel says whether bytes parse as an ONNX ModelProto the way a protobuf reader with
// onnx.proto parses them: well-formed records, every message-typed field a well-formed message
// of its type, packed lists well-formed, submessages nested at most 100 deep. A field whose wire
// type is not the declared one is kept as an unknown field (not an error), as are unknown
// field numbers; strings are not checked for UTF-8 (onnx.proto is proto2).
func ValidateModel(b []byte) error {
	return validateMessage(b, "ModelProto", 0)
}

// IsOnnxModel: the bytes parse as a ModelProto (ValidateModel) that has a graph (field 7, a
// message): what docs/binding.md calls an ONNX model.
func IsOnnxModel(b []byte) bool {
	if ValidateModel(b) != nil {
		return false
	}
	fields, _ := parseMessage(b)
	for _, f := range fields {
		if f.Number == modelGraph && f.Type == wireBytes {
			return true
		}
	}
	return false
}

func validateMessage(b []byte, typ string, depth int) error {
	fields, err := parseMessage(b)
	if err != nil {
		return err
	}
	kinds := onnxMessages[typ]
	for _, f := range fields {
		k, known := kinds[f.Number]
		if !known || f.Type != wireBytes {
			continue
		}
		switch {
		case k.msg != "":
			if depth+1 > maxMessageDepth {
				return fmt.Errorf("messages nested more than %d deep", maxMessageDepth)
			}
			if err := validateMessage(f.Bytes, k.msg, depth+1); err != nil {
				return err
			}
		case k.packed == packedVarint:
			for pos := 0; pos < len(f.Bytes); {
				_, next, err := readVarint(f.Bytes, pos)
				if err != nil {
					return err
				}
				pos = next
			}
		case k.packed == packedFixed32 && len(f.Bytes)%4 != 0, k.packed == packedFixed64 && len(f.Bytes)%8 != 0:
			return errWire
		}
	}
	return nil
}
