//! Compiles omni-client's spec messages into a descriptor set that omni-sim reads at run time to
//! render `yaml_spec` (src/yaml_spec.rs): the field names, numbers and types of every spec
//! message this project knows, from the one place they are declared (plus proto/sim_specs.proto,
//! for the few omni-client does not need).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let includes = ["../omni-client/proto", "proto"];
    let files = ["specs/omni.proto", "sim_specs.proto"];
    println!("cargo:rerun-if-changed=../omni-client/proto/specs/omni.proto");
    println!("cargo:rerun-if-changed=proto/sim_specs.proto");
    let encoded = protox::Compiler::new(includes)?
        .include_imports(true)
        .open_files(files)?
        .encode_file_descriptor_set();
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("specs.descriptors");
    std::fs::write(out, encoded)?;
    Ok(())
}
