//! Custom resource types of `omni.texashpc.com/v1alpha1` and their validation.
