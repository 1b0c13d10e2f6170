package main

// A strict JSON reader and the canonical JSON writer of docs/container-format.md ("Canonical
// JSON"). encoding/json is not used for outside documents: it accepts duplicate keys, turns
// lone surrogates into U+FFFD and cannot tell 1 from 1.0, and each of those decides whether a
// record is canonical.

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kind is the JSON type of a Value.
type Kind int

// The JSON types.
const (
	KindNull Kind = iota
	KindBool
	KindNumber
	KindString
	KindArray
	KindObject
)

// Member is one key of an object, in document order.
type Member struct {
	Key   string // WTF-8: a lone surrogate escape stays a code point of its own
	Value *Value
}

// Value is a parsed JSON value. Strings are WTF-8 so that "\ud800" and "\udc00" stay two
// different strings, as they are to Python.
type Value struct {
	Kind  Kind
	Bool  bool
	Num   string // the number's text as written
	IsInt bool   // no fraction and no exponent: a JSON integer
	Str   string
	Arr   []*Value
	Obj   []Member
}

// DuplicateKeys says what the reader does with an object that names a key twice.
type DuplicateKeys int

const (
	// RefuseDuplicates: a duplicate key is a syntax error (every sealtrace format).
	RefuseDuplicates DuplicateKeys = iota
)

// errTooDeep is returned when nesting exceeds the reader's bound.
var errTooDeep = errors.New("JSON nested too deeply")

// maxIntegerDigits bounds the digits of an integer, as Python does when it converts one (4300).
const maxIntegerDigits = 4300

type jsonReader struct {
	text     []byte
	pos      int
	maxDepth int
}

// ParseJSON reads one JSON value that must fill text (surrounding whitespace allowed), nesting
// arrays and objects at most maxDepth deep (the outermost counts as 1). NaN and Infinity are
// not JSON and are refused; so are duplicate keys, control characters in strings and invalid
// UTF-8.
func ParseJSON(text []byte, maxDepth int) (*Value, error) {
	r := &jsonReader{text: text, maxDepth: maxDepth}
	r.skipSpace()
	v, err := r.value(0)
	if err != nil {
		return nil, err
	}
	r.skipSpace()
	if r.pos != len(r.text) {
		return nil, r.fail("extra data after the JSON value")
	}
	return v, nil
}

func (r *jsonReader) fail(what string) error {
	return fmt.Errorf("%s at byte %d", what, r.pos)
}

