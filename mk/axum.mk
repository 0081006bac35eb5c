# mk/axum.mk: the Rust HTTP server example on tokio and axum (examples-rust/http_axum).
#
#   make axum-example   target/axum/release/http_axum
#   make test-axum      its unit tests (the X-Request-Start parser, the deadline reserve), then
#                       the server (debug build) driven by curl and raw sockets in its three
#                       modes: /ping answered while the CPU endpoint is saturated, priorities
#                       (the order work began), an already-expired X-Request-Start answered 503,
#                       a client hang-up cancelling its queued task (the pool's cancelled count),
#                       shutdown with requests in flight
#   make bench-axum     the server on wspool vs tokio's spawn_blocking vs rayon + a oneshot
#                       channel under 2x CPU overload, in the harness of the C and C++ servers
#
# The example is a cargo workspace of its own with its own Cargo.lock (built
# --locked), so the main workspace and `cargo test --workspace` never build
# axum. Its build goes to target/axum. The clients come from test-embed:
# curl (embed-deps), prometheus_client in target/embed/venv, and httpload.

AXUM_MANIFEST := --manifest-path examples-rust/http_axum/Cargo.toml --target-dir target/axum --locked
# Literal: mk/embed.mk, which names them, is read after this file.
AXUM_PY := target/embed/venv/bin/python
AXUM_LOAD := target/embed/httpload

TEST_TARGETS += test-axum
BENCH_TARGETS += bench-axum

.PHONY: axum-example test-axum bench-axum

axum-example:
	$(CARGO) build --release $(AXUM_MANIFEST)

test-axum: $(AXUM_PY) embed-deps
	$(CARGO) test -q $(AXUM_MANIFEST)
	$(CARGO) build $(AXUM_MANIFEST)
	$(AXUM_PY) tests/axum/test_http.py --server target/axum/debug/http_axum

bench-axum: axum-example $(AXUM_LOAD)
	$(PYTHON) tests/axum/bench_http.py --server target/axum/release/http_axum --load $(AXUM_LOAD) \
	  --rounds 5 --seconds 3
