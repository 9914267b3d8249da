//! Omni's version resource and what the backend API version changes.
//!
//! `SysVersions.system.sidero.dev/current` (namespace `ephemeral`) tells clients which backend
//! API version the server speaks: 2 up to Omni v1.10, 3 on Omni's main branch, where config
//! patches may no longer set `machine.install.disk` and `MachineInstallDiskConfig` takes over.

use omni_client::proto::specs::SysVersionSpec;

use crate::store::{Store, decode_spec, resource};
use crate::types::{EPHEMERAL_NS, SYS_VERSION_ID, ty};

/// The backend API version a simulator speaks unless configured otherwise (Omni v1.10's).
pub const DEFAULT_BACKEND_API_VERSION: u32 = 2;

/// The Omni version reported alongside each backend API version.
fn backend_version(api_version: u32) -> &'static str {
    match api_version {
        3 => "1.11.0-omni-sim",
        _ => "1.10.4-omni-sim",
    }
}

/// Writes (or replaces) the SysVersions resource.
pub(crate) fn publish(store: &Store, api_version: u32) {
    let mut r = resource(
        ty::SYS_VERSION,
        SYS_VERSION_ID,
        "",
        Vec::new(),
        &SysVersionSpec {
            backend_version: backend_version(api_version).into(),
            instance_name: "omni-sim".into(),
            backend_api_version: api_version,
        },
    );
    if let Some(m) = r.metadata.as_mut() {
        m.namespace = EPHEMERAL_NS.into();
    }
    store.put(r);
}

/// The backend API version the store publishes (0 when none is published).
pub(crate) fn backend_api_version(store: &Store) -> u32 {
    store
        .try_get(EPHEMERAL_NS, ty::SYS_VERSION, SYS_VERSION_ID)
        .and_then(|r| decode_spec::<SysVersionSpec>(&r).ok())
        .map_or(0, |s| s.backend_api_version)
}
