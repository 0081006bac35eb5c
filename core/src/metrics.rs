//! OpenMetrics text export (filled below).
