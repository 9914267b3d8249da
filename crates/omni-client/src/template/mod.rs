//! Omni cluster templates: the document model (parse and emit), client-side validation,
//! translation into Omni resources, and the sync / delete / status operations built on the
//! COSI State client.
//!
//! The pure parts (model, validation, translation, planning) do no I/O besides reading the
//! files a template refers to, so they can be tested without a server.

mod api;
mod deadline;
mod delete;
mod diff;
mod export;
mod files;
mod model;
mod state;
mod status;
mod status_watch;
mod sync;
mod translate;
mod validate;
mod yaml;

pub use api::{
    ApiVersionError, BackendApi, EPHEMERAL_NAMESPACE, SUPPORTED_BACKEND_API_VERSIONS,
    SYS_VERSION_ID, SYS_VERSION_TYPE, read_backend_api_version, unsupported_message,
};
pub use deadline::DeadlineState;
pub use delete::{DeleteProgress, delete_cluster, delete_cluster_for};
pub use diff::{ChangeAction, FieldChange, FieldValue, ResourceChange};
pub use export::{ExportError, Exported, Unexpressed, export_cluster, export_template};
pub use files::{FileError, FileResolver, MAX_FILE_BYTES};
pub use model::{
    BackupConfiguration, BootstrapSpec, Cluster, Descriptors, Document, Features, HealthCheck,
    Install, KubernetesCluster, Machine, MachineClass, MachineSet, Manifest, ParseError, Patch,
    RollingStrategy, Size, TalosCluster, Template, UpdateStrategy,
};
pub use state::{EventStream, LabelCondition, StateError, TemplateState};
pub use status::{
    ClusterHealth, HealthCheckResult, MachineCounts, MachineSetHealth, ManifestGroupSync,
    ManifestSync, ManifestsSync, StatusError, Upgrades, status_cluster,
};
pub use status_watch::{OnChange, StatusWatch};
pub use sync::{Plan, SyncError, SyncOptions, apply, plan_sync, plan_sync_for, sync};
pub use translate::{
    DesiredResource, NAMESPACE, ResourceRef, Spec, SpecDecodeError, TranslateError, keys,
    sort_for_apply, translate, translate_for, types,
};
pub use validate::{
    RESERVED_PREFIX, ValidationError, ValidationErrors, check_config_patch, check_config_patch_for,
    inline_content, is_uuid, yaml_syntax_error,
};
