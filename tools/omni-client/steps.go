package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/omni/client/pkg/client/management"
	"github.com/siderolabs/omni/client/pkg/diff"
	"github.com/siderolabs/omni/client/pkg/omni/resources"
	"github.com/siderolabs/omni/client/pkg/omni/resources/omni"
	"github.com/siderolabs/omni/client/pkg/template"
	"github.com/siderolabs/omni/client/pkg/template/operations"
	"go.yaml.in/yaml/v4"
	"k8s.io/client-go/tools/clientcmd"
)

// Kubeconfig request parameters of the kubeconfig step: the shape an operator asks for.
const (
	kubeconfigTTL   = time.Hour
	kubeconfigUser  = "omni-client-check"
	kubeconfigGroup = "system:masters"
)

// templateClusterName reads the cluster name a template declares.
func templateClusterName(path string) (string, error) {
	tmpl, root, err := loadTemplate(path)
	if err != nil {
		return "", err
	}

	root.Close() //nolint:errcheck

	return tmpl.ClusterName()
}

// openTemplate opens the template file and, as omnictl does, a root confining the files the
// template may reference to the template's directory.
func openTemplate(path string) (*os.File, *os.Root, error) {
	if path == "" {
		return nil, nil, errNeedTemplate
	}

	root, err := os.OpenRoot(filepath.Dir(path))
	if err != nil {
		return nil, nil, err
	}

	f, err := os.Open(path)
	if err != nil {
		root.Close() //nolint:errcheck

		return nil, nil, err
	}

	return f, root, nil
}

