package main

import (
	"strconv"
	"strings"
	"testing"
)

func mustCanonical(t *testing.T, text string) string {
	t.Helper()
	v, err := ParseJSON([]byte(text), 64)
	if err != nil {
		t.Fatalf("ParseJSON(%q): %v", text, err)
	}
	out, err := Canonical(v)
	if err != nil {
		t.Fatalf("Canonical(%q): %v", text, err)
	}
	return string(out)
}

func TestCanonicalEncodingByteForByte(t *testing.T) {
	// docs/container-format.md, "Canonical JSON, byte for byte"; the right-hand sides are what
	// Python's json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=True) writes.
	cases := map[string]string{
		`{"b": 1, "a": [true, false, null]}`: `{"a":[true,false,null],"b":1}`,
		`"\u00e9\u007f\u0001/\"\\"`:          `"\u00e9\u007f\u0001/\"\\"`,
		`"é"`:                                `"\u00e9"`,
		`"😀"`:                                `"\ud83d\ude00"`,
		`"\ud83d\ude00"`:                     `"\ud83d\ude00"`,
		`"\ud800x"`:                          `"\ud800x"`,
		`"\b\f\n\r\t"`:                       `"\b\f\n\r\t"`,
		`"\/"`:                               `"/"`,
		`"\u00E9"`:                           `"\u00e9"`,
		`-0`:                                 `0`,
		`123456789012345678901234567890`:     `123456789012345678901234567890`,
		`1.0`:                                `1.0`,
		`1E2`:                                `100.0`,
		`{"\ud83d\ude00": 1, "\uffff": 2}`:   `{"\uffff":2,"\ud83d\ude00":1}`,
		`{"\udc00": 1, "\ud800": 2, "z": 3}`: `{"z":3,"\ud800":2,"\udc00":1}`,
		`[ 1 , 2 ]`:                          `[1,2]`,
		`{"a":{"c":1,"b":2}}`:                `{"a":{"b":2,"c":1}}`,
	}
	for in, want := range cases {
		if got := mustCanonical(t, in); got != want {
			t.Errorf("canonical(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestFloatReprIsPythons(t *testing.T) {
	// (float.hex(), repr()) pairs from Python 3.11.
	for _, c := range pythonFloats {
		f, err := strconv.ParseFloat(c[0], 64)
		if err != nil {
			t.Fatal(err)
		}
		if got := FloatRepr(f); got != c[1] {
			t.Errorf("FloatRepr(%s) = %s, want %s", c[0], got, c[1])
		}
	}
}

func TestReaderRefusesWhatHasNoCanonicalForm(t *testing.T) {
	for _, text := range []string{
		`{"a":1,"a":1}`, `NaN`, `Infinity`, `-Infinity`, `[1,]`, `{"a":1,}`, `01`, `1.`, `.5`, `"\x"`,
		"\"a\x01\"", `"\u12"`, `[` + strings.Repeat("[", 70) + strings.Repeat("]", 71), "\xef\xbb\xbf{}",
		`{"a" 1}`, `tru`, `"unterminated`, "\"\xff\"", `1 2`,
	} {
		if _, err := ParseJSON([]byte(text), 64); err == nil {
			t.Errorf("ParseJSON(%q) succeeded", text)
		}
	}
	if _, err := Canonical(&Value{Kind: KindNumber, Num: "1e400"}); err == nil {
		t.Error("1e400 (infinite as a float) has a canonical form")
	}
}

func TestNestingBoundCountsTheOutermostAsOne(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	if _, err := ParseJSON([]byte(deep(32)), 32); err != nil {
		t.Errorf("32 levels refused: %v", err)
	}
	if _, err := ParseJSON([]byte(deep(33)), 32); err != errTooDeep {
		t.Errorf("33 levels: %v", err)
	}
}

func FuzzCanonicalRoundTrip(f *testing.F) {
	for _, seed := range []string{`{"a":[1,2.5,"x"]}`, `"\ud800"`, `1e-05`, `{"z":{"y":null}}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseJSON(data, 64)
		if err != nil {
			return
		}
		out, err := Canonical(v)
		if err != nil {
			return
		}
		again, err := ParseJSON(out, 64)
		if err != nil {
			t.Fatalf("canonical output does not parse: %q", out)
		}
		out2, err := Canonical(again)
		if err != nil || string(out2) != string(out) {
			t.Fatalf("canonical form is not a fixed point: %q -> %q", out, out2)
		}
	})
}