func (r *jsonReader) skipSpace() {
	for r.pos < len(r.text) {
		switch r.text[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

func (r *jsonReader) value(depth int) (*Value, error) {
	if r.pos >= len(r.text) {
		return nil, r.fail("unexpected end of JSON")
	}
	switch c := r.text[r.pos]; {
	case c == '{':
		if depth+1 > r.maxDepth {
			return nil, errTooDeep
		}
		return r.object(depth + 1)
	case c == '[':
		if depth+1 > r.maxDepth {
			return nil, errTooDeep
		}
		return r.array(depth + 1)
	case c == '"':
		s, err := r.str()
		if err != nil {
			return nil, err
		}
		return &Value{Kind: KindString, Str: s}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return r.number()
	default:
		for _, lit := range []struct {
			word string
			v    Value
		}{{"true", Value{Kind: KindBool, Bool: true}}, {"false", Value{Kind: KindBool}}, {"null", Value{Kind: KindNull}}} {
			if strings.HasPrefix(string(r.text[r.pos:min(len(r.text), r.pos+5)]), lit.word) {
				r.pos += len(lit.word)
				v := lit.v
				return &v, nil
			}
		}
		return nil, r.fail("not a JSON value")
	}
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

func (r *jsonReader) object(depth int) (*Value, error) {
	r.pos++ // {
	v := &Value{Kind: KindObject}
	seen := map[string]bool{}
	r.skipSpace()
	if r.pos < len(r.text) && r.text[r.pos] == '}' {
		r.pos++
		return v, nil
	}
	for {
		r.skipSpace()
		if r.pos >= len(r.text) || r.text[r.pos] != '"' {
			return nil, r.fail("expected a string key")
		}
		key, err := r.str()
		if err != nil {
			return nil, err
		}
		if seen[key] {
			return nil, r.fail(fmt.Sprintf("duplicate key %s", quoteForMessage(key)))
		}
		seen[key] = true
		r.skipSpace()
		if r.pos >= len(r.text) || r.text[r.pos] != ':' {
			return nil, r.fail("expected ':'")
		}
		r.pos++
		r.skipSpace()
		item, err := r.value(depth)
		if err != nil {
			return nil, err
		}
		v.Obj = append(v.Obj, Member{Key: key, Value: item})
		r.skipSpace()
		if r.pos >= len(r.text) {
			return nil, r.fail("unexpected end of JSON")
		}
		if r.text[r.pos] == ',' {
			r.pos++
			continue
		}
		if r.text[r.pos] == '}' {
			r.pos++
			return v, nil
		}
		return nil, r.fail("expected ',' or '}'")
	}
}

func (r *jsonReader) array(depth int) (*Value, error) {
	r.pos++ // [
	v := &Value{Kind: KindArray, Arr: []*Value{}}
	r.skipSpace()
	if r.pos < len(r.text) && r.text[r.pos] == ']' {
		r.pos++
		return v, nil
	}
	for {
		r.skipSpace()
		item, err := r.value(depth)
		if err != nil {
			return nil, err
		}
		v.Arr = append(v.Arr, item)
		r.skipSpace()
		if r.pos >= len(r.text) {
			return nil, r.fail("unexpected end of JSON")
		}
		if r.text[r.pos] == ',' {
			r.pos++
			continue
		}
		if r.text[r.pos] == ']' {
			r.pos++
			return v, nil
		}
		return nil, r.fail("expected ',' or ']'")
	}
}

func (r *jsonReader) number() (*Value, error) {
	start := r.pos
	t := r.text
	if r.pos < len(t) && t[r.pos] == '-' {
		r.pos++
	}
	if r.pos >= len(t) {
		return nil, r.fail("bad number")
	}
	if t[r.pos] == '0' {
		r.pos++
	} else if t[r.pos] >= '1' && t[r.pos] <= '9' {
		for r.pos < len(t) && t[r.pos] >= '0' && t[r.pos] <= '9' {
			r.pos++
		}
	} else {
		return nil, r.fail("bad number")
	}
	isInt := true
	if r.pos < len(t) && t[r.pos] == '.' {
		isInt = false
		r.pos++
		digits := r.pos
		for r.pos < len(t) && t[r.pos] >= '0' && t[r.pos] <= '9' {
			r.pos++
		}
		if r.pos == digits {
			return nil, r.fail("bad number")
		}
	}
	if r.pos < len(t) && (t[r.pos] == 'e' || t[r.pos] == 'E') {
		isInt = false
		r.pos++
		if r.pos < len(t) && (t[r.pos] == '+' || t[r.pos] == '-') {
			r.pos++
		}
		digits := r.pos
		for r.pos < len(t) && t[r.pos] >= '0' && t[r.pos] <= '9' {
			r.pos++
		}
		if r.pos == digits {
			return nil, r.fail("bad number")
		}
	}
	text := string(t[start:r.pos])
	if isInt && len(strings.TrimPrefix(text, "-")) > maxIntegerDigits {
		return nil, r.fail("integer too long")
	}
	return &Value{Kind: KindNumber, Num: text, IsInt: isInt}, nil
}

func hexValue(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func (r *jsonReader) hex4() (rune, bool) {
	if r.pos+4 > len(r.text) {
		return 0, false
	}
	var v rune
	for i := 0; i < 4; i++ {
		h := hexValue(r.text[r.pos+i])
		if h < 0 {
			return 0, false
		}
		v = v<<4 | rune(h)
	}
	r.pos += 4
	return v, true
}

// str reads a string token and returns it as WTF-8.
func (r *jsonReader) str() (string, error) {
	r.pos++ // opening quote
	var b strings.Builder
	for {
		if r.pos >= len(r.text) {
			return "", r.fail("unterminated string")
		}
		c := r.text[r.pos]
		switch {
		case c == '"':
			r.pos++
			return b.String(), nil
		case c == '\\':
			r.pos++
			if r.pos >= len(r.text) {
				return "", r.fail("unterminated string")
			}
			e := r.text[r.pos]
			r.pos++
			switch e {
			case '"', '\\', '/':
				b.WriteByte(e)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				cp, ok := r.hex4()
				if !ok {
					return "", r.fail("bad \\u escape")
				}
				// A high surrogate followed by an escaped low one is one astral character.
				if cp >= 0xD800 && cp <= 0xDBFF && r.pos+6 <= len(r.text) && r.text[r.pos] == '\\' && r.text[r.pos+1] == 'u' {
					save := r.pos
					r.pos += 2
					lo, ok := r.hex4()
					if ok && lo >= 0xDC00 && lo <= 0xDFFF {
						cp = 0x10000 + (cp-0xD800)<<10 + (lo - 0xDC00)
					} else {
						r.pos = save
					}
				}
				writeWTF8(&b, cp)
			default:
				return "", r.fail("bad escape")
			}
		case c < 0x20:
			return "", r.fail("control character in string")
		case c < 0x80:
			b.WriteByte(c)
			r.pos++
		default:
			cp, size := utf8.DecodeRune(r.text[r.pos:])
			if cp == utf8.RuneError && size <= 1 {
				return "", r.fail("invalid UTF-8")
			}
			b.Write(r.text[r.pos : r.pos+size])
			r.pos += size
		}
	}
}

// writeWTF8 appends one code point; surrogates get the three bytes UTF-8 would give them.
func writeWTF8(b *strings.Builder, cp rune) {
	if cp >= 0xD800 && cp <= 0xDFFF {
		b.WriteByte(0xED)
		b.WriteByte(byte(0xA0 | (cp>>6)&0x1F))
		b.WriteByte(byte(0x80 | cp&0x3F))
		return
	}
	b.WriteRune(cp)
}

// codePoints decodes a WTF-8 string.
func codePoints(s string) []rune {
	out := make([]rune, 0, len(s))
	for i := 0; i < len(s); {
		if s[i] == 0xED && i+2 < len(s) && s[i+1] >= 0xA0 && s[i+1] <= 0xBF {
			out = append(out, 0xD000|rune(s[i+1]&0x3F)<<6|rune(s[i+2]&0x3F))
			i += 3
			continue
		}
		cp, size := utf8.DecodeRuneInString(s[i:])
		out = append(out, cp)
		i += size
	}
	return out
}

// quoteForMessage renders a string from a file for an error message: ASCII, escaped.
func quoteForMessage(s string) string {
	var b strings.Builder
	writeCanonicalString(&b, s)
	return b.String()
}

// Canonical returns the canonical JSON of v: keys sorted by code point, no whitespace, ','
// and ':' separators, ASCII only, integers in decimal, floats as Python's repr. A float that
// is not finite has no canonical form.
func Canonical(v *Value) ([]byte, error) {
	var b strings.Builder
	if err := writeCanonical(&b, v); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

func writeCanonical(b *strings.Builder, v *Value) error {
	switch v.Kind {
	case KindNull:
		b.WriteString("null")
	case KindBool:
		if v.Bool {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case KindNumber:
		if v.IsInt {
			n, ok := new(big.Int).SetString(v.Num, 10)
			if !ok {
				return fmt.Errorf("bad integer %s", v.Num)
			}
			b.WriteString(n.String())
			return nil
		}
		f, err := strconv.ParseFloat(v.Num, 64)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("number %s is out of the range of a float", v.Num)
		}
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return err
		}
		b.WriteString(FloatRepr(f))
	case KindString:
		writeCanonicalString(b, v.Str)
	case KindArray:
		b.WriteByte('[')
		for i, item := range v.Arr {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeCanonical(b, item); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case KindObject:
		members := append([]Member(nil), v.Obj...)
		// WTF-8 byte order is code point order.
		sort.Slice(members, func(i, j int) bool { return members[i].Key < members[j].Key })
		b.WriteByte('{')
		for i, m := range members {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonicalString(b, m.Key)
			b.WriteByte(':')
			if err := writeCanonical(b, m.Value); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	}
	return nil
}

func writeCanonicalString(b *strings.Builder, s string) {
	const hexDigits = "0123456789abcdef"
	u := func(c rune) {
		b.WriteString(`\u`)
		b.WriteByte(hexDigits[c>>12&0xF])
		b.WriteByte(hexDigits[c>>8&0xF])
		b.WriteByte(hexDigits[c>>4&0xF])
		b.WriteByte(hexDigits[c&0xF])
	}
	b.WriteByte('"')
	for _, c := range codePoints(s) {
		switch {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\f':
			b.WriteString(`\f`)
		case c >= 0x20 && c <= 0x7E:
			b.WriteRune(c)
		case c >= 0x10000:
			c -= 0x10000
			u(0xD800 + c>>10)
			u(0xDC00 + c&0x3FF)
		default:
			u(c)
		}
	}
	b.WriteByte('"')
}

// FloatRepr formats a finite float as Python's repr does: the shortest digits that read back
// to the same float, positional when the decimal exponent is in -4..16, else scientific with
// a signed exponent of at least two digits; integral values keep a ".0".
func FloatRepr(f float64) string {
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	sign := ""
	if f < 0 {
		sign = "-"
		f = -f
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expText, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expText)
	digits := strings.Replace(mant, ".", "", 1)
	decpt := exp + 1 // the decimal point sits after this many digits
	if decpt <= -4 || decpt > 16 {
		out := digits[:1]
		if len(digits) > 1 {
			out += "." + digits[1:]
		}
		x := decpt - 1
		xs := "+"
		if x < 0 {
			xs = "-"
			x = -x
		}
		return fmt.Sprintf("%s%se%s%02d", sign, out, xs, x)
	}
	switch {
	case decpt <= 0:
		return sign + "0." + strings.Repeat("0", -decpt) + digits
	case decpt >= len(digits):
		return sign + digits + strings.Repeat("0", decpt-len(digits)) + ".0"
	default:
		return sign + digits[:decpt] + "." + digits[decpt:]
	}
}

// Get returns the member named key, or nil.
func (v *Value) Get(key string) *Value {
	if v == nil || v.Kind != KindObject {
		return nil
	}
	for _, m := range v.Obj {
		if m.Key == key {
			return m.Value
		}
	}
	return nil
}

// Has says whether the object has the key.
func (v *Value) Has(key string) bool { return v.Get(key) != nil }

// Without returns a copy of the object without the given keys.
func (v *Value) Without(keys ...string) *Value {
	out := &Value{Kind: KindObject}
	for _, m := range v.Obj {
		drop := false
		for _, k := range keys {
			if m.Key == k {
				drop = true
			}
		}
		if !drop {
			out.Obj = append(out.Obj, m)
		}
	}
	return out
}

// String returns the string value, and whether v is a string.
func (v *Value) String() (string, bool) {
	if v == nil || v.Kind != KindString {
		return "", false
	}
	return v.Str, true
}

// Int64 returns an integer value that fits an int64: a JSON integer, never 1.0 or true.
func (v *Value) Int64() (int64, bool) {
	if v == nil || v.Kind != KindNumber || !v.IsInt {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Num, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// Rat returns the exact value of a number (ints exactly, floats as the float they read as).
func (v *Value) Rat() (*big.Rat, bool) {
	if v == nil || v.Kind != KindNumber {
		return nil, false
	}
	if v.IsInt {
		r, ok := new(big.Rat).SetString(v.Num)
		return r, ok
	}
	f, err := strconv.ParseFloat(v.Num, 64)
	if math.IsInf(f, 0) {
		return nil, false
	}
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, false
	}
	return new(big.Rat).SetFloat64(f), true
}

// isIntegral: a JSON number with no fractional part (JSON Schema's "integer": 1.0 is one).
func (v *Value) isIntegral() bool {
	if v.Kind != KindNumber {
		return false
	}
	if v.IsInt {
		return true
	}
	f, err := strconv.ParseFloat(v.Num, 64)
	if math.IsInf(f, 0) || (err != nil && !errors.Is(err, strconv.ErrRange)) {
		return false
	}
	return f == math.Trunc(f)
}

func newRat(n int64) *big.Rat { return big.NewRat(n, 1) }
