// Command sealverify checks sealtrace's evidence (containers, audit logs, bindings, ledger
// proofs) independently of sealtrace, from the formats in docs/ alone, with Go's standard
// library only.
//
//	sealverify container X.seal [--trust K.pub]... [--require-signature] [--expect-digest HEX] [--json]
//	sealverify audit LOG.jsonl [--container X.seal] [--trust K.pub]... [--json]
//	sealverify binding ARTIFACT --container X.seal [--trust K.pub]... [--json]
//	sealverify proof PROOF.json --trust K.pub [--trust K.pub]... [--json]
//	sealverify replay LOG.jsonl --container X.seal [--trust K.pub]... [--inputs FEEDS.npz] [--input NAME=X.npy]... [--json]
//	sealverify batch CASES.jsonl   (a test aid: many checks in one process, one verdict a line)
//
// Exit codes are sealtrace's: 0 ok, 1 a check ran and failed, 2 bad usage or bad input.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// Version of sealverify.
const Version = "0.1.0"

// defaultMemoryBudget bounds what a file may make the verifier hold in memory (sealtrace's
// default memory budget).
const defaultMemoryBudget = 1 << 30

const usage = `usage:
  sealverify container X.seal [--trust K.pub]... [--require-signature] [--expect-digest HEX] [--json]
  sealverify audit LOG.jsonl [--container X.seal] [--trust K.pub]... [--json]
  sealverify binding ARTIFACT --container X.seal [--trust K.pub]... [--json]
  sealverify proof PROOF.json --trust K.pub [--trust K.pub]... [--json]
  sealverify replay LOG.jsonl --container X.seal [--trust K.pub]... [--inputs FEEDS.npz] [--input NAME=X.npy]... [--json]
  sealverify batch CASES.jsonl
exit status: 0 ok, 1 a check failed, 2 bad usage or bad input`

// Invocation is one parsed command line.
type Invocation struct {
	Verb             string
	Subject          string
	Container        string
	Trust            []string
	RequireSignature bool
	ExpectDigest     string
	InputsFile       string            // replay: an .npz archive of inputs
	InputFiles       map[string]string // replay: NAME -> .npy file
	JSON             bool
}

