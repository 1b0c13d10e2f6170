package main

// The part of JSON Schema (draft 2020-12) that sealtrace's schemas use, enough to check a
// document against src/sealtrace/schemas/*.json as the docs require. Schemas are trusted
// input (embedded in the binary); documents are not.

import (
	"fmt"
	"math/big"
	"regexp"
	"strings"
	"sync"
)

// Schema is a parsed JSON Schema document with its compiled patterns.
type Schema struct {
	root     *Value
	patterns sync.Map // pattern text -> *regexp.Regexp
	// special runs the patterns Go's regexp cannot (lookahead), each as a Go function.
	special map[string]func(string) bool
}

// NewSchema parses a schema document.
func NewSchema(text []byte) (*Schema, error) {
	root, err := ParseJSON(text, 64)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return &Schema{root: root}, nil
}

// Def returns the schema under $defs/name.
func (s *Schema) Def(name string) *Value {
	return s.root.Get("$defs").Get(name)
}

// Valid checks instance against the whole schema.
func (s *Schema) Valid(instance *Value) bool { return s.valid(s.root, instance) }

// ValidAgainst checks instance against a sub-schema (from Def).
func (s *Schema) ValidAgainst(sub *Value, instance *Value) bool { return s.valid(sub, instance) }

func (s *Schema) regexp(pattern string) *regexp.Regexp {
	if re, ok := s.patterns.Load(pattern); ok {
		return re.(*regexp.Regexp)
	}
	re := regexp.MustCompile(pattern)
	s.patterns.Store(pattern, re)
	return re
}

func (s *Schema) resolve(ref string) *Value {
	if !strings.HasPrefix(ref, "#/") {
		panic("schema: only local references are supported: " + ref)
	}
	node := s.root
	for _, part := range strings.Split(ref[2:], "/") {
		node = node.Get(part)
	}
	if node == nil {
		panic("schema: dangling reference " + ref)
	}
	return node
}

func typeMatches(name string, v *Value) bool {
	switch name {
	case "null":
		return v.Kind == KindNull
	case "boolean":
		return v.Kind == KindBool
	case "object":
		return v.Kind == KindObject
	case "array":
		return v.Kind == KindArray
	case "string":
		return v.Kind == KindString
	case "number":
		return v.Kind == KindNumber
	case "integer":
		return v.isIntegral()
	}
	return false
}

// jsonEqual is JSON Schema equality: numbers by value (1 equals 1.0), booleans never equal
// numbers, objects regardless of key order.
func jsonEqual(a, b *Value) bool {
	if a.Kind != b.Kind {
		return false
	}
	switch a.Kind {
	case KindNull:
		return true
	case KindBool:
		return a.Bool == b.Bool
	case KindString:
		return a.Str == b.Str
	case KindNumber:
		x, ok1 := a.Rat()
		y, ok2 := b.Rat()
		return ok1 && ok2 && x.Cmp(y) == 0
	case KindArray:
		if len(a.Arr) != len(b.Arr) {
			return false
		}
		for i := range a.Arr {
			if !jsonEqual(a.Arr[i], b.Arr[i]) {
				return false
			}
		}
		return true
	case KindObject:
		if len(a.Obj) != len(b.Obj) {
			return false
		}
		for _, m := range a.Obj {
			o := b.Get(m.Key)
			if o == nil || !jsonEqual(m.Value, o) {
				return false
			}
		}
		return true
	}
	return false
}

func (s *Schema) valid(schema *Value, v *Value) bool {
	if schema.Kind == KindBool {
		return schema.Bool
	}
	for _, kw := range schema.Obj {
		if !s.keyword(schema, kw.Key, kw.Value, v) {
			return false
		}
	}
	return true
}

