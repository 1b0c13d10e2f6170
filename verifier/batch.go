package main

// `sealverify batch CASES.jsonl`: a test aid for the agreement corpus. Each line of CASES is
// {"id": ID, "args": [VERB, FILE, OPTION...]}, the arguments of one sealverify command line; for
// each, one line {"id": ID, "verdict": VERDICT} is printed, VERDICT as `--json` prints it (with
// exit_code 2 and the error when the check could not run). Starting one process per case would
// cost more than most checks.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// batchCase is one line of a batch file.
type batchCase struct {
	ID   json.RawMessage `json:"id"`
	Args []string        `json:"args"`
}

// RunBatch runs every case of a batch file; the exit status is 0 when every line was a case,
// 2 otherwise (the verdicts are on stdout either way).
func RunBatch(path string, stdout, stderr io.Writer) int {
	f, _, err := openRegular(path, "batch file")
	if err != nil {
		fmt.Fprintf(stderr, "sealverify: error: %s\n", oneLine(err.Error()))
		return ExitBadInput
	}
	defer f.Close()
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 64*1024), 16*MiB)
	status := ExitOK
	for line := 1; scanner.Scan(); line++ {
		var c batchCase
		if err := json.Unmarshal(scanner.Bytes(), &c); err != nil || len(c.Args) == 0 || c.Args[0] == "batch" {
			fmt.Fprintf(stderr, "sealverify: error: %s line %d: not a case\n", path, line)
			status = ExitBadInput
			continue
		}
		inv, err := ParseArgs(c.Args)
		var v *Verdict
		if err != nil {
			v = badInputVerdict(c.Args[0], "", err)
		} else {
			v = Run(inv)
		}
		verdict, _ := json.Marshal(v)
		id := c.ID
		if id == nil {
			id = json.RawMessage("null")
		}
		fmt.Fprintf(out, "{\"id\":%s,\"verdict\":%s}\n", id, verdict)
	}
	if err := scanner.Err(); err != nil {
		fmt.Fprintf(stderr, "sealverify: error: %s: %v\n", path, err)
		return ExitBadInput
	}
	return status
}
