package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestWithoutBindingEntryCutsOnlyThatEntry(t *testing.T) {
	graph := pbField(modelGraph, nil)
	other := pbField(modelMetadata, append(pbField(entryKey, []byte("author")), pbField(entryValue, []byte("me"))...))
	binding := pbField(modelMetadata, append(pbField(entryKey, []byte(metadataKey)), pbField(entryValue, []byte("{}"))...))
	model := bytes.Join([][]byte{pbInt(1, 8), graph, other, binding}, nil)
	got, err := withoutBindingEntry(model)
	if err != nil || !bytes.Equal(got, bytes.Join([][]byte{pbInt(1, 8), graph, other}, nil)) {
		t.Fatalf("%v %x", err, got)
	}
	if !IsOnnxModel(model) || IsOnnxModel(pbInt(1, 8)) {
		t.Error("an ONNX model has a graph")
	}
}

func TestModelValidityFollowsProtobuf(t *testing.T) {
	// What a protobuf reader of onnx.proto accepts (checked against Python's upb-based reader).
	tensor := func(p []byte) []byte { return pbField(modelGraph, pbField(graphInitializer, p)) }
	for name, c := range map[string]struct {
		data []byte
		ok   bool
	}{
		"ir_version as bytes (kept unknown)": {pbField(1, []byte{5}), true},
		"graph as a varint (kept unknown)":   {pbInt(modelGraph, 5), true},
		"graph not a message":                {pbField(modelGraph, []byte{0xff, 0xff}), false},
		"wire type 6":                        {[]byte{0x0e}, false},
		"field 0":                            {[]byte{0x00, 0x01}, false},
		"end group alone":                    {[]byte{0x84, 0x07}, false},
		"unknown group":                      {[]byte{0x83, 0x07, 0x08, 0x01, 0x84, 0x07}, true},
		"packed floats, 3 bytes":             {tensor(pbField(4, []byte{0, 0, 0})), false},
		"packed floats, 4 bytes":             {tensor(pbField(4, []byte{0, 0, 0, 0})), true},
		"packed dims, bad varint":            {tensor(pbField(1, []byte{0x80})), false},
		"11-byte varint":                     {append([]byte{0x08}, append(bytes.Repeat([]byte{0xff}, 10), 1)...), false},
		"10-byte varint, high bits dropped":  {append([]byte{0x08}, append(bytes.Repeat([]byte{0xff}, 9), 0x7f)...), true},
		"invalid UTF-8 string":               {pbField(2, []byte{0xff, 0xfe}), true},
	} {
		if got := ValidateModel(c.data) == nil; got != c.ok {
			t.Errorf("%s: valid=%v, want %v", name, got, c.ok)
		}
	}
	deep := func(levels int) []byte {
		var inner []byte
		for i := 0; i < levels; i++ {
			attr := pbField(attrG, inner)
			node := pbField(nodeAttribute, attr)
			inner = pbField(graphNode, node)
		}
		return pbField(modelGraph, inner)
	}
	if ValidateModel(deep(33)) != nil || ValidateModel(deep(34)) == nil {
		t.Error("messages nest at most 100 deep")
	}
}

func TestRecordsAreReadStrictly(t *testing.T) {
	good := `{"format":"sealtrace.binding.v1","container_digest":"` + string(bytes.Repeat([]byte("a"), 64)) +
		`","artifact":{"name":"a","sha256":"` + string(bytes.Repeat([]byte("b"), 64)) + `","digest_scope":"file"},` +
		`"transformation":"t","backend":{"name":"n","version":"v"},"options":{"x":[1.5,{"y":null}]},"created":"c",` +
		`"sealtrace_version":"s"}`
	if _, err := ParseBindingRecord([]byte(good), "r"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		good[:len(good)-1] + `,"format":"sealtrace.binding.v1"}`,
		"\xef\xbb\xbf" + good,
		good[:len(good)-1] + `,"extra":1}`,
		`{"format":"sealtrace.binding.v1"}`,
	} {
		if _, err := ParseBindingRecord([]byte(bad), "r"); err == nil {
			t.Errorf("accepted %q", bad[:40])
		}
	}
}

func TestSchemaCopiesAreTheOriginals(t *testing.T) {
	for _, name := range []string{"container-header.schema.json", "audit-log.schema.json", "ledger.schema.json"} {
		original, err := os.ReadFile(filepath.Join("..", "src", "sealtrace", "schemas", name))
		if err != nil {
			t.Skip("not in a sealtrace checkout")
		}
		copied, _ := schemaFiles.ReadFile("schemas/" + name)
		if !bytes.Equal(original, copied) {
			t.Errorf("verifier/schemas/%s differs from src/sealtrace/schemas/%s: copy it again", name, name)
		}
	}
	name := headerSchema().Def("name").Get("pattern").Str
	if name != entryNamePattern {
		t.Errorf("the header schema's name pattern changed: %s (validEntryName implements the old one)", name)
	}
}

func TestEverySchemaKeywordIsSupported(t *testing.T) {
	// A schema keyword the validator does not know would panic on some document: find it here.
	var walk func(v *Value)
	walk = func(v *Value) {
		if v.Kind != KindObject {
			return
		}
		for _, m := range v.Obj {
			switch m.Key {
			case "properties", "$defs":
				for _, p := range m.Value.Obj {
					walk(p.Value)
				}
				continue
			case "enum", "const", "required", "type", "pattern", "description", "title", "$schema", "$id", "$ref",
				"minLength", "maxLength", "minimum", "maximum", "multipleOf", "maxProperties", "minItems", "maxItems":
				continue
			case "anyOf", "oneOf", "allOf":
				for _, s := range m.Value.Arr {
					walk(s)
				}
				continue
			case "items", "additionalProperties", "propertyNames", "contains", "if", "then", "else":
				walk(m.Value)
				continue
			}
			t.Errorf("keyword %s", m.Key)
		}
	}
	for _, s := range []*Schema{headerSchema(), auditSchema(), ledgerSchema()} {
		walk(s.root)
	}
}
