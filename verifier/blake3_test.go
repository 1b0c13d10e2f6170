package main

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
)

// The official BLAKE3 test vectors (hash mode), each input the repeating bytes 0..250: the
// extended output, and its first 32 bytes as the default-length hash, whole and written in pieces.
func TestBlake3OfficialVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/blake3_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors struct {
		Cases []struct {
			InputLen int    `json:"input_len"`
			Hash     string `json:"hash"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors.Cases) < 30 {
		t.Fatalf("only %d cases", len(vectors.Cases))
	}
	for _, c := range vectors.Cases {
		input := make([]byte, c.InputLen)
		for i := range input {
			input[i] = byte(i % 251)
		}
		if got := Blake3Hex(input); got != c.Hash[:64] {
			t.Errorf("len %d: hash %s, want %s", c.InputLen, got, c.Hash[:64])
		}
		extended := make([]byte, len(c.Hash)/2)
		h := NewBlake3()
		for rest, step := input, 1; len(rest) > 0; step = step*3 + 1 {
			if step > len(rest) {
				step = len(rest)
			}
			h.Write(rest[:step])
			rest = rest[step:]
		}
		h.Sum(extended)
		if got := hex.EncodeToString(extended); got != c.Hash {
			t.Errorf("len %d: extended output differs", c.InputLen)
		}
	}
}
