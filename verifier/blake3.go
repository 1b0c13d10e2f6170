package main

// BLAKE3 (hash mode: no key, no derive-key context), written from the BLAKE3 specification
// (O'Connor, Aumasson, Neves, Wilcox-O'Hearn, 2020) for audit logs whose header names
// "digest_algorithm": "blake3" (docs/audit-log.md). Go's standard library has no BLAKE3, and
// sealverify takes no third-party module. Checked against the official test vectors
// (testdata/blake3_vectors.json, blake3_test.go). Plain and portable: the verifier hashes log
// lines with it, never gigabytes.

import (
	"encoding/binary"
	"encoding/hex"
	"math/bits"
)

const (
	blake3BlockLen = 64
	blake3ChunkLen = 1024

	flagChunkStart = 1 << 0
	flagChunkEnd   = 1 << 1
	flagParent     = 1 << 2
	flagRoot       = 1 << 3
)

// blake3IV is SHA-256's initial hash value, as the specification takes it.
var blake3IV = [8]uint32{
	0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19,
}

// blake3Permutation reorders the message words between rounds.
var blake3Permutation = [16]int{2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8}

// g is the quarter-round: it mixes two message words into a column or a diagonal of the state.
func g(s *[16]uint32, a, b, c, d int, mx, my uint32) {
	s[a] = s[a] + s[b] + mx
	s[d] = bits.RotateLeft32(s[d]^s[a], -16)
	s[c] = s[c] + s[d]
	s[b] = bits.RotateLeft32(s[b]^s[c], -12)
	s[a] = s[a] + s[b] + my
	s[d] = bits.RotateLeft32(s[d]^s[a], -8)
	s[c] = s[c] + s[d]
	s[b] = bits.RotateLeft32(s[b]^s[c], -7)
}

func blake3Round(s *[16]uint32, m *[16]uint32) {
	// Columns, then diagonals.
	g(s, 0, 4, 8, 12, m[0], m[1])
	g(s, 1, 5, 9, 13, m[2], m[3])
	g(s, 2, 6, 10, 14, m[4], m[5])
	g(s, 3, 7, 11, 15, m[6], m[7])
	g(s, 0, 5, 10, 15, m[8], m[9])
	g(s, 1, 6, 11, 12, m[10], m[11])
	g(s, 2, 7, 8, 13, m[12], m[13])
	g(s, 3, 4, 9, 14, m[14], m[15])
}

// blake3Compress is the compression function: seven rounds over a 64-byte block, the message
// words permuted between rounds; the result's first eight words are the new chaining value and
// all sixteen are a root's output block.
func blake3Compress(cv *[8]uint32, block *[16]uint32, counter uint64, blockLen uint32, flags uint32) [16]uint32 {
	s := [16]uint32{
		cv[0], cv[1], cv[2], cv[3], cv[4], cv[5], cv[6], cv[7],
		blake3IV[0], blake3IV[1], blake3IV[2], blake3IV[3],
		uint32(counter), uint32(counter >> 32), blockLen, flags,
	}
	m := *block
	for r := 0; r < 7; r++ {
		blake3Round(&s, &m)
		if r < 6 {
			var p [16]uint32
			for i, from := range blake3Permutation {
				p[i] = m[from]
			}
			m = p
		}
	}
	for i := 0; i < 8; i++ {
		s[i] ^= s[i+8]
		s[i+8] ^= cv[i]
	}
	return s
}

func wordsFromBlock(block []byte) [16]uint32 {
	var w [16]uint32
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(block[4*i:])
	}
	return w
}

// blake3Output is what a chunk or a parent node leaves to be compressed last: as a chaining
// value for its parent, or with the ROOT flag as the hash's output.
type blake3Output struct {
	cv       [8]uint32
	block    [16]uint32
	counter  uint64
	blockLen uint32
	flags    uint32
}

func (o *blake3Output) chainingValue() [8]uint32 {
	out := blake3Compress(&o.cv, &o.block, o.counter, o.blockLen, o.flags)
	var cv [8]uint32
	copy(cv[:], out[:8])
	return cv
}

