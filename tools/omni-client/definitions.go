package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/omni/client/pkg/omni/resources/registry"
	"go.yaml.in/yaml/v4"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	// Every kind of Omni resource registers its definition and its decoder in init.
	_ "github.com/siderolabs/omni/client/pkg/omni/resources/auth"
	_ "github.com/siderolabs/omni/client/pkg/omni/resources/omni"
	_ "github.com/siderolabs/omni/client/pkg/omni/resources/siderolink"
	_ "github.com/siderolabs/omni/client/pkg/omni/resources/system"
)

// clientDefinitions is every resource definition Omni's client knows, made the way Omni
// registers them with COSI (automatic aliases filled in), by ID.
func clientDefinitions() (map[resource.ID]meta.ResourceDefinitionSpec, error) {
	providers := []meta.ResourceDefinitionProvider{meta.ResourceDefinitionExtension{}, meta.NamespaceExtension{}}
	for _, r := range registry.Resources {
		providers = append(providers, r)
	}

	out := make(map[resource.ID]meta.ResourceDefinitionSpec, len(providers))

	for _, p := range providers {
		rd, err := meta.NewResourceDefinition(p.ResourceDefinition())
		if err != nil {
			return nil, err
		}

		out[rd.Metadata().ID()] = *rd.TypedSpec()
	}

	return out, nil
}

// stepDefinitions lists the server's ResourceDefinitions (namespace meta), as omnictl does to
// resolve a type name, and compares each with the definition Omni's client holds for its type.
func stepDefinitions(ctx context.Context, cfg *config) (any, error) {
	known, err := clientDefinitions()
	if err != nil {
		return nil, err
	}

	rds, err := safe.StateListAll[*meta.ResourceDefinition](ctx, cfg.client.Omni().State())
	if err != nil {
		return nil, fmt.Errorf("listing resource definitions: %w", err)
	}

	types := []string{}
	notInClient := []string{}

	var mismatches []string

	for rd := range rds.All() {
		md := rd.Metadata()
		got := normalizeDefinition(*rd.TypedSpec())
		types = append(types, got.Type)

		if md.Namespace() != meta.NamespaceName {
			mismatches = append(mismatches, fmt.Sprintf("%s: namespace %q", md.ID(), md.Namespace()))
		}

		want, ok := known[md.ID()]
		if !ok {
			notInClient = append(notInClient, got.Type)

			continue
		}

		if want = normalizeDefinition(want); !reflect.DeepEqual(got, want) {
			mismatches = append(mismatches, fmt.Sprintf("%s: got %+v, Omni's is %+v", md.ID(), got, want))
		}
	}

	result := map[string]any{"types": types, "not_in_client": notInClient}

	if len(types) == 0 {
		return result, errors.New("the server publishes no resource definitions")
	}

	if len(mismatches) > 0 {
		return result, fmt.Errorf("%d definitions differ from Omni's: %v", len(mismatches), mismatches)
	}

	return result, nil
}

// normalizeDefinition makes empty and absent lists equal.
func normalizeDefinition(s meta.ResourceDefinitionSpec) meta.ResourceDefinitionSpec {
	s = s.DeepCopy()

	if len(s.Aliases) == 0 {
		s.Aliases = nil
	}

	if len(s.AllAliases) == 0 {
		s.AllAliases = nil
	}

	if len(s.PrintColumns) == 0 {
		s.PrintColumns = nil
	}

	return s
}

