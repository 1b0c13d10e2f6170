package main

// The verdict: what every check ends in, printed as text or as JSON following
// src/sealtrace/schemas/verdict.schema.json (shared with sealtrace's --json outputs).

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Exit codes, as sealtrace's (docs/cli.md).
const (
	ExitOK       = 0
	ExitFailed   = 1 // a check ran and failed
	ExitBadInput = 2 // bad usage or bad input
)

// VerdictFormat names the verdict schema's version.
const VerdictFormat = "sealtrace.verdict.v1"

// Failure is one named failed check: what kind of part failed, where (a tensor or section
// name, a line number, a field), and what is wrong in words.
type Failure struct {
	Kind  string      `json:"kind"`
	Where interface{} `json:"where"` // string, int or nil
	What  string      `json:"what"`
}

// Signer is one signature the checked object carries.
type Signer struct {
	KeyID   string `json:"key_id"`
	Valid   *bool  `json:"valid"` // nil: not checked (no key to check it with)
	Trusted bool   `json:"trusted"`
}

// Verdict is the outcome of one check.
type Verdict struct {
	Verdict  string            `json:"verdict"`
	Check    string            `json:"check"`
	Subject  string            `json:"subject"`
	OK       bool              `json:"ok"`
	ExitCode int               `json:"exit_code"`
	Failures []Failure         `json:"failures"`
	Digests  map[string]string `json:"digests"`
	Signers  []Signer          `json:"signers"`
	Verifier map[string]string `json:"verifier"`
	// Summary is the OK line's detail (not part of the JSON).
	Summary string `json:"-"`
}

func newVerdict(check, subject string) *Verdict {
	return &Verdict{
		Verdict:  VerdictFormat,
		Check:    check,
		Subject:  subject,
		Failures: []Failure{},
		Digests:  map[string]string{},
		Signers:  []Signer{},
		Verifier: map[string]string{"name": "sealverify", "version": Version},
	}
}

// fail records a failed check.
func (v *Verdict) fail(kind string, where interface{}, format string, args ...interface{}) {
	v.Failures = append(v.Failures, Failure{Kind: kind, Where: where, What: fmt.Sprintf(format, args...)})
}

// finish sets ok and the exit code from the failures.
func (v *Verdict) finish() *Verdict {
	v.OK = len(v.Failures) == 0
	if v.OK {
		v.ExitCode = ExitOK
	} else {
		v.ExitCode = ExitFailed
	}
	return v
}

// BadInput is an error a user caused that is not a failed check (exit 2).
type BadInput struct{ msg string }

func (e *BadInput) Error() string { return e.msg }

func badInput(format string, args ...interface{}) error {
	return &BadInput{msg: fmt.Sprintf(format, args...)}
}

// badInputVerdict is the verdict of a check that could not run.
func badInputVerdict(check, subject string, err error) *Verdict {
	v := newVerdict(check, subject)
	v.ExitCode = ExitBadInput
	v.fail("input", nil, "%s", err.Error())
	return v
}

// JSON renders the verdict, indented, keys in a fixed order.
func (v *Verdict) JSON() []byte {
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		// Every field is a plain string, number or map of strings: Marshal cannot fail.
		return []byte(`{"verdict":"` + VerdictFormat + `","ok":false,"exit_code":2}`)
	}
	return out
}

// Text renders the verdict for a terminal: FAILED lines, then one summary line.
func (v *Verdict) Text() (stdout string, stderr string) {
	if v.OK {
		return fmt.Sprintf("%s: OK%s\n", v.Subject, v.Summary), ""
	}
	var b strings.Builder
	for _, f := range v.Failures[1:] {
		b.WriteString("FAILED: " + describe(f) + "\n")
	}
	first := describe(v.Failures[0])
	if len(v.Failures) > 1 {
		first = fmt.Sprintf("%s (and %d more, listed above)", first, len(v.Failures)-1)
	}
	return b.String(), fmt.Sprintf("sealverify: error: %s: %s\n", v.Subject, first)
}

func describe(f Failure) string {
	switch w := f.Where.(type) {
	case nil:
		return f.What
	case int:
		return fmt.Sprintf("line %d: %s", w, f.What)
	default:
		return fmt.Sprintf("%s %s: %s", f.Kind, quoteForMessage(fmt.Sprint(w)), f.What)
	}
}
