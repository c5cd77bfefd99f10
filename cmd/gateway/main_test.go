package main

import (
	"testing"

	"github.com/alecthomas/kong"

	"github.com/switchyard/switchyard/deploy/deploytest"
)

// The arguments deploy/*.yaml gives the gateway parse and validate.
func TestDeployManifestArgs(t *testing.T) {
	for _, args := range deploytest.Args(t, "gateway") {
		var c cli
		k, err := kong.New(&c, kong.Name("gateway"), kong.Exit(func(int) { t.Fatal("kong tried to exit") }))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.Parse(args); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}
