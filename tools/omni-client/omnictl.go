package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/siderolabs/go-api-signature/pkg/serviceaccount"
	"github.com/siderolabs/omni/client/pkg/omnictl"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v4"
)

// endpointEnv is where omnictl reads the API endpoint from when no config context names one.
const endpointEnv = "OMNI_ENDPOINT"

// omnictlMu serialises runs of omnictl's command tree: it keeps its flags in package variables
// and writes to the process's standard output and error, which a run borrows.
var omnictlMu sync.Mutex

// omnictlOutput is what one omnictl command printed. Output is parsed by format: a table into
// rows of cells, YAML into its documents, JSON into its objects.
type omnictlOutput struct {
	Args   []string `json:"args"`
	Format string   `json:"format"`
	Output any      `json:"output"`
	Stderr []string `json:"stderr,omitempty"`
}

// stepOmnictl runs omnictl's own commands (its cobra command tree, in this process) against the
// endpoint: resource definitions and the template's cluster by type name and alias, as a table,
// YAML and JSON, then `delete` of the cluster. They resolve every type name through the
// server's ResourceDefinitions and print what the server puts in yaml_spec, so a server that
// publishes no definitions or leaves yaml_spec empty fails here.
func stepOmnictl(ctx context.Context, cfg *config) (any, error) {
	if err := needCluster(cfg); err != nil {
		return nil, err
	}

	commands := [][]string{
		{"get", "rd"},
		{"get", "clusters"},
		{"get", "cluster", cfg.cluster, "-o", "json"},
		{"get", "machinesets", "-o", "yaml", "-l", "omni.sidero.dev/cluster=" + cfg.cluster},
		{"get", "clusterstatus", cfg.cluster, "-o", "yaml"},
		{"get", "talosversions"},
		{"delete", "cluster", cfg.cluster},
		{"get", "clusters", "-o", "json"},
	}

	outputs := make([]omnictlOutput, 0, len(commands))

	for _, args := range commands {
		stdout, stderr, err := runOmnictl(ctx, cfg, args)
		if err != nil {
			return map[string]any{"commands": outputs}, fmt.Errorf("omnictl %s: %w (stderr: %s)", strings.Join(args, " "), err, strings.TrimSpace(stderr))
		}

		out, err := parseOmnictlOutput(args, stdout)
		if err != nil {
			return map[string]any{"commands": outputs}, fmt.Errorf("omnictl %s: parsing its output: %w\n%s", strings.Join(args, " "), err, stdout)
		}

		out.Stderr = stderrLines(stderr)
		outputs = append(outputs, out)
	}

	return map[string]any{"commands": outputs}, nil
}

