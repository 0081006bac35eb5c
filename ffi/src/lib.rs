//! C ABI for wspool (placeholder until the C ABI issue lands).
