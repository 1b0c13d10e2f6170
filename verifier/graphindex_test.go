package main

// The graph index (format version 2), from docs/container-format.md alone: digests of
// hand-built wire messages, the malformed cases, labels, the alignment of a changed graph with
// the recorded one, and how labels are shown.

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// pbAttr is an AttributeProto: name (1), i (3), type (20) = INT.
func pbAttr(name string, i uint64) []byte {
	return cat(pbField(1, []byte(name)), pbInt(3, i), pbInt(20, 2))
}

// pbNode is a NodeProto: input (1), output (2), name (3), op_type (4), attributes (5).
func pbNode(name, op string, attrs ...[]byte) []byte {
	out := cat(pbField(1, []byte("x")), pbField(2, []byte("y")), pbField(3, []byte(name)), pbField(4, []byte(op)))
	for _, a := range attrs {
		out = append(out, pbField(5, a)...)
	}
	return out
}

func pbOpset(domain string, version uint64) []byte {
	return cat(pbField(1, []byte(domain)), pbInt(2, version))
}

// pbModel is a ModelProto: ir_version, opset imports, and a graph named graphName of these
// nodes.
func pbModel(graphName string, opsets [][]byte, nodes ...[]byte) []byte {
	var graph []byte
	for _, n := range nodes {
		graph = append(graph, pbField(1, n)...)
	}
	graph = append(graph, pbField(2, []byte(graphName))...)
	out := cat(pbInt(1, 8), pbField(7, graph))
	for _, o := range opsets {
		out = append(out, pbField(8, o)...)
	}
	return out
}

func mustIndex(t *testing.T, section []byte) *graphIndex {
	t.Helper()
	idx, err := ComputeGraphIndex(section)
	if err != nil {
		t.Fatalf("no index: %v", err)
	}
	return idx
}

func TestGraphIndexOfAHandBuiltMessage(t *testing.T) {
	irVersion := pbInt(1, 8)
	producer := pbField(2, []byte("go"))
	graphAsVarint := pbInt(7, 3) // field 7 with wire type 0: not record (7), so a model field
	opset := pbField(8, pbOpset("ai.onnx.ml", 3))
	attrRecord := pbField(5, pbAttr("axis", 1))
	nodeInput := pbField(1, []byte("x"))
	nodeName := pbField(3, []byte("n0"))
	nodeOp := pbField(4, []byte("Softmax"))
	node := cat(nodeInput, nodeName, attrRecord, nodeOp)
	graphName := pbField(2, []byte("g"))
	initializer := pbField(5, []byte{})
	// Two graph records: G is the concatenation of their payloads.
	graph1 := pbField(7, cat(graphName, pbField(1, node)))
	graph2 := pbField(7, initializer)
	section := cat(irVersion, graph1, opset, producer, graphAsVarint, graph2)

	idx := mustIndex(t, section)
	want := &graphIndex{
		model:        sha(cat(irVersion, producer, graphAsVarint)),
		graph:        sha(cat(graphName, initializer)),
		opsetImports: []indexOpset{{domain: label{s: "ai.onnx.ml"}, sha256: sha(opset)}},
		nodes: []indexNode{{
			name: label{s: "n0"}, opType: label{s: "Softmax"}, sha256: sha(cat(nodeInput, nodeName, nodeOp)),
			attributes: []indexAttribute{{name: label{s: "axis"}, sha256: sha(attrRecord)}},
		}},
	}
	if !reflect.DeepEqual(idx, want) {
		t.Fatalf("index\n%+v\nwant\n%+v", idx, want)
	}
	got, _ := Canonical(idx.JSON())
	wantJSON := `{"graph":"` + want.graph + `","model":"` + want.model + `","nodes":[{"attributes":[{"name":"axis","sha256":"` +
		sha(attrRecord) + `"}],"name":"n0","op_type":"Softmax","sha256":"` + want.nodes[0].sha256 +
		`"}],"opset_imports":[{"domain":"ai.onnx.ml","sha256":"` + sha(opset) + `"}]}`
	if string(got) != wantJSON {
		t.Errorf("JSON\n%s\nwant\n%s", got, wantJSON)
	}

	empty := mustIndex(t, nil)
	nothing := sha(nil)
	if empty.model != nothing || empty.graph != nothing || len(empty.nodes) != 0 || len(empty.opsetImports) != 0 {
		t.Errorf("empty section: %+v", empty)
	}
	if text, _ := Canonical(empty.JSON()); string(text) != `{"graph":"`+nothing+`","model":"`+nothing+`","nodes":[],"opset_imports":[]}` {
		t.Errorf("empty section JSON: %s", text)
	}
}

