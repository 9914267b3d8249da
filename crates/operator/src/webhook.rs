//! Validating admission webhook server.
