// Command pylon is the Switchyard pylon binary.
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

var errNotBuilt = errors.New("the pylon runtime is not built yet (see README.md, component status)")

func (*cli) Run() error { return errNotBuilt }

func main() {
	var c cli
	ctx := kong.Parse(&c,
		kong.Name("pylon"),
		kong.Description("Switchyard pylon: sidecar next to one inference engine (registration, load stats, local queue admission, stream relay)."),
		kong.UsageOnError(),
		kong.DefaultEnvars("SWITCHYARD_PYLON"),
		kong.Vars{"version": "pylon " + version},
	)
	if err := ctx.Run(); err != nil {
		ctx.Errorf("%v", err)
		os.Exit(1)
	}
}