func TestGraphIndexLabels(t *testing.T) {
	long := strings.Repeat("é", 300) // 2 bytes each
	node := cat(pbField(3, []byte("first")), pbField(3, []byte(long)), pbInt(4, 7), pbField(5, pbAttr("\xff\xfe", 1)))
	section := cat(pbField(8, pbInt(2, 17)), pbField(8, pbField(1, []byte("\xed\xa0\x80"))), pbField(7, pbField(1, node)))
	idx := mustIndex(t, section)
	n := idx.nodes[0]
	if n.name != (label{s: strings.Repeat("é", 256)}) {
		t.Errorf("the last name, cut to 256 code points: %d bytes", len(n.name.s))
	}
	if n.opType != (label{}) {
		t.Errorf("op_type only as a varint: the empty label, got %+v", n.opType)
	}
	if n.attributes[0].name != (label{null: true}) {
		t.Errorf("invalid UTF-8: null, got %+v", n.attributes[0].name)
	}
	if idx.opsetImports[0].domain != (label{}) || idx.opsetImports[1].domain != (label{null: true}) {
		t.Errorf("absent domain \"\", a surrogate's UTF-8 form null: %+v", idx.opsetImports)
	}
	text, _ := Canonical(idx.JSON())
	if !strings.Contains(string(text), `"name":null`) || !strings.Contains(string(text), `"domain":null`) {
		t.Errorf("null labels: %s", text)
	}
	exact := strings.Repeat("a", 256)
	if got := labelOf([]wireField{{Number: 3, Type: wireBytes, Bytes: []byte(exact)}}, 3); got.s != exact {
		t.Errorf("256 code points are kept whole")
	}
}

