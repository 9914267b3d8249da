//! Compiles our hand-written `.proto` files with `protox` (pure Rust, so no `protoc` is needed)
//! and generates both client and server code: the simulator crate serves the same services.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/cosi/resource.proto",
        "proto/cosi/state.proto",
        "proto/specs/omni.proto",
        "proto/management/management.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // The kubeconfig carries a bearer token; its Debug impl is written by hand to redact it.
        .skip_debug([".management.KubeconfigResponse"])
        // Sorted maps encode deterministically, so an unchanged status encodes to the same
        // bytes and the simulator's no-op-write check holds.
        .btree_map(".specs.ClusterKubernetesManifestsStatusSpec")
        .compile_fds(descriptors)?;
    Ok(())
}
