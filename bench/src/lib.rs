//! Benchmark helpers (placeholder).
