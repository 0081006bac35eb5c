//! Python bindings for wspool (placeholder until the Python issue lands).