func TestMalformedSectionsHaveNoIndex(t *testing.T) {
	nest := func(depth int) []byte { // depth groups of field 9, one inside the other
		var b []byte
		for i := 0; i < depth; i++ {
			b = append(b, pbVarint(9<<3|wireStartGroup)...)
		}
		for i := 0; i < depth; i++ {
			b = append(b, pbVarint(9<<3|wireEndGroup)...)
		}
		return b
	}
	good := pbModel("g", [][]byte{pbOpset("", 17)}, pbNode("n", "Relu", pbAttr("a", 1)))
	if _, err := ComputeGraphIndex(good); err != nil {
		t.Fatal(err)
	}
	for _, ok := range [][]byte{
		nest(100),
		cat(pbVarint(1<<3|wireStartGroup), pbInt(2, 5), pbField(3, []byte("x")), pbVarint(1<<3|wireEndGroup)),
		cat(pbVarint(1<<3|wireFixed64), make([]byte, 8), pbVarint(1<<3|wireFixed32), make([]byte, 4)),
		{0x80 | 0x0A, 0x80, 0x80, 0x80, 0x00, 0x00},                                             // a 5-byte tag (field 1, wire 2)
		cat(pbVarint(1<<3), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}), // a 10-byte varint value
		cat(pbVarint((1<<29-1)<<3|wireVarint), []byte{0}),                                       // the largest field number
		pbField(7, pbField(1, pbField(5, pbField(20, []byte{0xff})))),                           // an attribute's own fields are not split
		// A length of 2^64: the bits past 64 are dropped (as protobuf readers do), so it reads 0.
		cat(pbVarint(1<<3|wireBytes), []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02}),
	} {
		if _, err := ComputeGraphIndex(ok); err != nil {
			t.Errorf("%x: well-formed, but no index", ok)
		}
	}
	cases := map[string][]byte{
		"truncated length":           good[:len(good)-1],
		"length past the end":        cat(pbVarint(1<<3|wireBytes), []byte{5, 'a'}),
		"a 6-byte tag":               {0x80 | 0x0A, 0x80, 0x80, 0x80, 0x80, 0x00, 0x00},
		"a tag of 2^32":              {0x80, 0x80, 0x80, 0x80, 0x10, 0x00},
		"field number 0":             {0x02, 0x00},
		"an 11-byte varint":          cat(pbVarint(1<<3), bytes.Repeat([]byte{0xff}, 10), []byte{0x01}),
		"a varint cut short":         cat(pbVarint(1<<3), []byte{0xff}),
		"a fixed64 cut short":        cat(pbVarint(1<<3|wireFixed64), make([]byte, 7)),
		"a fixed32 cut short":        cat(pbVarint(1<<3|wireFixed32), make([]byte, 3)),
		"wire type 4 outside groups": pbVarint(1<<3 | wireEndGroup),
		"wire type 6":                cat(pbVarint(1<<3|6), []byte{0}),
		"wire type 7":                cat(pbVarint(1<<3|7), []byte{0}),
		"groups 101 deep":            nest(101),
		"a group left open":          cat(pbVarint(1<<3|wireStartGroup), pbInt(2, 5)),
		"another group's end":        cat(pbVarint(1<<3|wireStartGroup), pbVarint(2<<3|wireEndGroup)),
		"a graph that is not":        cat(pbInt(1, 8), pbField(7, []byte{0x0A, 0x05})),
		"a node that is not":         pbModel("g", nil, []byte{0x1A, 0x09, 'n'}),
		"an opset import that is not": cat(pbModel("g", nil, pbNode("n", "Relu")),
			pbField(8, []byte{0x07})),
		"an attribute that is not": pbModel("g", nil, pbNode("n", "Relu", []byte{0x0A})),
		"a group in G left open":   cat(pbInt(1, 8), pbField(7, pbVarint(3<<3|wireStartGroup))),
	}
	for name, section := range cases {
		if idx, err := ComputeGraphIndex(section); err == nil {
			t.Errorf("%s: an index %+v", name, idx)
		}
	}
	// G is the concatenation of the graph records' payloads: a graph record need not hold whole
	// records of its own, only G must be well-formed.
	split := pbField(1, pbNode("n", "Relu"))
	if _, err := ComputeGraphIndex(cat(pbField(7, split[:3]), pbField(7, split[3:]))); err != nil {
		t.Errorf("a node record split over two graph records: %v", err)
	}
}

// diffWheres compares the indexes of two sections and returns the where strings.
func diffWheres(t *testing.T, recorded, found []byte) []string {
	t.Helper()
	var out []string
	for _, d := range diffGraphIndex(mustIndex(t, recorded), mustIndex(t, found)) {
		out = append(out, d.where)
	}
	return out
}