// rootBytes fills out with the extendable output: each 64 bytes are one more compression of
// the root node with an incremented output block counter.
func (o *blake3Output) rootBytes(out []byte) {
	for counter := uint64(0); len(out) > 0; counter++ {
		words := blake3Compress(&o.cv, &o.block, counter, o.blockLen, o.flags|flagRoot)
		var block [64]byte
		for i, w := range words {
			binary.LittleEndian.PutUint32(block[4*i:], w)
		}
		out = out[copy(out, block[:]):]
	}
}

// blake3Chunk hashes one 1024-byte chunk, block by block.
type blake3Chunk struct {
	cv               [8]uint32
	counter          uint64
	block            [blake3BlockLen]byte
	blockLen         int
	blocksCompressed int
}

func newBlake3Chunk(counter uint64) blake3Chunk {
	return blake3Chunk{cv: blake3IV, counter: counter}
}

func (c *blake3Chunk) len() int { return blake3BlockLen*c.blocksCompressed + c.blockLen }

func (c *blake3Chunk) startFlag() uint32 {
	if c.blocksCompressed == 0 {
		return flagChunkStart
	}
	return 0
}

func (c *blake3Chunk) update(input []byte) {
	for len(input) > 0 {
		// A full block is compressed only once more input follows: the chunk's last block
		// carries CHUNK_END (and, for a one-chunk input, ROOT).
		if c.blockLen == blake3BlockLen {
			words := wordsFromBlock(c.block[:])
			out := blake3Compress(&c.cv, &words, c.counter, blake3BlockLen, c.startFlag())
			copy(c.cv[:], out[:8])
			c.blocksCompressed++
			c.block = [blake3BlockLen]byte{}
			c.blockLen = 0
		}
		n := copy(c.block[c.blockLen:], input)
		c.blockLen += n
		input = input[n:]
	}
}

func (c *blake3Chunk) output() blake3Output {
	return blake3Output{
		cv: c.cv, block: wordsFromBlock(c.block[:]), counter: c.counter,
		blockLen: uint32(c.blockLen), flags: c.startFlag() | flagChunkEnd,
	}
}

func blake3Parent(left, right [8]uint32) blake3Output {
	var block [16]uint32
	copy(block[:8], left[:])
	copy(block[8:], right[:])
	return blake3Output{cv: blake3IV, block: block, blockLen: blake3BlockLen, flags: flagParent}
}

// Blake3 is an incremental BLAKE3 hasher in hash mode.
type Blake3 struct {
	chunk blake3Chunk
	stack [][8]uint32 // chaining values of complete subtrees, one per set bit of the chunk count
}

// NewBlake3 returns a hasher of the empty input.
func NewBlake3() *Blake3 { return &Blake3{chunk: newBlake3Chunk(0)} }

// Write adds input; it never fails.
func (h *Blake3) Write(input []byte) (int, error) {
	n := len(input)
	for len(input) > 0 {
		if h.chunk.len() == blake3ChunkLen {
			// The chunk is complete and more input follows: merge it into the tree. Each trailing
			// zero bit of the new chunk count completes one subtree.
			cv := h.chunk.output()
			chunkCV := cv.chainingValue()
			total := h.chunk.counter + 1
			for total&1 == 0 {
				top := h.stack[len(h.stack)-1]
				h.stack = h.stack[:len(h.stack)-1]
				parent := blake3Parent(top, chunkCV)
				chunkCV = parent.chainingValue()
				total >>= 1
			}
			h.stack = append(h.stack, chunkCV)
			h.chunk = newBlake3Chunk(h.chunk.counter + 1)
		}
		take := blake3ChunkLen - h.chunk.len()
		if take > len(input) {
			take = len(input)
		}
		h.chunk.update(input[:take])
		input = input[take:]
	}
	return n, nil
}

// Sum fills out (any length: the extendable output) with the hash of what was written.
func (h *Blake3) Sum(out []byte) {
	o := h.chunk.output()
	for i := len(h.stack) - 1; i >= 0; i-- {
		o = blake3Parent(h.stack[i], o.chainingValue())
	}
	o.rootBytes(out)
}

// Blake3Hex is the lowercase hex of the 32-byte BLAKE3 hash of data.
func Blake3Hex(data []byte) string {
	h := NewBlake3()
	h.Write(data)
	var out [32]byte
	h.Sum(out[:])
	return hex.EncodeToString(out[:])
}
