package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/omni/client/pkg/omni/resources/omni"
	"github.com/siderolabs/omni/client/pkg/omni/resources/system"
)

// stepConnect makes the reads omnictl makes before every command: the server's SysVersion
// (its version and backend API version, which omnictl compares with its own), then, on servers
// from 1.6 on, the Notifications it prints as warnings. A server that refuses either breaks
// every omnictl command.
func stepConnect(ctx context.Context, cfg *config) (any, error) {
	st := cfg.client.Omni().State()

	sysVersion, err := safe.StateGet[*system.SysVersion](ctx, st, system.NewSysVersion(system.SysVersionID).Metadata())
	if err != nil {
		return nil, fmt.Errorf("reading the server's SysVersion: %w", err)
	}

	spec := sysVersion.TypedSpec().Value

	version, err := parseServerVersion(spec.BackendVersion)
	if err != nil {
		return nil, fmt.Errorf("the server's version %q does not parse: %w", spec.BackendVersion, err)
	}

	result := map[string]any{
		"backend_version":     spec.BackendVersion,
		"backend_api_version": spec.BackendApiVersion,
		"instance_name":       spec.InstanceName,
	}

	if version.Major > 1 || (version.Major == 1 && version.Minor >= 6) {
		notifications, listErr := safe.StateListAll[*omni.Notification](ctx, st)
		if listErr != nil {
			return result, fmt.Errorf("listing notifications (omnictl does this on servers from 1.6 on): %w", listErr)
		}

		result["notifications"] = notifications.Len()
	}

	return result, nil
}

// parseServerVersion is lenient the way omnictl is: a suffix that is not valid semver
// (e.g. "-dirty+build") is dropped before giving up.
func parseServerVersion(s string) (semver.Version, error) {
	if v, err := semver.ParseTolerant(s); err == nil {
		return v, nil
	}

	s = strings.TrimPrefix(s, "v")
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}

	return semver.ParseTolerant(s)
}
