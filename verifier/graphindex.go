package main

// The graph index of container format version 2: docs/container-format.md, "The graph index
// (format version 2): what changed inside the graph". It is computed from the graph section's
// protobuf wire records (onnxwire.go's parseMessage), not from a parsed model, and compared
// with the header's `graph_index`: exactly when the section has its listed digests, part by part
// when it does not, to name what changed.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The field numbers the index splits on (onnx.proto).
const (
	indexModelGraph   = 7 // ModelProto.graph
	indexModelOpset   = 8 // ModelProto.opset_import
	indexOpsetDomain  = 1 // OperatorSetIdProto.domain
	indexGraphNode    = 1 // GraphProto.node
	indexNodeName     = 3 // NodeProto.name
	indexNodeOpType   = 4 // NodeProto.op_type
	indexNodeAttr     = 5 // NodeProto.attribute
	indexAttrName     = 1 // AttributeProto.name
	labelMaxCodePoint = 256
)

// label is a name from the graph, for reports: a string of at most 256 code points, or null
// (the payload was not valid UTF-8).
type label struct {
	s    string // WTF-8 when read from a header
	null bool
}

type indexAttribute struct {
	name   label
	sha256 string
}

type indexNode struct {
	name, opType label
	sha256       string
	attributes   []indexAttribute
}

type indexOpset struct {
	domain label
	sha256 string
}

// graphIndex is the `graph_index` object of a version 2 header.
type graphIndex struct {
	model, graph string
	opsetImports []indexOpset
	nodes        []indexNode
}

var errNoIndex = errors.New("the graph section is not well-formed protobuf, so it has no graph index")

// splitRecords splits a message that must be well-formed (onnxwire.go's parseMessage: tags of
// at most 5 bytes below 2^32, field numbers 1..2^29-1, varints of at most 10 bytes whose bits past
// 64 are dropped as protobuf readers drop them, groups nested at most 100 deep, no wire type 4
// outside a group, 6 or 7, records ending exactly at the message's end).
func splitRecords(msg []byte) ([]wireField, error) {
	records, err := parseMessage(msg)
	if err != nil {
		return nil, errNoIndex
	}
	return records, nil
}

// isRecord: "record (F)", field number F with wire type 2.
func isRecord(r wireField, number uint64) bool {
	return r.Type == wireBytes && r.Number == number
}