func loadTemplate(path string) (*template.Template, *os.Root, error) {
	f, root, err := openTemplate(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close() //nolint:errcheck

	tmpl, err := template.Load(f, template.WithRoot(root))
	if err != nil {
		root.Close() //nolint:errcheck

		return nil, nil, fmt.Errorf("loading the template: %w", err)
	}

	if err = tmpl.Validate(); err != nil {
		root.Close() //nolint:errcheck

		return nil, nil, fmt.Errorf("validating the template: %w", err)
	}

	return tmpl, root, nil
}

// withTemplate runs one of the client's template operations on the template file and returns
// the progress lines it printed (`* creating ...`), without their `* ` marker.
func withTemplate(path string, op func(f *os.File, out *bytes.Buffer, root *os.Root) error) ([]string, error) {
	f, root, err := openTemplate(path)
	if err != nil {
		return nil, err
	}
	defer root.Close() //nolint:errcheck
	defer f.Close()    //nolint:errcheck

	var out bytes.Buffer

	err = op(f, &out, root)

	var lines []string

	scanner := bufio.NewScanner(&out)
	for scanner.Scan() {
		if line := strings.TrimSpace(scanner.Text()); line != "" {
			lines = append(lines, strings.TrimPrefix(line, "* "))
		}
	}

	return lines, err
}

func needCluster(cfg *config) error {
	if cfg.cluster == "" {
		return errors.New("this step needs --cluster or --template")
	}

	return nil
}

func stepList(ctx context.Context, cfg *config) (any, error) {
	clusters, err := safe.StateListAll[*omni.Cluster](ctx, cfg.client.Omni().State())
	if err != nil {
		return nil, fmt.Errorf("listing clusters: %w", err)
	}

	ids := []string{}
	for c := range clusters.All() {
		ids = append(ids, c.Metadata().ID())
	}

	return map[string]any{"clusters": ids}, nil
}

func stepVersions(ctx context.Context, cfg *config) (any, error) {
	st := cfg.client.Omni().State()

	talos, err := safe.StateListAll[*omni.TalosVersion](ctx, st)
	if err != nil {
		return nil, fmt.Errorf("listing Talos versions: %w", err)
	}

	type talosVersion struct {
		Version     string   `json:"version"`
		Kubernetes  []string `json:"kubernetes"`
		Deprecated  bool     `json:"deprecated"`
		Unsupported bool     `json:"unsupported"`
	}

	talosVersions := []talosVersion{}

	for v := range talos.All() {
		spec := v.TypedSpec().Value
		// omnictl and the UI key the catalogue by ID and show the spec: both must agree.
		if spec.Version != v.Metadata().ID() {
			return nil, fmt.Errorf("TalosVersion %q carries version %q in its spec", v.Metadata().ID(), spec.Version)
		}

		talosVersions = append(talosVersions, talosVersion{
			Version:     spec.Version,
			Kubernetes:  spec.CompatibleKubernetesVersions,
			Deprecated:  spec.Deprecated,
			Unsupported: spec.Unsupported,
		})
	}

	kube, err := safe.StateListAll[*omni.KubernetesVersion](ctx, st)
	if err != nil {
		return nil, fmt.Errorf("listing Kubernetes versions: %w", err)
	}

	kubeVersions := []string{}

	for v := range kube.All() {
		if got := v.TypedSpec().Value.Version; got != v.Metadata().ID() {
			return nil, fmt.Errorf("KubernetesVersion %q carries version %q in its spec", v.Metadata().ID(), got)
		}

		kubeVersions = append(kubeVersions, v.Metadata().ID())
	}

	if len(talosVersions) == 0 || len(kubeVersions) == 0 {
		return nil, fmt.Errorf("empty version catalogue: %d Talos, %d Kubernetes versions", len(talosVersions), len(kubeVersions))
	}

	return map[string]any{"talos": talosVersions, "kubernetes": kubeVersions}, nil
}

func stepSync(ctx context.Context, cfg *config) (any, error) {
	actions, err := withTemplate(cfg.templatePath, func(f *os.File, out *bytes.Buffer, root *os.Root) error {
		return operations.SyncTemplate(ctx, f, out, cfg.client.Omni().State(), operations.SyncOptions{}, root)
	})
	if err != nil {
		return map[string]any{"actions": actions}, fmt.Errorf("syncing the template: %w", err)
	}

	return map[string]any{"actions": actions}, nil
}

// stepResync asks the client what a second sync of the same template would change. Against a
// faithful server the answer is nothing: what the server returns is what the client wrote (plus
// versions, timestamps and finalizers, which the comparison ignores). Anything else means the
// server dropped, added or re-encoded something; the diff says what.
func stepResync(ctx context.Context, cfg *config) (any, error) {
	tmpl, root, err := loadTemplate(cfg.templatePath)
	if err != nil {
		return nil, err
	}
	defer root.Close() //nolint:errcheck

	result, err := tmpl.Sync(ctx, cfg.client.Omni().State())
	if err != nil {
		return nil, fmt.Errorf("computing the sync: %w", err)
	}

	var pending []string

	for _, r := range result.Create {
		pending = append(pending, "create "+resource.String(r))
	}

	for _, u := range result.Update {
		d, diffErr := resourceDiff(u.Old, u.New)
		if diffErr != nil {
			return nil, diffErr
		}

		pending = append(pending, fmt.Sprintf("update %s:\n%s", resource.String(u.New), d))
	}

	for _, phase := range result.Destroy {
		for _, r := range phase {
			pending = append(pending, "destroy "+resource.String(r))
		}
	}

	if len(pending) > 0 {
		return map[string]any{"pending": pending}, fmt.Errorf("re-syncing the unchanged template would still change %d resource(s): %s",
			len(pending), strings.Join(pending, "; "))
	}

	return map[string]any{"pending": []string{}}, nil
}

// resourceDiff renders the YAML difference of two versions of a resource.
func resourceDiff(oldRes, newRes resource.Resource) (string, error) {
	render := func(r resource.Resource) ([]byte, error) {
		m, err := resource.MarshalYAML(r)
		if err != nil {
			return nil, err
		}

		return yaml.Marshal(m)
	}

	before, err := render(oldRes)
	if err != nil {
		return "", err
	}

	after, err := render(newRes)
	if err != nil {
		return "", err
	}

	return diff.Compute(before, after)
}

func stepGet(ctx context.Context, cfg *config) (any, error) {
	if err := needCluster(cfg); err != nil {
		return nil, err
	}

	st := cfg.client.Omni().State()

	cluster, err := safe.StateGetByID[*omni.Cluster](ctx, st, cfg.cluster)
	if err != nil {
		return nil, fmt.Errorf("getting cluster %q: %w", cfg.cluster, err)
	}

	_, managed := cluster.Metadata().Annotations().Get(omni.ResourceManagedByClusterTemplates)

	byCluster := state.WithLabelQuery(resource.LabelEqual(omni.LabelCluster, cfg.cluster))

	sets, err := safe.StateListAll[*omni.MachineSet](ctx, st, byCluster)
	if err != nil {
		return nil, fmt.Errorf("listing machine sets: %w", err)
	}

	type machineSet struct {
		ID             string `json:"id"`
		Role           string `json:"role"`
		UpdateStrategy string `json:"update_strategy"`
	}

	machineSets := []machineSet{}

	for s := range sets.All() {
		role := "none"
		if _, ok := s.Metadata().Labels().Get(omni.LabelControlPlaneRole); ok {
			role = "controlplane"
		} else if _, ok := s.Metadata().Labels().Get(omni.LabelWorkerRole); ok {
			role = "worker"
		}

		machineSets = append(machineSets, machineSet{
			ID:             s.Metadata().ID(),
			Role:           role,
			UpdateStrategy: s.TypedSpec().Value.UpdateStrategy.String(),
		})
	}

	nodes, err := safe.StateListAll[*omni.MachineSetNode](ctx, st, byCluster)
	if err != nil {
		return nil, fmt.Errorf("listing machine set nodes: %w", err)
	}

	nodeSets := map[string]string{}

	for n := range nodes.All() {
		set, _ := n.Metadata().Labels().Get(omni.LabelMachineSet)
		nodeSets[n.Metadata().ID()] = set
	}

	patches, err := safe.StateListAll[*omni.ConfigPatch](ctx, st, byCluster)
	if err != nil {
		return nil, fmt.Errorf("listing config patches: %w", err)
	}

	type configPatch struct {
		ID         string `json:"id"`
		Bytes      int    `json:"bytes"`
		Compressed bool   `json:"compressed"`
	}

	configPatches := []configPatch{}

	for p := range patches.All() {
		spec := p.TypedSpec().Value

		data, dataErr := spec.GetUncompressedData()
		if dataErr != nil {
			return nil, fmt.Errorf("config patch %q: reading its data: %w", p.Metadata().ID(), dataErr)
		}

		var doc map[string]any
		if yamlErr := yaml.Unmarshal(data.Data(), &doc); yamlErr != nil {
			data.Free()

			return nil, fmt.Errorf("config patch %q: its data is not YAML: %w", p.Metadata().ID(), yamlErr)
		}

		configPatches = append(configPatches, configPatch{
			ID:         p.Metadata().ID(),
			Bytes:      len(data.Data()),
			Compressed: len(spec.CompressedData) > 0,
		})

		data.Free()
	}

	extensions, err := safe.StateListAll[*omni.ExtensionsConfiguration](ctx, st, byCluster)
	if err != nil {
		return nil, fmt.Errorf("listing extensions configurations: %w", err)
	}

	extensionLists := map[string][]string{}
	for e := range extensions.All() {
		extensionLists[e.Metadata().ID()] = e.TypedSpec().Value.Extensions
	}

	manifests, err := safe.StateListAll[*omni.KubernetesManifestGroup](ctx, st, byCluster)
	if err != nil {
		return nil, fmt.Errorf("listing manifest groups: %w", err)
	}

	manifestModes := map[string]string{}
	for m := range manifests.All() {
		manifestModes[m.Metadata().ID()] = m.TypedSpec().Value.Mode.String()
	}

	checks, err := safe.StateListAll[*omni.KubernetesHealthCheck](ctx, st, byCluster)
	if err != nil {
		return nil, fmt.Errorf("listing health checks: %w", err)
	}

	checkIDs := []string{}
	for c := range checks.All() {
		checkIDs = append(checkIDs, c.Metadata().ID())
	}

	// Kernel args carry no cluster label: they are per machine, found by the node's ID, as the
	// template operations find them.
	kernelArgs := map[string][]string{}

	for id := range nodeSets {
		args, getErr := safe.StateGetByID[*omni.KernelArgs](ctx, st, id)
		if state.IsNotFoundError(getErr) {
			continue
		}

		if getErr != nil {
			return nil, fmt.Errorf("getting the kernel args of %q: %w", id, getErr)
		}

		kernelArgs[id] = args.TypedSpec().Value.Args
	}

	spec := cluster.TypedSpec().Value

	return map[string]any{
		"extensions":      extensionLists,
		"manifest_groups": manifestModes,
		"health_checks":   checkIDs,
		"kernel_args":     kernelArgs,
		"cluster": map[string]any{
			"id":                   cluster.Metadata().ID(),
			"talos_version":        spec.TalosVersion,
			"kubernetes_version":   spec.KubernetesVersion,
			"managed_by_templates": managed,
			"phase":                cluster.Metadata().Phase().String(),
		},
		"machine_sets":      machineSets,
		"machine_set_nodes": nodeSets,
		"config_patches":    configPatches,
	}, nil
}

func stepStatus(ctx context.Context, cfg *config) (any, error) {
	// Not Quiet, although the rendered tree is discarded: in v1.9.3 the wait re-evaluates the
	// cluster's health only when it renders (once a second), and Quiet skips that, so a quiet
	// wait returns only for a cluster that is healthy at its first look.
	_, err := withTemplate(cfg.templatePath, func(f *os.File, out *bytes.Buffer, root *os.Root) error {
		return operations.StatusTemplate(ctx, f, out, cfg.client.Omni().State(), operations.StatusOptions{Wait: true}, root)
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the cluster to be healthy: %w", err)
	}

	st := cfg.client.Omni().State()

	status, err := safe.StateGetByID[*omni.ClusterStatus](ctx, st, cfg.cluster)
	if err != nil {
		return nil, fmt.Errorf("getting the cluster status: %w", err)
	}

	spec := status.TypedSpec().Value
	machines := spec.GetMachines()

	sets, err := safe.StateListAll[*omni.MachineSetStatus](ctx, st,
		state.WithLabelQuery(resource.LabelEqual(omni.LabelCluster, cfg.cluster)))
	if err != nil {
		return nil, fmt.Errorf("listing machine set statuses: %w", err)
	}

	type setStatus struct {
		ID      string `json:"id"`
		Phase   string `json:"phase"`
		Ready   bool   `json:"ready"`
		Total   uint32 `json:"total"`
		Healthy uint32 `json:"healthy"`
	}

	setStatuses := []setStatus{}

	for s := range sets.All() {
		v := s.TypedSpec().Value
		setStatuses = append(setStatuses, setStatus{
			ID:      s.Metadata().ID(),
			Phase:   v.Phase.String(),
			Ready:   v.Ready,
			Total:   v.GetMachines().GetTotal(),
			Healthy: v.GetMachines().GetHealthy(),
		})
	}

	kubeUpgrade, err := safe.StateGetByID[*omni.KubernetesUpgradeStatus](ctx, st, cfg.cluster)
	if err != nil {
		return nil, fmt.Errorf("getting the Kubernetes upgrade status: %w", err)
	}

	talosUpgrade, err := safe.StateGetByID[*omni.TalosUpgradeStatus](ctx, st, cfg.cluster)
	if err != nil {
		return nil, fmt.Errorf("getting the Talos upgrade status: %w", err)
	}

	return map[string]any{
		"kubernetes_upgrade": map[string]string{
			"phase":                kubeUpgrade.TypedSpec().Value.Phase.String(),
			"last_upgrade_version": kubeUpgrade.TypedSpec().Value.LastUpgradeVersion,
		},
		"talos_upgrade": map[string]string{
			"phase":                talosUpgrade.TypedSpec().Value.Phase.String(),
			"last_upgrade_version": talosUpgrade.TypedSpec().Value.LastUpgradeVersion,
		},
		"phase":                spec.Phase.String(),
		"ready":                spec.Ready,
		"available":            spec.Available,
		"kubernetes_api_ready": spec.KubernetesAPIReady,
		"controlplane_ready":   spec.ControlplaneReady,
		"machines": map[string]uint32{
			"total":     machines.GetTotal(),
			"healthy":   machines.GetHealthy(),
			"connected": machines.GetConnected(),
			"requested": machines.GetRequested(),
		},
		"machine_sets": setStatuses,
	}, nil
}

func stepKubeconfig(ctx context.Context, cfg *config) (any, error) {
	if err := needCluster(cfg); err != nil {
		return nil, err
	}

	raw, err := cfg.client.Management().WithCluster(cfg.cluster).Kubeconfig(ctx,
		management.WithServiceAccount(kubeconfigTTL, kubeconfigUser, kubeconfigGroup))
	if err != nil {
		return nil, fmt.Errorf("requesting a kubeconfig: %w", err)
	}

	// Parsed by client-go, as kubectl and every controller would; only non-secret fields are
	// reported (the token is a credential).
	kc, err := clientcmd.Load(raw)
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig does not parse: %w", err)
	}

	current, ok := kc.Contexts[kc.CurrentContext]
	if !ok {
		return nil, fmt.Errorf("the kubeconfig's current context %q is not defined", kc.CurrentContext)
	}

	cluster, ok := kc.Clusters[current.Cluster]
	if !ok {
		return nil, fmt.Errorf("context %q names undefined cluster %q", kc.CurrentContext, current.Cluster)
	}

	user, ok := kc.AuthInfos[current.AuthInfo]
	if !ok {
		return nil, fmt.Errorf("context %q names undefined user %q", kc.CurrentContext, current.AuthInfo)
	}

	if user.Token == "" {
		return nil, fmt.Errorf("user %q of the kubeconfig has no token", current.AuthInfo)
	}

	return map[string]any{
		"server":    cluster.Server,
		"context":   kc.CurrentContext,
		"namespace": current.Namespace,
		"user":      current.AuthInfo,
		"has_token": true,
	}, nil
}

func stepDelete(ctx context.Context, cfg *config) (any, error) {
	if err := needCluster(cfg); err != nil {
		return nil, err
	}

	actions, err := withTemplate(cfg.templatePath, func(f *os.File, out *bytes.Buffer, root *os.Root) error {
		return operations.DeleteTemplate(ctx, f, out, cfg.client.Omni().State(), operations.SyncOptions{}, root)
	})
	if err != nil {
		return map[string]any{"actions": actions}, fmt.Errorf("deleting the template: %w", err)
	}

	// The operation returns once everything it tore down is destroyed; confirm through reads.
	st := cfg.client.Omni().State()

	if _, err = safe.StateGetByID[*omni.Cluster](ctx, st, cfg.cluster); !state.IsNotFoundError(err) {
		return map[string]any{"actions": actions}, fmt.Errorf("cluster %q is still readable after the delete (error: %v)", cfg.cluster, err)
	}

	remaining, err := clusterResources(ctx, st, cfg.cluster)
	if err != nil {
		return nil, err
	}

	if len(remaining) > 0 {
		return map[string]any{"actions": actions, "remaining": remaining},
			fmt.Errorf("resources of cluster %q remain after the delete: %s", cfg.cluster, strings.Join(remaining, ", "))
	}

	// The cluster's status is a controller's output; it goes with the cluster, perhaps a
	// moment later. Wait for that within the step's deadline.
	for {
		_, err = safe.StateGetByID[*omni.ClusterStatus](ctx, st, cfg.cluster)
		if state.IsNotFoundError(err) {
			break
		}

		if ctx.Err() != nil {
			return map[string]any{"actions": actions}, fmt.Errorf("the status of cluster %q did not go after the delete (last read error: %v)", cfg.cluster, err)
		}

		time.Sleep(100 * time.Millisecond)
	}

	return map[string]any{"actions": actions, "remaining": []string{}}, nil
}

// clusterResources lists what the template created and still carries the cluster's label.
func clusterResources(ctx context.Context, st state.State, cluster string) ([]string, error) {
	byCluster := state.WithLabelQuery(resource.LabelEqual(omni.LabelCluster, cluster))

	var remaining []string

	collect := func(items []resource.Resource) {
		for _, r := range items {
			remaining = append(remaining, resource.String(r))
		}
	}

	for _, typ := range []resource.Type{
		omni.MachineSetType, omni.MachineSetNodeType, omni.ConfigPatchType,
		omni.ExtensionsConfigurationType, omni.KubernetesManifestGroupType, omni.KubernetesHealthCheckType,
	} {
		list, err := st.List(ctx, resource.NewMetadata(resources.DefaultNamespace, typ, "", resource.VersionUndefined), byCluster)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", typ, err)
		}

		collect(list.Items)
	}

	slices.Sort(remaining)

	return remaining, nil
}
