package main

// `sealverify proof`: docs/ledger.md, "Tree heads" and "Proof documents": RFC 9162 inclusion
// and consistency proofs, checked with the ledger's public key and nothing else.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Ledger document formats.
const (
	TreeHeadFormat         = "sealtrace.ledger.tree-head.v1"
	InclusionProofFormat   = "sealtrace.ledger.inclusion-proof.v1"
	ConsistencyProofFormat = "sealtrace.ledger.consistency-proof.v1"
	LedgerRecordFormat     = "sealtrace.ledger.record.v1"

	maxProofFile = 4 * MiB
	proofDepth   = 64
)

// treeHead is a tree head that follows the schema.
type treeHead struct {
	doc      *Value
	size     uint64
	root     []byte
	keyID    string
	ledgerID string
}

// VerifyProof checks an inclusion or a consistency proof document.
func VerifyProof(path string, trust []*TrustedKey) (*Verdict, error) {
	data, err := readRegular(path, "proof", maxProofFile)
	if err != nil {
		return nil, err
	}
	doc, err := ParseJSON(data, proofDepth)
	if err != nil {
		return nil, badInput("%s: not a readable proof document (%v)", path, err)
	}
	format, _ := doc.Get("format").String()
	schema := ledgerSchema()
	// The list lengths are bounded before anything walks the lists.
	if proof := doc.Get("proof"); proof != nil && proof.Kind == KindArray && len(proof.Arr) > 65 {
		return nil, badInput("%s: %d proof hashes (at most 65)", path, len(proof.Arr))
	}
	v := newVerdict("proof", path)
	switch format {
	case InclusionProofFormat:
		if !schema.ValidAgainst(schema.Def("inclusion_proof"), doc) || !integersAreInts(doc, "index") {
			return nil, badInput("%s: not a well-formed %s document", path, format)
		}
		head, ok := readTreeHead(doc.Get("tree_head"))
		if !ok {
			return nil, badInput("%s: tree_head: tree_size and timestamp must be JSON integers", path)
		}
		leaf := doc.Get("leaf").Str
		if err := checkLeafRecord(leaf); err != nil {
			return nil, badInput("%s: leaf: %v", path, err)
		}
		checkInclusion(v, doc, head, trust)
	case ConsistencyProofFormat:
		if !schema.ValidAgainst(schema.Def("consistency_proof"), doc) {
			return nil, badInput("%s: not a well-formed %s document", path, format)
		}
		first, ok1 := readTreeHead(doc.Get("first"))
		second, ok2 := readTreeHead(doc.Get("second"))
		if !ok1 || !ok2 {
			return nil, badInput("%s: tree heads: tree_size and timestamp must be JSON integers", path)
		}
		checkConsistency(v, doc, first, second, trust)
	default:
		return nil, badInput("%s: not a ledger proof document (format %s)", path, quoteForMessage(format))
	}
	return v.finish(), nil
}

// integersAreInts: sizes and indices are JSON integers (not 3.0).
func integersAreInts(doc *Value, fields ...string) bool {
	for _, f := range fields {
		if n := doc.Get(f); n == nil || !n.IsInt {
			return false
		}
	}
	return true
}

func readTreeHead(doc *Value) (*treeHead, bool) {
	if !integersAreInts(doc, "tree_size", "timestamp") {
		return nil, false
	}
	size, _ := doc.Get("tree_size").Rat()
	root, _ := hex.DecodeString(doc.Get("root_hash").Str)
	return &treeHead{
		doc:      doc,
		size:     size.Num().Uint64(),
		root:     root,
		keyID:    doc.Get("signature").Get("key_id").Str,
		ledgerID: doc.Get("ledger").Str,
	}, true
}

// signedBody is the tree head's signed body, byte for byte as docs/ledger.md writes it.
func (h *treeHead) signedBody() []byte {
	previous := "null"
	if p, ok := h.doc.Get("previous").String(); ok {
		previous = `"` + p + `"`
	}
	return []byte(fmt.Sprintf(`{"format":"%s","ledger":"%s","previous":%s,"root_hash":"%s","timestamp":%s,"tree_size":%s}`,
		TreeHeadFormat, h.ledgerID, previous, h.doc.Get("root_hash").Str, h.doc.Get("timestamp").Num, h.doc.Get("tree_size").Num))
}

// checkTreeHead: signed by a trusted key (named by its key id) over the signed body's digest.
func checkTreeHead(v *Verdict, h *treeHead, where string, trust []*TrustedKey) bool {
	key := trustedKeyByID(trust, h.keyID)
	valid := false
	if key != nil {
		sum := sha256.Sum256(h.signedBody())
		sig, err := hex.DecodeString(h.doc.Get("signature").Get("signature").Str)
		valid = err == nil && verifyHexDigest(key.Key, hex.EncodeToString(sum[:]), sig)
	}
	v.Signers = append(v.Signers, Signer{KeyID: h.keyID, Valid: &valid, Trusted: valid})
	switch {
	case key == nil:
		v.fail("signature", where, "tree head of size %d is signed by key %s, not by a trusted key", h.size, h.keyID)
	case !valid:
		v.fail("signature", where, "tree head of size %d: the signature by key %s is not valid", h.size, h.keyID)
	}
	return valid
}

func nodeHash(left, right []byte) []byte {
	h := sha256.New()
	h.Write([]byte{1})
	h.Write(left)
	h.Write(right)
	return h.Sum(nil)
}