// runOmnictl runs omnictl with args and returns what it wrote to standard output and error. The
// key reaches it through the environment, as omnictl reads it, and only for the run; the endpoint
// likewise, and a throwaway omniconfig keeps the user's own out of it.
func runOmnictl(ctx context.Context, cfg *config, args []string) (string, string, error) {
	omnictlMu.Lock()
	defer omnictlMu.Unlock()

	dir, err := os.MkdirTemp("", "omni-client-check-omnictl-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(dir) //nolint:errcheck

	// A library build carries no version of its own (version.API is 0): omnictl then skips the
	// API version check and says so on its standard error, which is left as it is.

	restoreEnv := setEnv(map[string]string{
		keyEnv:      cfg.key,
		endpointEnv: cfg.endpoint,
		// Read before OMNI_SERVICE_ACCOUNT_KEY; an inherited one must not win.
		serviceaccount.SideroServiceAccountKeyEnvVar: "",
	})
	defer restoreEnv()

	root := omnictl.RootCmd

	cmd, _, err := root.Find(args)
	if err != nil {
		return "", "", err
	}

	resetFlags(cmd)

	root.SetArgs(append([]string{"--omniconfig", filepath.Join(dir, "config")}, args...))

	var stdout, stderr string

	done := make(chan error, 1)

	restoreOut, err := captureStdio(&stdout, &stderr)
	if err != nil {
		return "", "", err
	}

	// omnictl runs on a context of its own; the step's deadline is kept here instead.
	go func() {
		done <- root.Execute()
	}()

	select {
	case err = <-done:
	case <-ctx.Done():
		err = fmt.Errorf("did not finish: %w", ctx.Err())
	}

	restoreOut()

	return stdout, stderr, err
}

// setEnv sets (or, for an empty value, unsets) variables and returns what undoes it.
func setEnv(vars map[string]string) func() {
	type saved struct {
		value string
		set   bool
	}

	old := make(map[string]saved, len(vars))

	for name, value := range vars {
		v, ok := os.LookupEnv(name)
		old[name] = saved{v, ok}

		if value == "" {
			os.Unsetenv(name) //nolint:errcheck
		} else {
			os.Setenv(name, value) //nolint:errcheck
		}
	}

	return func() {
		for name, s := range old {
			if s.set {
				os.Setenv(name, s.value) //nolint:errcheck
			} else {
				os.Unsetenv(name) //nolint:errcheck
			}
		}
	}
}

// resetFlags puts the flags of cmd and its parents back to their defaults: cobra keeps the
// values of an earlier run in the same process.
func resetFlags(cmd *cobra.Command) {
	reset := func(f *pflag.Flag) {
		if strings.HasSuffix(f.Value.Type(), "Slice") || strings.HasSuffix(f.Value.Type(), "Array") {
			return
		}

		f.Value.Set(f.DefValue) //nolint:errcheck
		f.Changed = false
	}

	for c := cmd; c != nil; c = c.Parent() {
		c.Flags().VisitAll(reset)
		c.PersistentFlags().VisitAll(reset)
	}
}

// captureStdio points the process's standard output and error at pipes whose contents end up in
// stdout and stderr once the returned function has run.
func captureStdio(stdout, stderr *string) (func(), error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}

	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close() //nolint:errcheck
		outW.Close() //nolint:errcheck

		return nil, err
	}

	var outBuf, errBuf bytes.Buffer

	var wg sync.WaitGroup

	wg.Add(2)

	go func() { defer wg.Done(); io.Copy(&outBuf, outR) }() //nolint:errcheck
	go func() { defer wg.Done(); io.Copy(&errBuf, errR) }() //nolint:errcheck

	oldOut, oldErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = outW, errW

	return func() {
		os.Stdout, os.Stderr = oldOut, oldErr

		outW.Close() //nolint:errcheck
		errW.Close() //nolint:errcheck
		wg.Wait()
		outR.Close() //nolint:errcheck
		errR.Close() //nolint:errcheck

		*stdout, *stderr = outBuf.String(), errBuf.String()
	}, nil
}

// tableGap separates the cells of omnictl's tables (a tab writer padding cells with three
// spaces); a single space belongs to a cell ("TALOS VERSION").
var tableGap = regexp.MustCompile(`\s{3,}`)

func parseOmnictlOutput(args []string, stdout string) (omnictlOutput, error) {
	out := omnictlOutput{Args: args, Format: "table"}

	for i, a := range args {
		if a == "-o" && i+1 < len(args) {
			out.Format = args[i+1]
		}
	}

	if args[0] == "delete" {
		out.Format = "none"
		out.Output = strings.TrimSpace(stdout)

		return out, nil
	}

	switch out.Format {
	case "table":
		rows := [][]string{}

		for line := range strings.SplitSeq(stdout, "\n") {
			if strings.TrimSpace(line) != "" {
				rows = append(rows, tableGap.Split(strings.TrimSpace(line), -1))
			}
		}

		out.Output = rows
	case "yaml":
		docs, err := decodeAll(yaml.NewDecoder(strings.NewReader(stdout)))
		if err != nil {
			return out, err
		}

		out.Output = docs
	case "json":
		objects, err := decodeAll(json.NewDecoder(strings.NewReader(stdout)))
		if err != nil {
			return out, err
		}

		out.Output = objects
	}

	return out, nil
}

// decodeAll reads every value of a stream: YAML documents or concatenated JSON objects.
func decodeAll(dec interface{ Decode(v any) error }) ([]any, error) {
	values := []any{}

	for {
		var v any
		if err := dec.Decode(&v); err != nil {
			if errors.Is(err, io.EOF) {
				return values, nil
			}

			return values, err
		}

		values = append(values, v)
	}
}

// stderrLines keeps what omnictl itself printed; the client's retry logger's lines (JSON-ish
// zap output) are noise here.
func stderrLines(stderr string) []string {
	var lines []string

	for line := range strings.SplitSeq(stderr, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}

	return lines
}