// stepYAMLSpec reads every resource of every type the server publishes a definition for (in the
// type's default namespace; List, and Get of the first) without decoding them, as omnictl get
// does, and checks the yaml_spec of each against what Omni itself puts there: the YAML Omni's
// code makes of the spec decoded from proto_spec. omni-sim's YAML must decode (with Omni's
// decoder) to that same spec; the keys Omni's YAML has not are reported.
func stepYAMLSpec(ctx context.Context, cfg *config) (any, error) {
	st := cfg.client.Omni().State()

	rds, err := safe.StateListAll[*meta.ResourceDefinition](ctx, st)
	if err != nil {
		return nil, fmt.Errorf("listing resource definitions: %w", err)
	}

	checked := map[string]int{}
	refused := []string{}
	notInClient := []string{}

	extraKeys := map[string]struct{}{}

	var mismatches []string

	for rd := range rds.All() {
		spec := rd.TypedSpec()
		kind := resource.NewMetadata(spec.DefaultNamespace, spec.Type, "", resource.VersionUndefined)

		if _, err := protobuf.CreateResource(spec.Type); err != nil {
			notInClient = append(notInClient, spec.Type)

			continue
		}

		list, err := st.List(ctx, kind, state.WithListUnmarshalOptions(state.WithSkipProtobufUnmarshal()))
		if err != nil {
			if status.Code(err) == codes.PermissionDenied {
				refused = append(refused, spec.Type)

				continue
			}

			return nil, fmt.Errorf("listing %s: %w", spec.Type, err)
		}

		items := list.Items

		if len(items) > 0 {
			got, err := st.Get(ctx, items[0].Metadata(), state.WithGetUnmarshalOptions(state.WithSkipProtobufUnmarshal()))
			if err != nil {
				return nil, fmt.Errorf("getting %s: %w", items[0].Metadata(), err)
			}

			items = append(items, got)
		}

		for _, item := range items {
			extra, err := checkYAMLSpec(item)
			if err != nil {
				mismatches = append(mismatches, fmt.Sprintf("%s: %v", item.Metadata(), err))
			}

			for _, k := range extra {
				extraKeys[spec.Type+" "+k] = struct{}{}
			}
		}

		checked[spec.Type] = len(list.Items)
	}

	sort.Strings(refused)
	sort.Strings(notInClient)

	extra := slices.Sorted(maps.Keys(extraKeys))
	if extra == nil {
		extra = []string{}
	}

	result := map[string]any{"checked": checked, "refused": refused, "not_in_client": notInClient, "extra_keys": extra}

	if len(mismatches) > 0 {
		slices.Sort(mismatches)

		return result, fmt.Errorf("%d yaml_spec differ from Omni's: %v", len(mismatches), mismatches)
	}

	return result, nil
}

// checkYAMLSpec compares the yaml_spec of a resource read without decoding with what Omni makes
// of its proto_spec, and returns the keys it has that Omni's YAML has not (fields this client
// version does not know; they decode to nothing).
func checkYAMLSpec(item resource.Resource) ([]string, error) {
	raw, ok := item.(*protobuf.Resource)
	if !ok {
		return nil, fmt.Errorf("read as %T, not undecoded", item)
	}

	wire, err := raw.Marshal()
	if err != nil {
		return nil, err
	}

	yamlSpec := wire.GetSpec().GetYamlSpec()
	if yamlSpec == "" {
		return nil, errors.New("yaml_spec is empty")
	}

	typed, err := protobuf.UnmarshalResource(raw)
	if err != nil {
		return nil, fmt.Errorf("decoding proto_spec: %w", err)
	}

	want, err := yaml.Marshal(typed.Spec())
	if err != nil {
		return nil, err
	}

	fresh, err := protobuf.CreateResource(item.Metadata().Type())
	if err != nil {
		return nil, err
	}

	if err = yaml.Unmarshal([]byte(yamlSpec), fresh.Spec()); err != nil {
		return nil, fmt.Errorf("yaml_spec does not decode: %w\n%s", err, yamlSpec)
	}

	got, err := yaml.Marshal(fresh.Spec())
	if err != nil {
		return nil, err
	}

	var gotValue, wantValue, simValue any

	if err = yaml.Unmarshal(got, &gotValue); err != nil {
		return nil, err
	}

	if err = yaml.Unmarshal(want, &wantValue); err != nil {
		return nil, err
	}

	if err = yaml.Unmarshal([]byte(yamlSpec), &simValue); err != nil {
		return nil, err
	}

	if !reflect.DeepEqual(gotValue, wantValue) {
		return nil, fmt.Errorf("yaml_spec is another spec:\n%s\nOmni's:\n%s", yamlSpec, want)
	}

	return extraKeys("", simValue, wantValue), nil
}

// extraKeys lists the mapping keys of got (recursively) that want does not have.
func extraKeys(path string, got, want any) []string {
	var out []string

	switch g := got.(type) {
	case map[string]any:
		w, _ := want.(map[string]any)

		for k, v := range g {
			wv, ok := w[k]
			if !ok {
				out = append(out, path+"."+k)

				continue
			}

			out = append(out, extraKeys(path+"."+k, v, wv)...)
		}
	case []any:
		w, _ := want.([]any)

		for i, v := range g {
			if i < len(w) {
				out = append(out, extraKeys(fmt.Sprintf("%s[%d]", path, i), v, w[i])...)
			}
		}
	}

	sort.Strings(out)

	return out
}