func (s *Schema) keyword(schema *Value, name string, arg *Value, v *Value) bool {
	switch name {
	case "$ref":
		return s.valid(s.resolve(arg.Str), v)
	case "type":
		if arg.Kind == KindString {
			return typeMatches(arg.Str, v)
		}
		for _, t := range arg.Arr {
			if typeMatches(t.Str, v) {
				return true
			}
		}
		return false
	case "const":
		return jsonEqual(arg, v)
	case "enum":
		for _, e := range arg.Arr {
			if jsonEqual(e, v) {
				return true
			}
		}
		return false
	case "anyOf":
		for _, sub := range arg.Arr {
			if s.valid(sub, v) {
				return true
			}
		}
		return false
	case "oneOf":
		n := 0
		for _, sub := range arg.Arr {
			if s.valid(sub, v) {
				n++
			}
		}
		return n == 1
	case "allOf":
		for _, sub := range arg.Arr {
			if !s.valid(sub, v) {
				return false
			}
		}
		return true
	case "if":
		if s.valid(arg, v) {
			if then := schema.Get("then"); then != nil {
				return s.valid(then, v)
			}
			return true
		}
		if otherwise := schema.Get("else"); otherwise != nil {
			return s.valid(otherwise, v)
		}
		return true
	case "pattern":
		if v.Kind != KindString {
			return true
		}
		if match, ok := s.special[arg.Str]; ok {
			return match(v.Str)
		}
		return s.regexp(arg.Str).MatchString(v.Str)
	case "minLength", "maxLength":
		if v.Kind != KindString {
			return true
		}
		n, _ := arg.Int64()
		length := int64(len(codePoints(v.Str)))
		if name == "minLength" {
			return length >= n
		}
		return length <= n
	case "minimum", "maximum":
		if v.Kind != KindNumber {
			return true
		}
		x, ok1 := v.Rat()
		bound, ok2 := arg.Rat()
		if !ok1 || !ok2 {
			return false
		}
		if name == "minimum" {
			return x.Cmp(bound) >= 0
		}
		return x.Cmp(bound) <= 0
	case "multipleOf":
		if v.Kind != KindNumber {
			return true
		}
		x, ok1 := v.Rat()
		step, ok2 := arg.Rat()
		if !ok1 || !ok2 || step.Sign() == 0 {
			return false
		}
		return new(big.Rat).Quo(x, step).IsInt()
	case "required":
		if v.Kind != KindObject {
			return true
		}
		for _, key := range arg.Arr {
			if !v.Has(key.Str) {
				return false
			}
		}
		return true
	case "properties":
		if v.Kind != KindObject {
			return true
		}
		for _, m := range v.Obj {
			if sub := arg.Get(m.Key); sub != nil && !s.valid(sub, m.Value) {
				return false
			}
		}
		return true
	case "additionalProperties":
		if v.Kind != KindObject {
			return true
		}
		props := schema.Get("properties")
		for _, m := range v.Obj {
			if props != nil && props.Has(m.Key) {
				continue
			}
			if !s.valid(arg, m.Value) {
				return false
			}
		}
		return true
	case "propertyNames":
		if v.Kind != KindObject {
			return true
		}
		for _, m := range v.Obj {
			if !s.valid(arg, &Value{Kind: KindString, Str: m.Key}) {
				return false
			}
		}
		return true
	case "maxProperties":
		if v.Kind != KindObject {
			return true
		}
		n, _ := arg.Int64()
		return int64(len(v.Obj)) <= n
	case "items":
		if v.Kind != KindArray {
			return true
		}
		for _, item := range v.Arr {
			if !s.valid(arg, item) {
				return false
			}
		}
		return true
	case "minItems", "maxItems":
		if v.Kind != KindArray {
			return true
		}
		n, _ := arg.Int64()
		if name == "minItems" {
			return int64(len(v.Arr)) >= n
		}
		return int64(len(v.Arr)) <= n
	case "contains":
		if v.Kind != KindArray {
			return true
		}
		for _, item := range v.Arr {
			if s.valid(arg, item) {
				return true
			}
		}
		return false
	case "then", "else", "$defs", "$schema", "$id", "title", "description":
		return true
	}
	panic("schema: keyword not supported by this verifier: " + name)
}
