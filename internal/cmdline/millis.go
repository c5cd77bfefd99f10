package cmdline

import (
	"fmt"
	"math"
	"reflect"
	"time"

	"github.com/alecthomas/kong"
)

// MillisTag marks a hidden flag as the millisecond form of a renamed duration flag:
//
//	DrainTimeout   time.Duration `name:"drain-timeout" default:"30s"`
//	DrainTimeoutMs uint64        `name:"drain-timeout-ms" hidden:"" millis-of:"drain-timeout"`
//
// The old form keeps working on the command line, in its environment variable and in
// config files; ApplyMillis copies it into the duration flag.
const MillisTag = "millis-of"

// source is where a flag's value came from, in increasing precedence.
type source int

const (
	fromDefault source = iota
	fromFile
	fromEnv
	fromArgs
)

func (s source) String() string {
	return [...]string{"default", "config file", "environment", "command line"}[s]
}

// ApplyMillis sets every duration flag that has a millisecond form (MillisTag) from that
// form when it was given with higher precedence than the duration (command line >
// environment > config file > default). Both given at the same level is an error. Call
// it first in the command's Validate(*kong.Context), before the durations are used.
func ApplyMillis(kctx *kong.Context) error {
	byName := map[string]*kong.Flag{}
	for _, f := range kctx.Flags() {
		byName[f.Name] = f
	}
	for _, old := range kctx.Flags() {
		name := old.Tag.Get(MillisTag)
		if name == "" {
			continue
		}
		to, ok := byName[name]
		if !ok || to.Target.Type() != reflect.TypeFor[time.Duration]() {
			return fmt.Errorf("--%s: %s names %q, not a duration flag of this command", old.Name, MillisTag, name)
		}
		oldSrc, toSrc := sourceOf(kctx, old), sourceOf(kctx, to)
		switch {
		case oldSrc == fromDefault || oldSrc < toSrc:
			continue
		case oldSrc == toSrc:
			return fmt.Errorf("--%s and --%s (its older millisecond form) are both set in the %s; keep --%s", to.Name, old.Name, oldSrc, to.Name)
		}
		ms, err := millis(old.Target)
		if err != nil {
			return fmt.Errorf("--%s: %w", old.Name, err)
		}
		to.Target.Set(reflect.ValueOf(ms))
	}
	return nil
}

// sourceOf says where f's value came from: the parse path holds the flags given on the
// command line and those the config file resolved; environment variables are applied as
// defaults and leave no trace, so they are looked up.
func sourceOf(kctx *kong.Context, f *kong.Flag) source {
	for _, p := range kctx.Path {
		if p.Flag == f {
			if p.Resolved {
				return fromFile
			}
			return fromArgs
		}
	}
	if envSet(f) {
		return fromEnv
	}
	return fromDefault
}

// millis converts a number of milliseconds (any integer or float kind) to a duration.
func millis(v reflect.Value) (time.Duration, error) {
	var ms float64
	switch {
	case v.CanInt():
		ms = float64(v.Int())
	case v.CanUint():
		ms = float64(v.Uint())
	case v.CanFloat():
		ms = v.Float()
	default:
		return 0, fmt.Errorf("a millisecond flag must be a number, not %s", v.Type())
	}
	d := ms * float64(time.Millisecond)
	if math.IsNaN(d) || math.Abs(d) >= math.MaxInt64 {
		return 0, fmt.Errorf("%v ms is out of range", ms)
	}
	return time.Duration(math.Round(d)), nil
}
