// Package cmdline is the command-line plumbing the Switchyard binaries share: the flags
// every binary has (--config, --log-format, --log-level, --version), the YAML/JSON config
// file and its precedence (command line > environment > file), the millisecond forms of
// renamed duration flags, and the exit statuses (0 ok, 1 failure, 2 usage or
// configuration error).
package cmdline

import (
	"errors"
	"log/slog"
	"os"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/switchyard/switchyard/internal/logx"
)

// Exit statuses of every binary.
const (
	ExitOK      = 0 // the command finished (a server: shut down cleanly)
	ExitFailure = 1 // the command failed while running
	ExitUsage   = 2 // bad command line, environment variable or config file: nothing started
)

// exitHelp is appended to every binary's --help description.
const exitHelp = "Exit status: 0 ok (a server: clean shutdown); 1 failure while running; " +
	"2 invalid flag, environment variable or config file (nothing started)."

// Flags are the flags every binary has, embedded in its command-line struct with
// `embed:""`.
type Flags struct {
	Version   kong.VersionFlag `short:"V" env:"-" help:"Print version and exit."`
	Config    File             `name:"config" placeholder:"FILE" help:"YAML or JSON file of flag values, keyed by long flag name with underscores or dashes (log_level: debug). Command-line flags, then environment variables, override it; an unknown key stops start-up with exit status 2."`
	LogFormat string           `name:"log-format" enum:"text,json" default:"text" help:"Log format on stderr: text (key=value pairs) or json (one object per line)."`
	LogLevel  string           `name:"log-level" enum:"debug,info,warn,error" default:"info" help:"Least severe level logged: debug, info, warn or error."`
}

// Logger returns the process logger the flags describe, writing to stderr.
func (f *Flags) Logger() (*slog.Logger, error) {
	return logx.New(os.Stderr, f.LogFormat, f.LogLevel)
}

// Options are the kong options of binary name: its help description (with the exit
// statuses appended), --version output, short usage on errors, and an environment
// variable SWITCHYARD_<NAME>_<FLAG> for every flag (dashes become underscores).
func Options(name, description, version string) []kong.Option {
	return []kong.Option{
		kong.Name(name),
		kong.Description(description + "\n\n" + exitHelp),
		kong.ShortUsageOnError(),
		kong.DefaultEnvars("SWITCHYARD_" + strings.ToUpper(name)),
		kong.Vars{"version": name + " " + version},
	}
}

// Main parses the process's arguments into cli, runs the selected command and exits
// with its status (see Run).
func Main(cli any, options ...kong.Option) {
	os.Exit(Run(cli, os.Args[1:], options...))
}

// Run parses args into cli and runs the selected command (its Run method). It returns
// ExitUsage when parsing, validation or the config file fails (the usage line and the
// error are printed) and otherwise the command's status: ExitOK, ExitUsage for an error
// marked with Config, ExitFailure for any other error (printed). --help and --version
// print and exit 0 through kong's Exit (os.Exit unless kong.Exit replaces it).
func Run(cli any, args []string, options ...kong.Option) int {
	k, err := kong.New(cli, options...)
	if err != nil {
		panic(err) // the flag definitions are wrong: a bug
	}
	kctx, err := k.Parse(args)
	if err != nil {
		k.FatalIfErrorf(usageError{err})
		return ExitUsage
	}
	if err := kctx.Run(); err != nil {
		k.Errorf("%v", err)
		return ExitCode(err)
	}
	return ExitOK
}

// Config marks err, found while building the service from its flags (a file named by a
// flag that does not load, settings that contradict each other), as a configuration
// error: Run exits with ExitUsage. nil stays nil.
func Config(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

// ExitCode is the exit status for err returned by a command: ExitOK for nil, ExitUsage
// for a configuration error (Config), ExitFailure otherwise.
func ExitCode(err error) int {
	var u usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &u):
		return ExitUsage
	default:
		return ExitFailure
	}
}

// usageError is a usage or configuration error: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// ExitCode makes kong exit with ExitUsage.
func (usageError) ExitCode() int { return ExitUsage }
