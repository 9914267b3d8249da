//! Protobuf messages and gRPC client/server code generated from `proto/` at build time.
//!
//! The paths mirror the protobuf packages, so `cosi.resource.Metadata` is
//! [`cosi::resource::Metadata`]. Server code is generated too because the simulator serves the
//! same services.

/// Package `cosi.resource`: the COSI resource envelope and the `State` service.
pub mod cosi {
    /// Package `cosi.resource`.
    pub mod resource {
        #![allow(missing_docs, clippy::all, clippy::pedantic)]
        tonic::include_proto!("cosi.resource");
    }
}

/// Package `specs`: Omni resource spec messages carried in `Spec.proto_spec`.
pub mod specs {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("specs");
}

/// Package `management`: kubeconfig minting and service-account registration.
pub mod management {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("management");

    impl std::fmt::Debug for KubeconfigResponse {
        // The kubeconfig embeds a bearer token, so only its size is shown.
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("KubeconfigResponse")
                .field(
                    "kubeconfig",
                    &format_args!("<{} bytes redacted>", self.kubeconfig.len()),
                )
                .finish()
        }
    }
}
