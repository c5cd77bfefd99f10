package cmdline

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/alecthomas/kong"
	"go.yaml.in/yaml/v3"
)

// File is the --config flag: a YAML or JSON file (JSON is YAML) holding one flat mapping
// of long flag names, with underscores or dashes, to values written as on the command
// line (30s, 8, true, text); a list value is a repeatable flag's values. Keys must be
// flags of the selected command: an unknown key, a key given twice (heartbeat_ms and
// heartbeat-ms) or a nested mapping is an error naming the key. A flag set on the command
// line or through its environment variable ignores the file's value.
type File string

// BeforeResolve loads the file and adds it as a resolver (a kong hook; it also runs when
// the path comes from the flag's environment variable).
func (File) BeforeResolve(kctx *kong.Context, trace *kong.Path) error {
	path, _ := kctx.FlagValue(trace.Flag).(File)
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(string(path))
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	r, err := parseFile(data, kctx.Flags())
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	kctx.AddResolver(r)
	return nil
}

// parseFile maps the file's keys to flags, one error per bad key.
func parseFile(data []byte, flags []*kong.Flag) (fileResolver, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	r := fileResolver{}
	if len(doc.Content) == 0 { // empty file
		return r, nil
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: want a mapping of flag names to values", top.Line)
	}
	byKey := map[string]*kong.Flag{}
	var names []string
	for _, f := range flags {
		if f.Name == "help" || f.Name == "version" || f.Name == "config" {
			continue
		}
		for _, n := range append([]string{f.Name}, f.Aliases...) {
			byKey[n] = f
			names = append(names, strings.ReplaceAll(n, "-", "_"))
		}
	}
	seen := map[*kong.Flag]string{}
	var errs []error
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		f, ok := byKey[strings.ReplaceAll(k.Value, "_", "-")]
		switch {
		case !ok:
			errs = append(errs, unknownKey(k, names))
			continue
		case seen[f] != "":
			errs = append(errs, fmt.Errorf("line %d: %q sets --%s again (first set by %q)", k.Line, k.Value, f.Name, seen[f]))
			continue
		}
		seen[f] = k.Value
		val, err := value(v, f)
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %q: %w", v.Line, k.Value, err))
			continue
		}
		r[f] = val
	}
	return r, errors.Join(errs...)
}

// unknownKey names the key, with the closest known key when one is near.
func unknownKey(k *yaml.Node, names []string) error {
	want := strings.ReplaceAll(k.Value, "-", "_")
	best, bestDist := "", 3 // suggest only within two edits
	for _, n := range names {
		if d := editDistance(want, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	if best != "" {
		return fmt.Errorf("line %d: unknown key %q (did you mean %q?)", k.Line, k.Value, best)
	}
	return fmt.Errorf("line %d: unknown key %q: not a flag of this command (see --help)", k.Line, k.Value)
}

// value is node as the text the flag would get on the command line.
func value(node *yaml.Node, f *kong.Flag) (string, error) {
	switch node.Kind {
	case yaml.ScalarNode:
		if node.Tag == "!!null" {
			return "", errors.New("no value")
		}
		return node.Value, nil
	case yaml.SequenceNode:
		if f.Tag.Sep == -1 {
			return "", fmt.Errorf("--%s takes one value, not a list", f.Name)
		}
		items := make([]string, 0, len(node.Content))
		for _, item := range node.Content {
			if item.Kind != yaml.ScalarNode {
				return "", errors.New("a list may hold only plain values")
			}
			items = append(items, item.Value)
		}
		return kong.JoinEscaped(items, f.Tag.Sep), nil
	case yaml.DocumentNode, yaml.MappingNode, yaml.AliasNode:
	}
	return "", errors.New("want a value or a list of values, not a mapping")
}

// fileResolver holds the file's value of each flag it sets.
type fileResolver map[*kong.Flag]string

// Validate implements kong.Resolver; the keys were checked when the file was parsed.
func (fileResolver) Validate(*kong.Application) error { return nil }

// Resolve returns the file's value of f unless f's environment variable is set: the
// environment beats the file (kong applies environment variables before resolvers, as
// defaults, so without this the file would win).
func (r fileResolver) Resolve(_ *kong.Context, _ *kong.Path, f *kong.Flag) (any, error) {
	v, ok := r[f]
	if !ok || envSet(f) {
		return nil, nil //nolint:nilnil // kong: no value from this resolver
	}
	return v, nil
}

// envSet says whether one of f's environment variables is set (even empty: kong then
// uses it).
func envSet(f *kong.Flag) bool {
	return slices.ContainsFunc(f.Tag.Envs, func(e string) bool {
		_, ok := os.LookupEnv(e)
		return ok
	})
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, sub)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
