package main

// `sealverify replay`: docs/audit-log.md, "Replay", under docs/numerics.md. The log is verified
// (as `audit --container` verifies it), the graph is read from the model, run with replay's own
// kernels under the portable-numerics specification, and every step's output digests are
// compared with the log's.

import (
	"fmt"
	"sort"
	"strings"
)

// ReplayOptions are replay's options.
type ReplayOptions struct {
	Container    string            // the model the run used (required)
	InputsFile   string            // an .npz archive of inputs, or ""
	InputFiles   map[string]string // NAME -> .npy file
	Trust        []*TrustedKey     // with keys: the container and the log must be signed by one of them
	MemoryBudget int64
}

// numericsSpec is the portable-numerics version replay implements.
const numericsSpec = "1"

// ReplayLog re-executes a log's run and compares every step with the log.
func ReplayLog(path string, opts ReplayOptions) (*Verdict, error) {
	if opts.Container == "" {
		return nil, badInput("replay: --container MODEL.seal is required")
	}
	v := newVerdict("replay", path)
	if len(opts.Trust) > 0 {
		model, err := requireTrustedModel(opts.Container, opts.Trust)
		if err != nil {
			return nil, err
		}
		v.Signers = model.Signers
		if !model.OK {
			v.Failures = model.Failures
			return v.finish(), nil
		}
	}
	audit, lines, err := verifyAuditLines(path, AuditOptions{Container: opts.Container, Trust: opts.Trust, MemoryBudget: opts.MemoryBudget})
	if err != nil {
		return nil, err
	}
	v.Digests = audit.Digests
	v.Signers = append(v.Signers, audit.Signers...)
	if !audit.OK {
		v.Failures = audit.Failures
		return v.finish(), nil
	}
	header := lines[0].record
	digestOf, _ := headerAlgorithm(header)
	if err := requirePortable(header); err != nil {
		return nil, err
	}
	graph, err := ReadModelFile(opts.Container, opts.MemoryBudget)
	if err != nil {
		return nil, err
	}
	values := map[string]*Tensor{}
	for name, t := range graph.Initializers {
		values[name] = t
	}
	if err := bindInputs(v, header, lines[0].number, graph, values, digestOf, opts); err != nil {
		return nil, err
	}
	steps, err := topLevelSteps(lines, graph)
	if err != nil {
		return nil, err
	}
	for i, node := range graph.Nodes {
		line := steps[i]
		in := make([]*Tensor, len(node.Inputs))
		for k, name := range node.Inputs {
			if name == "" {
				continue
			}
			t, ok := values[name]
			if !ok {
				return nil, badInput("node %s reads %s, which no earlier node, input or weight produces", quoteForMessage(node.Name), quoteForMessage(name))
			}
			in[k] = t
		}
		out, err := runNode(node, in)
		if err != nil {
			return nil, err
		}
		if differs := compareStep(line, node, in, out, digestOf); differs != "" {
			v.fail("step", line.number, "step %d %s (%s) differs from the log: %s", i, quoteForMessage(node.Name), node.OpType, differs)
			return v.finish(), nil
		}
		for k, name := range node.Outputs {
			values[name] = out[k]
		}
	}
	footer := lines[len(lines)-1]
	for _, logged := range footer.record.Get("outputs").Arr {
		name := logged.Get("name").Str
		t, ok := values[name]
		if !ok || t.Digest(digestOf) != logged.Get("digest").Str {
			v.fail("line", footer.number, "graph output %s differs from the log", quoteForMessage(name))
			return v.finish(), nil
		}
	}
	if len(v.Failures) == 0 {
		v.Summary = fmt.Sprintf(": bit-identical: %d step(s) and every graph output match the log; run digest %s", len(graph.Nodes), v.Digests["run"])
	}
	return v.finish(), nil
}

// requireTrustedModel: with --trust, what runs must be a container signed by a trusted key (an
// ONNX file carries no signature, so it fails the check rather than passing it unchecked).
func requireTrustedModel(path string, trust []*TrustedKey) (*Verdict, error) {
	isContainer, err := modelIsContainer(path)
	if err != nil {
		return nil, err
	}
	if isContainer {
		return VerifyContainer(path, ContainerOptions{Trust: trust, RequireSignature: true, MemoryBudget: defaultMemoryBudget})
	}
	v := newVerdict("container", path)
	v.fail("signature", "trusted signature", "expected a sealed container signed by a trusted key, found a model that is not a sealed container (nothing is signed)")
	return v.finish(), nil
}

// requirePortable: replay re-executes logs of the reference backend's portable numerics, whose
// results the specification defines; any other log has no specified result to compare with.
func requirePortable(header *Value) error {
	backend := header.Get("backend")
	numerics := backend.Get("numerics")
	mode, _ := numerics.Get("mode").String()
	spec, _ := numerics.Get("spec").String()
	if name, _ := backend.Get("name").String(); name != "reference" || mode != "portable" {
		what := "no recorded numerics (a native run of an earlier sealtrace)"
		if mode != "" {
			what = mode + " numerics"
		}
		return badInput("the log was recorded with %s on backend %s; sealverify replays portable numerics of the reference backend only (docs/numerics.md)", what, quoteForMessage(backend.Get("name").Str))
	}
	if spec != numericsSpec {
		return badInput("the log was recorded under portable numerics version %s; sealverify implements version %s", quoteForMessage(spec), numericsSpec)
	}
	return nil
}

