// Command omni-client-check drives Omni's own Go client (github.com/siderolabs/omni/client)
// against an Omni API endpoint, step by step, the way omnictl and an operator use it, and
// prints one JSON line per step. omni-operator's tests point it at omni-sim: when Omni's
// own client and the emulator disagree, the emulator is what is wrong.
//
// Usage:
//
//	OMNI_SERVICE_ACCOUNT_KEY=... omni-client-check --endpoint http://127.0.0.1:PORT \
//	    [--template FILE] [--cluster NAME] STEP...
//
// The key is read from the environment only: a secret in argv is visible to every user of
// the machine. Steps run in the order given; the first failure ends the run with exit code 1
// (usage errors exit with 2). Every step has its own deadline and the whole run has one, so a
// hung server cannot hang the caller.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/fatih/color"
	"github.com/siderolabs/omni/client/pkg/client"
)

// keyEnv names the variable holding the base64 service-account key, as omnictl reads it.
const keyEnv = "OMNI_SERVICE_ACCOUNT_KEY"

// report is the JSON line printed for every step.
type report struct {
	Step   string `json:"step"`
	OK     bool   `json:"ok"`
	Millis int64  `json:"ms"`
	Result any    `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

// config is what the steps share.
type config struct {
	client       *client.Client
	endpoint     string
	key          string // for omnictl's commands, which read it from the environment
	templatePath string
	cluster      string
	stepTimeout  time.Duration
}

type step struct {
	name  string
	about string
	run   func(ctx context.Context, cfg *config) (any, error)
}

// steps lists every step in the order a full run would use them.
var steps = []step{
	{"connect", "read what omnictl reads before every command (SysVersion, Notifications)", stepConnect},
	{"list", "list Cluster resources (connects and authenticates)", stepList},
	{"versions", "list the TalosVersions and KubernetesVersions catalogue, decoded by the client", stepVersions},
	{"sync", "sync the cluster template (omnictl cluster template sync)", stepSync},
	{"resync", "compute a sync of the unchanged template again: nothing must be left to do", stepResync},
	{"get", "read back the cluster's resources (sets, nodes, patches, extensions, manifests, checks, kernel args)", stepGet},
	{"status", "wait for the template's cluster to be healthy (omnictl cluster template status --wait)", stepStatus},
	{"kubeconfig", "mint a service-account kubeconfig for the cluster and parse it", stepKubeconfig},
	{"delete", "delete the template's resources (omnictl cluster template delete) and see them go", stepDelete},
	{"serviceaccount", "create a Reader service account with a key generated as omnictl does (needs Admin), then use it", stepServiceAccount},
	{"definitions", "list the ResourceDefinitions omnictl resolves type names with and compare them with Omni's own", stepDefinitions},
	{"yamlspec", "check the yaml_spec of every readable resource against the YAML Omni makes of its proto_spec", stepYAMLSpec},
	{"omnictl", "run omnictl's get (table, YAML, JSON) and delete commands on the cluster, in this process", stepOmnictl},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("omni-client-check", flag.ContinueOnError)
	flags.SetOutput(stderr)

	endpoint := flags.String("endpoint", "", "Omni API endpoint, e.g. http://127.0.0.1:8099 (h2c) or https://omni.example")
	templatePath := flags.String("template", "", "cluster template file (steps sync, resync, status, delete)")
	cluster := flags.String("cluster", "", "cluster name (default: the template's)")
	stepTimeout := flags.Duration("step-timeout", 25*time.Second, "deadline of each step")
	total := flags.Duration("timeout", 55*time.Second, "deadline of the whole run")
	version := flags.Bool("version", false, "print the Omni client module version this program is built with, and exit")

	flags.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s=<key> omni-client-check --endpoint URL [flags] STEP...\n\nsteps:\n", keyEnv)

		for _, s := range steps {
			fmt.Fprintf(stderr, "  %-10s %s\n", s.name, s.about)
		}

		fmt.Fprintln(stderr, "\nflags:")
		flags.PrintDefaults()
	}

	if err := flags.Parse(args); err != nil {
		return 2
	}

	// scripts/install-test-tools runs this to tell a usable build from a broken one.
	if *version {
		fmt.Fprintln(stdout, "omni-client-check", clientModuleVersion())

		return 0
	}

	usage := func(msg string) int {
		fmt.Fprintf(stderr, "omni-client-check: %s\n", msg)
		flags.Usage()

		return 2
	}

	if *endpoint == "" {
		return usage("--endpoint is required")
	}

	key := strings.TrimSpace(os.Getenv(keyEnv))
	if key == "" {
		return usage(keyEnv + " is not set (the key is never taken from the command line)")
	}

	// The client falls back to reading this variable itself; it has the key already, and no
	// child process should inherit it. The omnictl step sets it again only while omnictl runs.
	os.Unsetenv(keyEnv) //nolint:errcheck

	if flags.NArg() == 0 {
		return usage("no step given")
	}

	selected := make([]step, 0, flags.NArg())

	for _, name := range flags.Args() {
		i := indexOfStep(name)
		if i < 0 {
			return usage(fmt.Sprintf("unknown step %q", name))
		}

		selected = append(selected, steps[i])
	}

	cfg := &config{endpoint: *endpoint, key: key, templatePath: *templatePath, cluster: *cluster, stepTimeout: *stepTimeout}

	if cfg.cluster == "" && cfg.templatePath != "" {
		name, err := templateClusterName(cfg.templatePath)
		if err != nil {
			return usage(err.Error())
		}

		cfg.cluster = name
	}

	// The template operations colour their progress lines only for a terminal; the steps parse
	// them, so never colour.
	color.NoColor = true

	c, err := client.New(*endpoint, client.WithServiceAccount(key))
	if err != nil {
		fmt.Fprintf(stderr, "omni-client-check: creating the client: %v\n", err)

		return 1
	}
	defer c.Close() //nolint:errcheck

	cfg.client = c

	ctx, cancel := context.WithTimeout(context.Background(), *total)
	defer cancel()

	out := json.NewEncoder(stdout)

	for _, s := range selected {
		started := time.Now()

		stepCtx, stepCancel := context.WithTimeout(ctx, cfg.stepTimeout)
		result, err := s.run(stepCtx, cfg)
		stepCancel()

		r := report{Step: s.name, OK: err == nil, Millis: time.Since(started).Milliseconds(), Result: result}
		if err != nil {
			r.Error = err.Error()
		}

		if encErr := out.Encode(r); encErr != nil {
			fmt.Fprintf(stderr, "omni-client-check: writing the report: %v\n", encErr)

			return 1
		}

		if err != nil {
			fmt.Fprintf(stderr, "omni-client-check: step %s failed: %v\n", s.name, err)

			return 1
		}
	}

	return 0
}

// clientModuleVersion is the version of github.com/siderolabs/omni/client linked in, from the
// build information the Go linker records.
func clientModuleVersion() string {
	const module = "github.com/siderolabs/omni/client"

	info, ok := debug.ReadBuildInfo()
	if !ok {
		return module + " (unknown version)"
	}

	for _, dep := range info.Deps {
		if dep.Path == module {
			return module + " " + dep.Version
		}
	}

	return module + " (not linked)"
}

func indexOfStep(name string) int {
	for i, s := range steps {
		if s.name == name {
			return i
		}
	}

	return -1
}

// errNeedTemplate is returned by steps that work on a template when none was given.
var errNeedTemplate = errors.New("this step needs --template")