func TestChangedGraphsAreNamedPartByPart(t *testing.T) {
	opsets := [][]byte{pbOpset("", 17), pbOpset("com.microsoft", 1)}
	nodes := [][]byte{
		pbNode("/conv", "Conv", pbAttr("strides", 1), pbAttr("pads", 0)),
		pbNode("/relu", "Relu"),
		pbNode("/pool", "MaxPool", pbAttr("kernel", 2)),
		pbNode("/out", "Identity"),
	}
	base := pbModel("main", opsets, nodes...)
	with := func(i int, n []byte) [][]byte {
		out := append([][]byte(nil), nodes...)
		out[i] = n
		return out
	}
	cases := []struct {
		name  string
		found []byte
		want  []string
	}{
		{"unchanged", base, nil},
		{"a node's input", pbModel("main", opsets, with(1, cat(pbNode("/relu", "Relu"), pbField(1, []byte("z"))))...),
			[]string{"node 1 '/relu' (Relu)"}},
		{"an attribute changed", pbModel("main", opsets, with(0, pbNode("/conv", "Conv", pbAttr("strides", 2), pbAttr("pads", 0)))...),
			[]string{"node 0 '/conv' (Conv): attribute 'strides'"}},
		{"an attribute removed", pbModel("main", opsets, with(0, pbNode("/conv", "Conv", pbAttr("pads", 0)))...),
			[]string{"node 0 '/conv' (Conv): attribute 'strides' removed"}},
		{"an attribute added", pbModel("main", opsets, with(2, pbNode("/pool", "MaxPool", pbAttr("kernel", 2), pbAttr("ceil", 1)))...),
			[]string{"node 2 '/pool' (MaxPool): attribute 'ceil' added"}},
		{"attributes reordered: the digests decide, by name", pbModel("main", opsets, with(0, pbNode("/conv", "Conv", pbAttr("pads", 1), pbAttr("strides", 1)))...),
			[]string{"node 0 '/conv' (Conv): attribute 'pads'"}},
		{"attributes reordered, each unchanged", pbModel("main", opsets, with(0, pbNode("/conv", "Conv", pbAttr("pads", 0), pbAttr("strides", 1)))...),
			[]string{"node 0 '/conv' (Conv): attributes reordered"}},
		{"a node renamed: the recorded name", pbModel("main", opsets, with(3, pbNode("/final", "Identity"))...),
			[]string{"node 3 '/out' (Identity)"}},
		{"a node and its attribute", pbModel("main", opsets, with(2, pbNode("/pool", "AveragePool", pbAttr("kernel", 3)))...),
			[]string{"node 2 '/pool' (MaxPool)", "node 2 '/pool' (MaxPool): attribute 'kernel'"}},
		{"a node inserted", pbModel("main", opsets, nodes[0], nodes[1], pbNode("/new", "Neg"), nodes[2], nodes[3]),
			[]string{"node 2 '/new' (Neg) added"}},
		{"a node removed", pbModel("main", opsets, nodes[0], nodes[2], nodes[3]),
			[]string{"node 1 '/relu' (Relu) removed"}},
		{"a node replaced by two", pbModel("main", opsets, nodes[0], pbNode("/a", "Abs"), pbNode("/b", "Neg"), nodes[2], nodes[3]),
			[]string{"node 1 '/relu' (Relu) removed", "node 1 '/a' (Abs) added", "node 2 '/b' (Neg) added"}},
		{"the last node removed", pbModel("main", opsets, nodes[:3]...),
			[]string{"node 3 '/out' (Identity) removed"}},
		{"a node duplicated: P and Q do not overlap", pbModel("main", opsets, nodes[0], nodes[1], nodes[1], nodes[2], nodes[3]),
			[]string{"node 2 '/relu' (Relu) added"}},
		{"an opset import changed", pbModel("main", [][]byte{pbOpset("", 18), opsets[1]}, nodes...),
			[]string{"opset import 0 ''"}},
		{"an opset import's domain changed", pbModel("main", [][]byte{opsets[0], pbOpset("com.other", 1)}, nodes...),
			[]string{"opset import 1 'com.microsoft'"}},
		{"an opset import added", pbModel("main", append([][]byte{pbOpset("ai.onnx.ml", 3)}, opsets...), nodes...),
			[]string{"opset imports"}},
		{"a graph field changed", pbModel("other", opsets, nodes...),
			[]string{"graph fields other than nodes (name, inputs, outputs, initializers ...)"}},
		{"a model field changed", cat(base, pbField(2, []byte("producer"))),
			[]string{"model fields outside the graph and opset imports"}},
		{"everything, in order", cat(pbInt(1, 9), pbField(7, cat(pbField(1, nodes[0]), pbField(2, []byte("x")))), pbField(8, opsets[0])),
			[]string{"model fields outside the graph and opset imports", "opset imports",
				"graph fields other than nodes (name, inputs, outputs, initializers ...)",
				"node 1 '/relu' (Relu) removed", "node 2 '/pool' (MaxPool) removed", "node 3 '/out' (Identity) removed"}},
	}
	for _, c := range cases {
		if got := diffWheres(t, base, c.found); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
	// Expected and found values: the digests, or absent; the counts of opset imports.
	recorded := mustIndex(t, base)
	d := diffGraphIndex(recorded, mustIndex(t, pbModel("main", opsets, nodes[0], nodes[2], nodes[3])))
	if len(d) != 1 || d[0].expected != recorded.nodes[1].sha256 || d[0].found != "absent" {
		t.Errorf("removed: %+v", d)
	}
	d = diffGraphIndex(recorded, mustIndex(t, pbModel("main", opsets[:1], nodes...)))
	if len(d) != 1 || d[0].expected != "2 recorded" || d[0].found != "1 found" {
		t.Errorf("opset imports: %+v", d)
	}
	d = diffGraphIndex(recorded, mustIndex(t, pbModel("main", opsets, with(2, pbNode("/pool", "MaxPool", pbAttr("kernel", 2), pbAttr("ceil", 1)))...)))
	if len(d) != 1 || d[0].expected != "absent" || d[0].found != sha(pbField(5, pbAttr("ceil", 1))) {
		t.Errorf("added: %+v", d)
	}
}

func TestAttributesMatchTheFirstUnmatchedOfTheSameName(t *testing.T) {
	base := pbModel("g", nil, pbNode("n", "Op", pbAttr("a", 1), pbAttr("a", 2), pbAttr("b", 3)))
	found := pbModel("g", nil, pbNode("n", "Op", pbAttr("a", 1), pbAttr("c", 4), pbAttr("a", 5)))
	want := []string{"node 0 'n' (Op): attribute 'a'", "node 0 'n' (Op): attribute 'b' removed", "node 0 'n' (Op): attribute 'c' added"}
	if got := diffWheres(t, base, found); !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestLabelsAreShownEscaped(t *testing.T) {
	cases := []struct {
		l      label
		quoted bool
		want   string
	}{
		{label{s: "/encoder.0/Conv"}, true, "'/encoder.0/Conv'"},
		{label{s: "Conv"}, false, "Conv"},
		{label{}, true, "''"},
		{label{}, false, ""},
		{label{null: true}, true, "?"},
		{label{null: true}, false, "?"},
		{label{s: "it's a\\b"}, true, `'it\u0027s a\u005cb'`},
		{label{s: "\x00\t\n\x1f \x7f~"}, false, `\u0000\u0009\u000a\u001f \u007f~`},
		{label{s: "é\u0080\u2028😀\"/"}, true, "'é\u0080\u2028😀\"/'"},
	}
	for _, c := range cases {
		if got := showLabel(c.l, c.quoted); got != c.want {
			t.Errorf("%q: got %q, want %q", c.l.s, got, c.want)
		}
	}
	base := pbModel("g", nil, pbNode("a'b", "O\\p", pbAttr("\x01", 1)), pbNode("\xff", "\xfe"))
	found := pbModel("g", nil, pbNode("a'b", "O\\p", pbAttr("\x01", 2)), cat(pbNode("\xff", "\xfe"), pbField(1, []byte("z"))))
	want := []string{`node 0 'a\u0027b' (O\u005cp): attribute '\u0001'`, "node 1 ? (?)"}
	if got := diffWheres(t, base, found); !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// valueToGo turns a parsed JSON value into what canonicalOf marshals.
func valueToGo(v *Value) interface{} {
	switch v.Kind {
	case KindString:
		return v.Str
	case KindArray:
		out := []interface{}{}
		for _, item := range v.Arr {
			out = append(out, valueToGo(item))
		}
		return out
	case KindObject:
		out := map[string]interface{}{}
		for _, m := range v.Obj {
			out[m.Key] = valueToGo(m.Value)
		}
		return out
	}
	return nil
}

// buildV2 writes a version 2 container whose data area holds section (no tensors) and whose
// header records the graph section (digest and index) of recorded.
func buildV2(t *testing.T, recorded, section []byte, edit func(map[string]interface{})) []byte {
	t.Helper()
	index := mustIndex(t, recorded)
	return buildContainerOf(t, section, nil, func(c map[string]interface{}) {
		c["format_version"] = 2
		c["graph_index"] = valueToGo(index.JSON())
		c["sections"].([]interface{})[0].(map[string]interface{})["sha256"] = []string{sha(recorded)}
		if edit != nil {
			edit(c)
		}
	})
}

func TestVersion2Containers(t *testing.T) {
	model := pbModel("main", [][]byte{pbOpset("", 17)}, pbNode("/conv", "Conv", pbAttr("strides", 1)), pbNode("/relu", "Relu"))
	if v, err := verifyBytes(t, buildV2(t, model, model, nil), "m.seal", ContainerOptions{}); err != nil || !v.OK {
		t.Fatalf("a version 2 container: %v %+v", err, v)
	}
	// Signed, with tensors (their references checked before the index).
	tensorsGraph := graphSection(sampleTensors, func(x testTensor) []int64 { return x.shape })
	signed := buildContainerOf(t, tensorsGraph, sampleTensors, func(c map[string]interface{}) {
		c["format_version"] = 2
		c["graph_index"] = valueToGo(mustIndex(t, tensorsGraph).JSON())
	}, newKey("signer"))
	if v, err := verifyBytes(t, signed, "m.seal", ContainerOptions{}); err != nil || !v.OK {
		t.Fatalf("a signed version 2 container with tensors: %v %+v", err, v)
	}

	format := []string{"format:container"}
	version1 := buildContainerOf(t, model, nil, nil)
	malformed := map[string][]byte{
		"preamble 1, header 2": func() []byte { b := buildV2(t, model, model, nil); b[8] = 1; return b }(),
		"preamble 2, header 1": func() []byte { b := append([]byte(nil), version1...); b[8] = 2; return b }(),
		"preamble 3":           func() []byte { b := buildV2(t, model, model, nil); b[8] = 3; return b }(),
		"version 2 without graph_index": buildV2(t, model, model, func(c map[string]interface{}) {
			delete(c, "graph_index")
		}),
		"version 1 with graph_index": buildV2(t, model, model, func(c map[string]interface{}) {
			c["format_version"] = 1
		}),
		"version 3": buildV2(t, model, model, func(c map[string]interface{}) { c["format_version"] = 3 }),
		"another index": buildV2(t, model, model, func(c map[string]interface{}) {
			c["graph_index"].(map[string]interface{})["model"] = strings.Repeat("0", 64)
		}),
		"another label": buildV2(t, model, model, func(c map[string]interface{}) {
			c["graph_index"].(map[string]interface{})["nodes"].([]interface{})[1].(map[string]interface{})["name"] = nil
		}),
		"a label too long": buildV2(t, model, model, func(c map[string]interface{}) {
			c["graph_index"].(map[string]interface{})["nodes"].([]interface{})[1].(map[string]interface{})["name"] = strings.Repeat("a", 257)
		}),
		"a bad reference and a bad index: one failure": buildContainerOf(t, tensorsGraph, sampleTensors, func(c map[string]interface{}) {
			c["format_version"] = 2
			c["graph_index"] = valueToGo(mustIndex(t, model).JSON())
			c["tensors"].([]interface{})[0].(map[string]interface{})["dtype"] = "int32"
		}),
	}
	for name, blob := range malformed {
		v, err := verifyBytes(t, blob, "m.seal", ContainerOptions{})
		if err != nil || !reflect.DeepEqual(failureNames(v), format) {
			t.Errorf("%s: %v %v", name, err, failureNames(v))
		}
	}
	if v, _ := verifyBytes(t, version1, "m.seal", ContainerOptions{}); !v.OK {
		t.Errorf("version 1 is still read: %v", failureNames(v))
	}

	// A changed graph section: the section, then each difference.
	changed := pbModel("main", [][]byte{pbOpset("", 18)}, pbNode("/conv", "Conv", pbAttr("strides", 2)), pbNode("/relu", "Relu"))
	v, _ := verifyBytes(t, buildV2(t, model, changed, nil), "m.seal", ContainerOptions{})
	want := []string{"section:graph", "graph:opset import 0 ''", "graph:node 0 '/conv' (Conv): attribute 'strides'"}
	if got := failureNames(v); !reflect.DeepEqual(got, want) {
		t.Errorf("changed graph: %q", got)
	}
	if stdout, stderr := v.Text(); !strings.Contains(stdout, `FAILED: graph "node 0 '/conv' (Conv): attribute 'strides'": expected `) ||
		!strings.Contains(stderr, "(and 2 more, listed above)") {
		t.Errorf("text:\n%s%s", stdout, stderr)
	}
	inserted := pbModel("main", [][]byte{pbOpset("", 17)}, pbNode("/conv", "Conv", pbAttr("strides", 1)), pbNode("/neg", "Neg"), pbNode("/relu", "Relu"))
	v, _ = verifyBytes(t, buildV2(t, model, inserted, nil), "m.seal", ContainerOptions{})
	if got := failureNames(v); !reflect.DeepEqual(got, []string{"section:graph", "graph:node 1 '/neg' (Neg) added"}) {
		t.Errorf("inserted node: %q", got)
	}
	// A changed section without an index: only the section.
	garbage := append(append([]byte(nil), model...), 0x07)
	v, _ = verifyBytes(t, buildV2(t, model, garbage, nil), "m.seal", ContainerOptions{})
	if got := failureNames(v); !reflect.DeepEqual(got, []string{"section:graph"}) {
		t.Errorf("garbage: %q", got)
	}
	// Version 1: a changed section is only the section.
	v, _ = verifyBytes(t, buildContainerOf(t, changed, nil, func(c map[string]interface{}) {
		c["sections"].([]interface{})[0].(map[string]interface{})["sha256"] = []string{sha(model)}
	}), "m.seal", ContainerOptions{})
	if got := failureNames(v); !reflect.DeepEqual(got, []string{"section:graph"}) {
		t.Errorf("version 1: %q", got)
	}
}

func TestEverySingleByteFlipOfAVersion2GraphIsReported(t *testing.T) {
	model := pbModel("main", [][]byte{pbOpset("", 17)}, pbNode("/conv", "Conv", pbAttr("strides", 1)), pbNode("/relu", "Relu"))
	blob := buildV2(t, model, model, nil)
	start := len(blob) - len(model)
	for i := start; i < len(blob); i++ {
		flipped := append([]byte(nil), blob...)
		flipped[i] ^= 0x01
		v, err := verifyBytes(t, flipped, "m.seal", ContainerOptions{})
		if err != nil || v.ExitCode != ExitFailed || failureNames(v)[0] != "section:graph" {
			t.Fatalf("flip at %d: %v %+v", i, err, v)
		}
		for _, f := range v.Failures[1:] {
			if f.Kind != "graph" {
				t.Fatalf("flip at %d: %+v", i, v.Failures)
			}
		}
	}
}
