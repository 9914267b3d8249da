//! OmniCluster + children → Omni cluster template.