func decodeProof(list *Value) [][]byte {
	var out [][]byte
	for _, item := range list.Arr {
		b, _ := hex.DecodeString(item.Str)
		out = append(out, b)
	}
	return out
}

func checkInclusion(v *Verdict, doc *Value, head *treeHead, trust []*TrustedKey) {
	v.Digests["root"] = doc.Get("tree_head").Get("root_hash").Str
	if !checkTreeHead(v, head, "tree_head", trust) {
		return
	}
	leaf := []byte(doc.Get("leaf").Str)
	leafHash := sha256.Sum256(append([]byte{0}, leaf...))
	v.Digests["leaf"] = hex.EncodeToString(leafHash[:])
	index, _ := doc.Get("index").Rat()
	if !index.Num().IsUint64() || index.Num().Uint64() >= head.size {
		v.fail("proof", "proof", "leaf index %s is not in the tree of size %d", doc.Get("index").Num, head.size)
		return
	}
	if !inclusionHolds(index.Num().Uint64(), head.size, leafHash[:], decodeProof(doc.Get("proof")), head.root) {
		v.fail("proof", "proof", "the audit path does not lead from the leaf to the tree head's root")
	}
}

// checkLeafRecord: the leaf is ASCII, and the canonical JSON of a valid record.
func checkLeafRecord(text string) error {
	for i := 0; i < len(text); i++ {
		if text[i] >= 0x80 {
			return fmt.Errorf("not ASCII, so not canonical JSON")
		}
	}
	leaf := []byte(text)
	record, err := ParseJSON(leaf, proofDepth)
	if err != nil {
		return fmt.Errorf("the leaf is not a JSON record (%v)", err)
	}
	canonical, err := Canonical(record)
	if err != nil || !bytes.Equal(canonical, leaf) {
		return fmt.Errorf("the leaf is not in canonical JSON form")
	}
	if hasFloat(record) {
		return fmt.Errorf("the leaf holds a floating-point number")
	}
	schema := ledgerSchema()
	if !schema.ValidAgainst(schema.Def("record"), record) {
		return fmt.Errorf("the leaf does not follow the %s schema", LedgerRecordFormat)
	}
	return nil
}

// inclusionHolds is RFC 9162 2.1.3.2.
func inclusionHolds(index, size uint64, leafHash []byte, path [][]byte, root []byte) bool {
	if index >= size {
		return false
	}
	fn, sn := index, size-1
	r := leafHash
	for _, p := range path {
		if sn == 0 {
			return false
		}
		if fn&1 == 1 || fn == sn {
			r = nodeHash(p, r)
			if fn&1 == 0 {
				for fn&1 == 0 && fn != 0 {
					fn >>= 1
					sn >>= 1
				}
			}
		} else {
			r = nodeHash(r, p)
		}
		fn >>= 1
		sn >>= 1
	}
	return sn == 0 && bytes.Equal(r, root)
}

func checkConsistency(v *Verdict, doc *Value, first, second *treeHead, trust []*TrustedKey) {
	v.Digests["root"] = doc.Get("second").Get("root_hash").Str
	v.Digests["first_root"] = doc.Get("first").Get("root_hash").Str
	if !checkTreeHead(v, first, "first", trust) || !checkTreeHead(v, second, "second", trust) {
		return
	}
	switch {
	case first.ledgerID != second.ledgerID:
		v.fail("proof", "second", "the tree heads are of two ledgers (%s, %s)", first.ledgerID, second.ledgerID)
	case first.size == 0:
		// Every tree extends the empty one: its proof is empty and its root the hash of nothing.
		empty := sha256.Sum256(nil)
		if len(doc.Get("proof").Arr) != 0 || !bytes.Equal(first.root, empty[:]) {
			v.fail("proof", "proof", "a proof from the empty tree is empty, from the root sha256 of nothing")
		}
	case first.size > second.size:
		v.fail("proof", "proof", "the first tree head (size %d) is larger than the second (size %d)", first.size, second.size)
	case !consistencyHolds(first.size, second.size, first.root, second.root, decodeProof(doc.Get("proof"))):
		v.fail("proof", "proof", "the proof does not show the tree of size %d extends the tree of size %d", second.size, first.size)
	}
}

// consistencyHolds is RFC 9162 2.1.4.2.
func consistencyHolds(first, second uint64, firstRoot, secondRoot []byte, path [][]byte) bool {
	if first == second {
		return len(path) == 0 && bytes.Equal(firstRoot, secondRoot)
	}
	if len(path) == 0 {
		return false
	}
	if first&(first-1) == 0 {
		path = append([][]byte{firstRoot}, path...)
	}
	fn, sn := first-1, second-1
	for fn&1 == 1 {
		fn >>= 1
		sn >>= 1
	}
	fr, sr := path[0], path[0]
	for _, c := range path[1:] {
		if sn == 0 {
			return false
		}
		if fn&1 == 1 || fn == sn {
			fr = nodeHash(c, fr)
			sr = nodeHash(c, sr)
			if fn&1 == 0 {
				for fn&1 == 0 && fn != 0 {
					fn >>= 1
					sn >>= 1
				}
			}
		} else {
			sr = nodeHash(sr, c)
		}
		fn >>= 1
		sn >>= 1
	}
	return bytes.Equal(fr, firstRoot) && bytes.Equal(sr, secondRoot) && sn == 0
}
