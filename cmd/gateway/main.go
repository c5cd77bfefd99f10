// Command gateway is the Switchyard gateway binary.
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

var errNotBuilt = errors.New("the gateway runtime is not built yet (see README.md, component status)")

func (*cli) Run() error { return errNotBuilt }

func main() {
	var c cli
	ctx := kong.Parse(&c,
		kong.Name("gateway"),
		kong.Description("Switchyard gateway: OpenAI-compatible LLM request router (TTFT-bucketed wait-and-widen, prompt-cache affinity, retries, streaming)."),
		kong.UsageOnError(),
		kong.DefaultEnvars("SWITCHYARD_GATEWAY"),
		kong.Vars{"version": "gateway " + version},
	)
	if err := ctx.Run(); err != nil {
		ctx.Errorf("%v", err)
		os.Exit(1)
	}
}
