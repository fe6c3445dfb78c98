//! The guard's own calls into CUDA: where memory lives, what the device is, the on-device scan,
//! the breadcrumbs.

pub(crate) mod breadcrumbs;
pub(crate) mod cuda_api;
pub(crate) mod cudnn;
pub(crate) mod device;
pub(crate) mod device_scan;
pub(crate) mod verdict_memory;
