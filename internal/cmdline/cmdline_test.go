package cmdline_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/internal/cmdline"
)

// testCLI has one flag of each kind the binaries use.
type testCLI struct {
	Common      cmdline.Flags `embed:""`
	Heartbeat   time.Duration `name:"heartbeat" default:"1s" help:"h"`
	HeartbeatMs int           `name:"heartbeat-ms" hidden:"" millis-of:"heartbeat" help:"h"`
	Name        string        `name:"name" default:"x" help:"h"`
	Models      []string      `name:"model-name" sep:"," help:"h"`
	Codes       []int         `name:"codes" sep:"," default:"429,503" help:"h"`
	Admission   bool          `name:"admission" default:"true" negatable:"" help:"h"`
	Tolerance   float64       `name:"tolerance" default:"1.25" help:"h"`
	Upstream    string        `name:"upstream" required:"" help:"h"`

	runErr error
}

func (c *testCLI) Validate(kctx *kong.Context) error { return cmdline.ApplyMillis(kctx) }
func (c *testCLI) Run() error                        { return c.runErr }

// The environment prefix of the test binary.
const prefix = "SWITCHYARD_TESTBIN_"

func options(t *testing.T, stdout, stderr *bytes.Buffer) []kong.Option {
	t.Helper()
	return append(cmdline.Options("testbin", "A test binary.", "v1"),
		kong.Exit(func(code int) { t.Fatalf("kong exited with %d", code) }), kong.Writers(stdout, stderr))
}