// hashRecords is H: sha256 of the concatenation of the bytes of the records of msg that keep
// does not drop (nil: all of them), in order.
func hashRecords(msg []byte, records []wireField, drop func(wireField) bool) string {
	h := sha256.New()
	for _, r := range records {
		if drop == nil || !drop(r) {
			h.Write(msg[r.Start:r.End])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// labelOf is the label of field number of a message: the payload of its last record (number),
// cut to its first 256 code points; "" without one; null when that payload is not UTF-8.
func labelOf(records []wireField, number uint64) label {
	var payload []byte
	found := false
	for _, r := range records {
		if isRecord(r, number) {
			payload, found = r.Bytes, true
		}
	}
	if !found {
		return label{}
	}
	if !utf8.Valid(payload) {
		return label{null: true}
	}
	s := string(payload)
	n := 0
	for i := range s {
		if n == labelMaxCodePoint {
			s = s[:i]
			break
		}
		n++
	}
	return label{s: s}
}

// ComputeGraphIndex computes the graph index of a graph section's bytes, or errNoIndex when the
// section, the concatenation of its graphs, a node, an opset import or an attribute is not a
// well-formed message.
func ComputeGraphIndex(section []byte) (*graphIndex, error) {
	records, err := splitRecords(section)
	if err != nil {
		return nil, err
	}
	idx := &graphIndex{opsetImports: []indexOpset{}, nodes: []indexNode{}}
	idx.model = hashRecords(section, records, func(r wireField) bool {
		return isRecord(r, indexModelGraph) || isRecord(r, indexModelOpset)
	})
	var graph []byte // G: the payloads of every record (7), in order
	for _, r := range records {
		switch {
		case isRecord(r, indexModelOpset):
			fields, err := splitRecords(r.Bytes)
			if err != nil {
				return nil, err
			}
			idx.opsetImports = append(idx.opsetImports, indexOpset{
				domain: labelOf(fields, indexOpsetDomain),
				sha256: hashRecords(section, []wireField{r}, nil),
			})
		case isRecord(r, indexModelGraph):
			graph = append(graph, r.Bytes...)
		}
	}
	graphRecords, err := splitRecords(graph)
	if err != nil {
		return nil, err
	}
	idx.graph = hashRecords(graph, graphRecords, func(r wireField) bool { return isRecord(r, indexGraphNode) })
	for _, r := range graphRecords {
		if !isRecord(r, indexGraphNode) {
			continue
		}
		node := r.Bytes
		fields, err := splitRecords(node)
		if err != nil {
			return nil, err
		}
		entry := indexNode{
			name:       labelOf(fields, indexNodeName),
			opType:     labelOf(fields, indexNodeOpType),
			sha256:     hashRecords(node, fields, func(f wireField) bool { return isRecord(f, indexNodeAttr) }),
			attributes: []indexAttribute{},
		}
		for _, f := range fields {
			if !isRecord(f, indexNodeAttr) {
				continue
			}
			attr, err := splitRecords(f.Bytes)
			if err != nil {
				return nil, err
			}
			entry.attributes = append(entry.attributes, indexAttribute{
				name:   labelOf(attr, indexAttrName),
				sha256: hashRecords(node, []wireField{f}, nil),
			})
		}
		idx.nodes = append(idx.nodes, entry)
	}
	return idx, nil
}

// JSON is the index as the header holds it.
func (g *graphIndex) JSON() *Value {
	str := func(s string) *Value { return &Value{Kind: KindString, Str: s} }
	lab := func(l label) *Value {
		if l.null {
			return &Value{Kind: KindNull}
		}
		return str(l.s)
	}
	obj := func(members ...Member) *Value { return &Value{Kind: KindObject, Obj: members} }
	opsets := &Value{Kind: KindArray, Arr: []*Value{}}
	for _, o := range g.opsetImports {
		opsets.Arr = append(opsets.Arr, obj(Member{"domain", lab(o.domain)}, Member{"sha256", str(o.sha256)}))
	}
	nodes := &Value{Kind: KindArray, Arr: []*Value{}}
	for _, n := range g.nodes {
		attrs := &Value{Kind: KindArray, Arr: []*Value{}}
		for _, a := range n.attributes {
			attrs.Arr = append(attrs.Arr, obj(Member{"name", lab(a.name)}, Member{"sha256", str(a.sha256)}))
		}
		nodes.Arr = append(nodes.Arr, obj(Member{"attributes", attrs}, Member{"name", lab(n.name)},
			Member{"op_type", lab(n.opType)}, Member{"sha256", str(n.sha256)}))
	}
	return obj(Member{"graph", str(g.graph)}, Member{"model", str(g.model)},
		Member{"nodes", nodes}, Member{"opset_imports", opsets})
}

// graphIndexFromHeader reads a header's `graph_index` (already checked against the schema).
func graphIndexFromHeader(v *Value) *graphIndex {
	lab := func(l *Value) label {
		if l.Kind == KindNull {
			return label{null: true}
		}
		return label{s: l.Str}
	}
	g := &graphIndex{model: v.Get("model").Str, graph: v.Get("graph").Str, opsetImports: []indexOpset{}, nodes: []indexNode{}}
	for _, o := range v.Get("opset_imports").Arr {
		g.opsetImports = append(g.opsetImports, indexOpset{domain: lab(o.Get("domain")), sha256: o.Get("sha256").Str})
	}
	for _, n := range v.Get("nodes").Arr {
		node := indexNode{name: lab(n.Get("name")), opType: lab(n.Get("op_type")), sha256: n.Get("sha256").Str,
			attributes: []indexAttribute{}}
		for _, a := range n.Get("attributes").Arr {
			node.attributes = append(node.attributes, indexAttribute{name: lab(a.Get("name")), sha256: a.Get("sha256").Str})
		}
		g.nodes = append(g.nodes, node)
	}
	return g
}

// equalIndex: the two indexes are the same JSON value (labels included).
func equalIndex(a, b *graphIndex) bool {
	ca, _ := Canonical(a.JSON())
	cb, _ := Canonical(b.JSON())
	return string(ca) == string(cb)
}

// indexDifference is one mismatch of kind `graph`: where, and the recorded and found values.
type indexDifference struct {
	where           string
	expected, found string
}

const absent = "absent"

// showLabel renders a label for a report: between single quotes (quoted) or as it is; `?`
// for null; `'`, `\` and every code point below U+0020 or equal to U+007F as `\u00xx`.
func showLabel(l label, quoted bool) string {
	if l.null {
		return "?"
	}
	var b strings.Builder
	for _, c := range codePoints(l.s) {
		if c == '\'' || c == '\\' || c < 0x20 || c == 0x7F {
			fmt.Fprintf(&b, `\u%04x`, c)
		} else {
			writeWTF8(&b, c)
		}
	}
	if quoted {
		return "'" + b.String() + "'"
	}
	return b.String()
}

func (n *indexNode) show(k int) string {
	return fmt.Sprintf("node %d %s (%s)", k, showLabel(n.name, true), showLabel(n.opType, false))
}

// sameNode: equal digests and equal lists of attribute digests.
func sameNode(a, b *indexNode) bool {
	if a.sha256 != b.sha256 || len(a.attributes) != len(b.attributes) {
		return false
	}
	for i := range a.attributes {
		if a.attributes[i].sha256 != b.attributes[i].sha256 {
			return false
		}
	}
	return true
}

// diffGraphIndex names each difference between the recorded index (the header's) and the one
// found in a changed graph section, in the order the spec lists them: model, opset imports,
// graph, nodes.
func diffGraphIndex(recorded, found *graphIndex) []indexDifference {
	var out []indexDifference
	add := func(where, expected, got string) {
		out = append(out, indexDifference{where: where, expected: expected, found: got})
	}
	if recorded.model != found.model {
		add("model fields outside the graph and opset imports", recorded.model, found.model)
	}
	if len(recorded.opsetImports) == len(found.opsetImports) {
		for i, r := range recorded.opsetImports {
			f := found.opsetImports[i]
			if r != f {
				add(fmt.Sprintf("opset import %d %s", i, showLabel(r.domain, true)), r.sha256, f.sha256)
			}
		}
	} else {
		add("opset imports", fmt.Sprintf("%d recorded", len(recorded.opsetImports)), fmt.Sprintf("%d found", len(found.opsetImports)))
	}
	if recorded.graph != found.graph {
		add("graph fields other than nodes (name, inputs, outputs, initializers ...)", recorded.graph, found.graph)
	}
	out = append(out, diffNodes(recorded.nodes, found.nodes)...)
	return out
}

// diffNodes aligns the two node lists by their equal prefix (P nodes) and suffix (Q nodes).
func diffNodes(recorded, found []indexNode) []indexDifference {
	var out []indexDifference
	add := func(where, expected, got string) {
		out = append(out, indexDifference{where: where, expected: expected, found: got})
	}
	n, m := len(recorded), len(found)
	least := n
	if m < least {
		least = m
	}
	p := 0
	for p < least && sameNode(&recorded[p], &found[p]) {
		p++
	}
	q := 0
	for q < least-p && sameNode(&recorded[n-1-q], &found[m-1-q]) {
		q++
	}
	if n != m {
		for k := p; k < n-q; k++ {
			add(recorded[k].show(k)+" removed", recorded[k].sha256, absent)
		}
		for k := p; k < m-q; k++ {
			add(found[k].show(k)+" added", absent, found[k].sha256)
		}
		return out
	}
	for k := p; k < n-q; k++ {
		r, f := &recorded[k], &found[k]
		if sameNode(r, f) {
			continue
		}
		node := r.show(k)
		reported := len(out)
		if r.sha256 != f.sha256 {
			add(node, r.sha256, f.sha256)
		}
		matched := make([]bool, len(f.attributes))
		for _, ra := range r.attributes {
			at := -1
			for j, fa := range f.attributes {
				if !matched[j] && fa.name == ra.name {
					at = j
					break
				}
			}
			attr := fmt.Sprintf("%s: attribute %s", node, showLabel(ra.name, true))
			switch {
			case at < 0:
				add(attr+" removed", ra.sha256, absent)
			default:
				matched[at] = true
				if f.attributes[at].sha256 != ra.sha256 {
					add(attr, ra.sha256, f.attributes[at].sha256)
				}
			}
		}
		for j, fa := range f.attributes {
			if !matched[j] {
				add(fmt.Sprintf("%s: attribute %s added", node, showLabel(fa.name, true)), absent, fa.sha256)
			}
		}
		if len(out) == reported {
			// The same attributes, each unchanged, in another order.
			add(node+": attributes reordered", r.sha256, f.sha256)
		}
	}
	return out
}
