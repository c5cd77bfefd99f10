package main

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/switchyard/switchyard/deploy/deploytest"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

// The arguments deploy/*.yaml gives the gateway parse and validate.
func TestDeployManifestArgs(t *testing.T) {
	for _, args := range deploytest.Args(t, "gateway") {
		var c cli
		k, err := kong.New(&c, append(options(), kong.Exit(func(int) { t.Fatal("kong tried to exit") }))...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.Parse(args); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

func TestMain(m *testing.M) { mocktest.Main(m) }

// An admin listener other hosts can reach, with no control token, stops the gateway at
// start with a non-zero exit and a message naming both ways out.
func TestInsecureAdminRefusedAtStart(t *testing.T) {
	bin := mocktest.Binary(t, "../gateway")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--http-listen-addr", "127.0.0.1:0", "--admin-listen-addr", "0.0.0.0:0").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("the gateway did not exit non-zero: %v\n%s", err, out)
	}
	for _, want := range []string{"--control-token-file", "--insecure-no-control-auth", "0.0.0.0:0"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the message does not name %s:\n%s", want, out)
		}
	}
}