// bindInputs puts the run's inputs among the values: from the input files where given, else
// from the header's sample where it holds the whole input. An input other than the logged one
// is noted (the replay goes on, and fails, as sealtrace's does).
func bindInputs(v *Verdict, header *Value, line int, graph *Graph, values map[string]*Tensor, digestOf logDigest, opts ReplayOptions) error {
	given := map[string]*Tensor{}
	if opts.InputsFile != "" {
		archive, err := ReadNpz(opts.InputsFile, opts.MemoryBudget)
		if err != nil {
			return err
		}
		given = archive
	}
	names := make([]string, 0, len(opts.InputFiles))
	for name := range opts.InputFiles {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		data, err := readRegular(opts.InputFiles[name], "input", opts.MemoryBudget)
		if err != nil {
			return err
		}
		t, err := ReadNpy(data, opts.InputFiles[name], opts.MemoryBudget)
		if err != nil {
			return err
		}
		given[name] = t
	}
	logged := map[string]*Value{}
	for _, value := range header.Get("inputs").Arr {
		logged[value.Get("name").Str] = value
	}
	for name := range given {
		if _, ok := logged[name]; !ok {
			return badInput("input %s is not an input of the logged run (%s)", quoteForMessage(name), strings.Join(graph.Inputs, ", "))
		}
	}
	for _, name := range graph.Inputs {
		value, ok := logged[name]
		if !ok {
			return badInput("graph input %s is not in the log's header", quoteForMessage(name))
		}
		if kind := value.Get("kind").Str; kind != "tensor" {
			return badInput("input %s is a %s, which replay does not read yet", quoteForMessage(name), kind)
		}
		want := value.Get("digest").Str
		t, fromFile := given[name]
		if !fromFile {
			t = tensorFromSample(value)
			if t == nil || t.Digest(digestOf) != want {
				return badInput("input %s is not held whole by the log's sample; give it with --inputs FILE.npz", quoteForMessage(name))
			}
		} else if t.Digest(digestOf) != want {
			v.fail("line", line, "input %s (%s %v) is not the logged one", quoteForMessage(name), t.DType, t.Shape)
		}
		values[name] = t
	}
	return nil
}

// topLevelSteps pairs each node with its step record: the log's top-level steps are the
// graph's nodes, in order (the Plan's step index is the node's position).
func topLevelSteps(lines []logLine, graph *Graph) ([]logLine, error) {
	var steps []logLine
	for _, l := range lines[1 : len(lines)-1] {
		if len(l.record.Get("path").Arr) != 0 {
			return nil, badInput("line %d: a step inside a subgraph; replay does not run control flow yet", l.number)
		}
		steps = append(steps, l)
	}
	if len(steps) != len(graph.Nodes) {
		return nil, badInput("the log has %d step(s), the model's graph %d node(s)", len(steps), len(graph.Nodes))
	}
	for i, l := range steps {
		node := graph.Nodes[i]
		index, _ := l.record.Get("step").Int64()
		if index != int64(i) || l.record.Get("name").Str != node.Name || l.record.Get("op_type").Str != node.OpType {
			return nil, badInput("line %d: step %d %s (%s) is not node %d %s (%s) of the model", l.number, index, quoteForMessage(l.record.Get("name").Str), l.record.Get("op_type").Str, i, quoteForMessage(node.Name), node.OpType)
		}
	}
	return steps, nil
}

// compareStep says how a step's computed outputs differ from its record ("" when they agree),
// naming the inputs whose digests differ too (a changed weight shows up as one).
func compareStep(line logLine, node *Node, in, out []*Tensor, digestOf logDigest) string {
	var differing []string
	logged := line.record.Get("outputs").Arr
	for k, name := range node.Outputs {
		if k >= len(logged) {
			differing = append(differing, fmt.Sprintf("output %s is not in the log", quoteForMessage(name)))
			continue
		}
		rec, t := logged[k], out[k]
		if rec.Get("digest").Str == t.Digest(digestOf) {
			continue
		}
		what := fmt.Sprintf("output %s: computed digest %s, logged %s", quoteForMessage(name), t.Digest(digestOf)[:12], shortDigest(rec.Get("digest")))
		if t.DType == "<f4" && rec.Get("dtype").Str == "<f4" {
			what += sampleDifference(rec.Get("sample"), t.Float32s())
		}
		differing = append(differing, what)
	}
	if len(differing) == 0 {
		return ""
	}
	loggedInputs := line.record.Get("inputs").Arr
	for k, t := range in {
		if t != nil && k < len(loggedInputs) && loggedInputs[k].Get("digest").Str != t.Digest(digestOf) {
			differing = append(differing, fmt.Sprintf("input %s's digest differs too", quoteForMessage(node.Inputs[k])))
		}
	}
	return strings.Join(differing, "; ")
}

// sampleDifference: the first position where the logged sample and the computed values differ.
func sampleDifference(sample *Value, computed []float32) string {
	if sample == nil {
		return ""
	}
	for i, e := range sample.Arr {
		encoded, ok := encodeSampleValue("<f4", e)
		if !ok || i >= len(computed) {
			return ""
		}
		if string(encoded) != string(float32Tensor(nil, computed[i:i+1]).Data) {
			return fmt.Sprintf(" (element %d: logged %s, computed %s)", i, sampleText(e), FloatRepr(float64(computed[i])))
		}
	}
	return " (the logged sample agrees; the difference is past it)"
}

func sampleText(e *Value) string {
	if e.Kind == KindString {
		return e.Str
	}
	return e.Num
}

// shortDigest: a logged digest's first 12 hex digits, as sealtrace shows them.
func shortDigest(d *Value) string {
	if text, ok := d.String(); ok && len(text) >= 12 {
		return text[:12]
	}
	return "none"
}
