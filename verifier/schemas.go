package main

// The JSON Schemas of docs/ (src/sealtrace/schemas/), copied here byte for byte so that the
// binary is self-contained; a test checks that the copies are the same as the originals.

import (
	"embed"
	"sync"
)

//go:embed schemas/*.json
var schemaFiles embed.FS

// entryNamePattern is the header schema's name pattern (see validEntryName).
const entryNamePattern = `^(?![/]|[A-Za-z]:)(?!.*(^|/)\.{1,2}(/|$))[^\\\u0000-\u001f\u007f]+$`

var (
	schemaOnce                                 sync.Once
	headerSchemaV, auditSchemaV, ledgerSchemaV *Schema
)

func loadSchemas() {
	load := func(name string) *Schema {
		text, err := schemaFiles.ReadFile("schemas/" + name)
		if err != nil {
			panic(err) // embedded at build time
		}
		s, err := NewSchema(text)
		if err != nil {
			panic(err)
		}
		return s
	}
	headerSchemaV = load("container-header.schema.json")
	headerSchemaV.special = map[string]func(string) bool{entryNamePattern: validEntryName}
	auditSchemaV = load("audit-log.schema.json")
	ledgerSchemaV = load("ledger.schema.json")
}

func headerSchema() *Schema { schemaOnce.Do(loadSchemas); return headerSchemaV }
func auditSchema() *Schema  { schemaOnce.Do(loadSchemas); return auditSchemaV }
func ledgerSchema() *Schema { schemaOnce.Do(loadSchemas); return ledgerSchemaV }
