// Command engine is the Switchyard engine binary.
package main

import (
	"errors"
	"os"

	"github.com/alecthomas/kong"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type cli struct {
	Version kong.VersionFlag `short:"V" help:"Print version and exit." env:"-"`
}

var errNotBuilt = errors.New("the engine runtime is not built yet (see README.md, component status)")

func (*cli) Run() error { return errNotBuilt }

func main() {
	var c cli
	ctx := kong.Parse(&c,
		kong.Name("engine"),
		kong.Description("Switchyard engine: mock OpenAI-compatible inference engine with a realistic timing model and prefix KV cache."),
		kong.UsageOnError(),
		kong.DefaultEnvars("SWITCHYARD_ENGINE"),
		kong.Vars{"version": "engine " + version},
	)
	if err := ctx.Run(); err != nil {
		ctx.Errorf("%v", err)
		os.Exit(1)
	}
}