func parse(t *testing.T, args ...string) (*testCLI, error) {
	t.Helper()
	var c testCLI
	k, err := kong.New(&c, options(t, &bytes.Buffer{}, &bytes.Buffer{})...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.Parse(args)
	return &c, err
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// settings is what a test compares.
type settings struct {
	Heartbeat time.Duration
	Name      string
	Models    []string
	Codes     []int
	Admission bool
	Tolerance float64
	Upstream  string
	LogFormat string
}

func settingsOf(c *testCLI) settings {
	return settings{c.Heartbeat, c.Name, c.Models, c.Codes, c.Admission, c.Tolerance, c.Upstream, c.Common.LogFormat}
}

func TestConfigFileYAMLAndJSON(t *testing.T) {
	want := settings{
		Heartbeat: 250 * time.Millisecond, Name: "from-file", Models: []string{"a", "b"}, Codes: []int{500, 502},
		Admission: false, Tolerance: 2, Upstream: "http://e:1", LogFormat: "json",
	}
	for _, tc := range []struct{ name, body string }{
		{"c.yaml", "# comment\nheartbeat: 250ms\nname: from-file\nmodel_name: [a, b]\ncodes:\n  - 500\n  - 502\n" +
			"admission: false\ntolerance: 2\nupstream: http://e:1\nlog-format: json\n"},
		{"c.json", `{"heartbeat": "250ms", "name": "from-file", "model-name": ["a", "b"], "codes": [500, 502],` +
			` "admission": false, "tolerance": 2, "upstream": "http://e:1", "log_format": "json"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(t, "--config", writeFile(t, tc.name, tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, settingsOf(c)); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigFileErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"typo", "upstream: http://e:1\nhartbeat_ms: 500\n", []string{`line 2: unknown key "hartbeat_ms"`, `did you mean "heartbeat_ms"?`}},
		{"unknown", "upstream: http://e:1\nfrobnicate: 1\nother: 2\n", []string{`unknown key "frobnicate"`, `unknown key "other"`}},
		{"dash and underscore", "upstream: http://e:1\nmodel_name: a\nmodel-name: b\n", []string{`line 3: "model-name" sets --model-name again (first set by "model_name")`}},
		{"same key twice", "name: a\nname: b\n", []string{`line 2: "name" sets --name again`}},
		{"nested", "upstream:\n  url: http://e:1\n", []string{`"upstream": want a value or a list of values, not a mapping`}},
		{"no value", "upstream:\n", []string{`"upstream": no value`}},
		{"not a mapping", "- a\n- b\n", []string{"want a mapping of flag names to values"}},
		{"config in config", "config: other.yaml\n", []string{`unknown key "config"`}},
		{"bad value", "upstream: http://e:1\nheartbeat: 10\n", []string{"--heartbeat", `"10"`}},
		{"bad json", `{"upstream": "http://e:1"`, []string{"config file", "did not find expected"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, "--config", writeFile(t, "c.yaml", tc.body))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	if _, err := parse(t, "--config", filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v, want an error naming it", err)
	}
}

// A flag's value comes from the command line, else its environment variable, else the
// config file, else its default.
func TestPrecedence(t *testing.T) {
	file := writeFile(t, "c.yaml", "upstream: http://e:1\nname: file\nheartbeat: 3s\n")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"default", []string{"--upstream", "u"}, nil, "x"},
		{"file", []string{"--config", file}, nil, "file"},
		{"env beats file", []string{"--config", file}, map[string]string{prefix + "NAME": "env"}, "env"},
		{"flag beats env and file", []string{"--config", file, "--name", "flag"}, map[string]string{prefix + "NAME": "env"}, "flag"},
		{"config file from env", nil, map[string]string{prefix + "CONFIG": file}, "file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := parse(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if c.Name != tc.want {
				t.Errorf("name %q, want %q", c.Name, tc.want)
			}
		})
	}
}

// The hidden millisecond form of a renamed duration flag still works everywhere the
// duration does, and the more specific source wins.
func TestMillisecondForm(t *testing.T) {
	msFile := writeFile(t, "ms.yaml", "upstream: u\nheartbeat_ms: 700\n")
	durFile := writeFile(t, "d.yaml", "upstream: u\nheartbeat: 4s\n")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want time.Duration
	}{
		{"default", []string{"--upstream", "u"}, nil, time.Second},
		{"duration flag", []string{"--upstream", "u", "--heartbeat", "1.5s"}, nil, 1500 * time.Millisecond},
		{"ms flag", []string{"--upstream", "u", "--heartbeat-ms", "250"}, nil, 250 * time.Millisecond},
		{"ms env", []string{"--upstream", "u"}, map[string]string{prefix + "HEARTBEAT_MS": "300"}, 300 * time.Millisecond},
		{"ms in file", []string{"--config", msFile}, nil, 700 * time.Millisecond},
		{"ms flag beats duration in file", []string{"--config", durFile, "--heartbeat-ms", "50"}, nil, 50 * time.Millisecond},
		{"duration flag beats ms env", []string{"--upstream", "u", "--heartbeat", "2s"}, map[string]string{prefix + "HEARTBEAT_MS": "300"}, 2 * time.Second},
		{"ms env beats duration in file", []string{"--config", durFile}, map[string]string{prefix + "HEARTBEAT_MS": "300"}, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := parse(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if c.Heartbeat != tc.want {
				t.Errorf("heartbeat %v, want %v", c.Heartbeat, tc.want)
			}
		})
	}
	_, err := parse(t, "--upstream", "u", "--heartbeat", "1s", "--heartbeat-ms", "5")
	if err == nil || !strings.Contains(err.Error(), "--heartbeat and --heartbeat-ms") {
		t.Errorf("both forms on the command line: %v, want an error naming both", err)
	}
}

func TestRunExitCodes(t *testing.T) {
	bad := writeFile(t, "bad.yaml", "upstream: u\nhartbeat_ms: 5\n")
	for _, tc := range []struct {
		name    string
		args    []string
		runErr  error
		want    int
		message string
	}{
		{"ok", []string{"--upstream", "u"}, nil, cmdline.ExitOK, ""},
		{"unknown flag", []string{"--upstream", "u", "--nope"}, nil, cmdline.ExitUsage, "unknown flag --nope"},
		{"missing required flag", nil, nil, cmdline.ExitUsage, "--upstream"},
		{"bad enum", []string{"--upstream", "u", "--log-format", "xml"}, nil, cmdline.ExitUsage, "--log-format"},
		{"unknown config key", []string{"--upstream", "u", "--config", bad}, nil, cmdline.ExitUsage, `unknown key "hartbeat_ms"`},
		{"runtime failure", []string{"--upstream", "u"}, errors.New("listen: address in use"), cmdline.ExitFailure, "address in use"},
		{"configuration error at start", []string{"--upstream", "u"}, cmdline.Config(errors.New("tls: no certificate")), cmdline.ExitUsage, "no certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			exited := -1
			c := testCLI{runErr: tc.runErr}
			opts := append(cmdline.Options("testbin", "A test binary.", "v1"),
				kong.Exit(func(code int) { exited = code }), kong.Writers(&stdout, &stderr))
			got := cmdline.Run(&c, tc.args, opts...)
			if got != tc.want {
				t.Errorf("exit status %d, want %d; stderr:\n%s", got, tc.want, stderr.String())
			}
			if exited != -1 && exited != tc.want {
				t.Errorf("kong exited with %d, Run returned %d", exited, got)
			}
			if !strings.Contains(stderr.String(), tc.message) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tc.message)
			}
		})
	}
}

func TestHelpNamesExitStatusesAndCommonFlags(t *testing.T) {
	var stdout bytes.Buffer
	var c testCLI
	exited := -1
	opts := append(cmdline.Options("testbin", "A test binary.", "v1"), kong.Exit(func(code int) { exited = code }),
		kong.Writers(&stdout, &bytes.Buffer{}))
	k, err := kong.New(&c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = k.Parse([]string{"--help"})
	if exited != 0 {
		t.Errorf("--help exited with %d", exited)
	}
	for _, want := range []string{"Exit status: 0 ok", "(nothing started)", "--config=FILE", "--log-format", "--log-level", "$SWITCHYARD_TESTBIN_HEARTBEAT"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("--help does not show %q:\n%s", want, stdout.String())
		}
	}
	if strings.Contains(stdout.String(), "--heartbeat-ms") {
		t.Error("--help shows the hidden millisecond form")
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("x"), 1},
		{cmdline.Config(errors.New("x")), 2},
		{errors.Join(errors.New("a"), cmdline.Config(errors.New("b"))), 2},
	} {
		if got := cmdline.ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	if cmdline.Config(nil) != nil {
		t.Error("Config(nil) != nil")
	}
}

type subCLI struct {
	Common cmdline.Flags `embed:""`
	Run    struct {
		Out string `name:"out" help:"h"`
	} `cmd:"" help:"h"`
	Drive struct {
		Target string `name:"target" help:"h"`
	} `cmd:"" help:"h"`
}

// With subcommands, a file may set the flags of the selected command and the global ones.
func TestConfigFileKeysOfTheSelectedCommand(t *testing.T) {
	file := writeFile(t, "c.yaml", "out: dir\nlog_level: debug\n")
	var c subCLI
	k, err := kong.New(&c, options(t, &bytes.Buffer{}, &bytes.Buffer{})...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Parse([]string{"run", "--config", file}); err != nil {
		t.Fatal(err)
	}
	if c.Run.Out != "dir" || c.Common.LogLevel != "debug" {
		t.Errorf("run: out %q, log level %q; want dir, debug", c.Run.Out, c.Common.LogLevel)
	}
	if _, err := k.Parse([]string{"drive", "--config", file}); err == nil || !strings.Contains(err.Error(), `unknown key "out"`) {
		t.Errorf("drive with run's key: %v, want unknown key out", err)
	}
}