// ParseArgs reads a command line (without the program name). Options may come before or
// after the subject; --opt=value and --opt value are both accepted.
func ParseArgs(args []string) (*Invocation, error) {
	if len(args) == 0 {
		return nil, badInput("no verb given\n%s", usage)
	}
	inv := &Invocation{Verb: args[0]}
	switch inv.Verb {
	case "container", "audit", "binding", "proof", "replay", "batch":
	case "-h", "--help", "help":
		return inv, nil
	default:
		return nil, badInput("unknown verb %q (container, audit, binding, proof, replay, batch)", inv.Verb)
	}
	allowed := map[string]map[string]bool{
		"container": {"--trust": true, "--require-signature": true, "--expect-digest": true, "--json": true},
		"audit":     {"--container": true, "--trust": true, "--json": true},
		"binding":   {"--container": true, "--trust": true, "--json": true},
		"proof":     {"--trust": true, "--json": true},
		"replay":    {"--container": true, "--trust": true, "--inputs": true, "--input": true, "--json": true},
		"batch":     {},
	}[inv.Verb]
	var positional []string
	rest := args[1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			positional = append(positional, rest[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "--") || a == "-" {
			positional = append(positional, a)
			continue
		}
		name, value, hasValue := strings.Cut(a, "=")
		if !allowed[name] {
			return nil, badInput("%s: no such option %s", inv.Verb, name)
		}
		takesValue := name == "--trust" || name == "--container" || name == "--expect-digest" || name == "--inputs" || name == "--input"
		if takesValue && !hasValue {
			if i+1 >= len(rest) {
				return nil, badInput("%s: option %s needs a value", inv.Verb, name)
			}
			i++
			value = rest[i]
		} else if !takesValue && hasValue {
			return nil, badInput("%s: option %s takes no value", inv.Verb, name)
		}
		switch name {
		case "--trust":
			inv.Trust = append(inv.Trust, value)
		case "--container":
			inv.Container = value
		case "--expect-digest":
			inv.ExpectDigest = value
		case "--inputs":
			inv.InputsFile = value
		case "--input":
			input, file, ok := strings.Cut(value, "=")
			if !ok || input == "" || file == "" {
				return nil, badInput("%s: --input takes NAME=FILE.npy, not %q", inv.Verb, value)
			}
			if inv.InputFiles == nil {
				inv.InputFiles = map[string]string{}
			}
			if _, dup := inv.InputFiles[input]; dup {
				return nil, badInput("%s: input %q given twice", inv.Verb, input)
			}
			inv.InputFiles[input] = file
		case "--require-signature":
			inv.RequireSignature = true
		case "--json":
			inv.JSON = true
		}
	}
	if len(positional) != 1 {
		return nil, badInput("%s: expected one file, got %d\n%s", inv.Verb, len(positional), usage)
	}
	inv.Subject = positional[0]
	return inv, nil
}

// ExitInternal is a bug in sealverify (a panic), never a verdict on the input.
const ExitInternal = 3

// Run performs one invocation and returns its verdict; a verdict with exit code 2 says why
// the check could not run. A panic is a bug: it becomes exit 3 with the panic's text, so that
// it is never mistaken for a verdict (an uncaught Go panic exits 2, "bad input").
func Run(inv *Invocation) (v *Verdict) {
	defer func() {
		if r := recover(); r != nil {
			v = newVerdict(inv.Verb, inv.Subject)
			v.ExitCode = ExitInternal
			v.fail("internal", nil, "internal error (a bug in sealverify, please report it): %v", r)
		}
	}()
	v, err := run(inv)
	if err != nil {
		return badInputVerdict(inv.Verb, inv.Subject, err)
	}
	return v
}

func run(inv *Invocation) (*Verdict, error) {
	trust, err := LoadTrust(inv.Trust)
	if err != nil {
		return nil, err
	}
	switch inv.Verb {
	case "container":
		if inv.RequireSignature && len(trust) == 0 {
			return nil, badInput("--require-signature needs at least one trusted public key (--trust KEY.pub)")
		}
		expect := strings.ToLower(inv.ExpectDigest)
		if inv.ExpectDigest != "" && !isLowerHex(expect, 64) {
			return nil, badInput("--expect-digest %q: a container digest is 64 hex digits", inv.ExpectDigest)
		}
		return VerifyContainer(inv.Subject, ContainerOptions{
			Trust: trust, RequireSignature: inv.RequireSignature, ExpectDigest: expect, MemoryBudget: defaultMemoryBudget,
		})
	case "audit":
		return VerifyAuditLog(inv.Subject, AuditOptions{Container: inv.Container, Trust: trust, MemoryBudget: defaultMemoryBudget})
	case "binding":
		if inv.Container == "" {
			return nil, badInput("binding: --container X.seal is required")
		}
		return VerifyBinding(inv.Subject, BindingOptions{Container: inv.Container, Trust: trust, MemoryBudget: defaultMemoryBudget})
	case "proof":
		if len(trust) == 0 {
			return nil, badInput("proof: --trust KEY.pub is required (a proof is believed only as far as a trusted key signed it)")
		}
		return VerifyProof(inv.Subject, trust)
	case "replay":
		return ReplayLog(inv.Subject, ReplayOptions{
			Container: inv.Container, InputsFile: inv.InputsFile, InputFiles: inv.InputFiles, Trust: trust, MemoryBudget: defaultMemoryBudget,
		})
	}
	return nil, badInput("unknown verb %q", inv.Verb)
}

// emit prints a verdict and returns its exit code.
func emit(v *Verdict, asJSON bool, stdout, stderr io.Writer) int {
	if asJSON && v.ExitCode != ExitBadInput {
		fmt.Fprintf(stdout, "%s\n", v.JSON())
	}
	if v.ExitCode == ExitBadInput || v.ExitCode == ExitInternal {
		fmt.Fprintf(stderr, "sealverify: error: %s\n", oneLine(v.Failures[0].What))
		return v.ExitCode
	}
	out, errText := v.Text()
	if !asJSON {
		fmt.Fprint(stdout, out)
	}
	if errText != "" {
		fmt.Fprint(stderr, oneLine(errText)+"\n")
	}
	return v.ExitCode
}

// oneLine keeps an error message to one line whatever a file name holds.
func oneLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7F {
			return '?'
		}
		return r
	}, s)
}

func main() {
	os.Exit(mainWithArgs(os.Args[1:], os.Stdout, os.Stderr))
}

func mainWithArgs(args []string, stdout, stderr io.Writer) int {
	inv, err := ParseArgs(args)
	if err != nil {
		msg := err.Error()
		fmt.Fprintf(stderr, "sealverify: error: %s\n", oneLine(msg))
		return ExitBadInput
	}
	if inv.Verb == "-h" || inv.Verb == "--help" || inv.Verb == "help" {
		fmt.Fprintln(stdout, usage)
		return ExitOK
	}
	if inv.Verb == "batch" {
		return RunBatch(inv.Subject, stdout, stderr)
	}
	return emit(Run(inv), inv.JSON, stdout, stderr)
}
