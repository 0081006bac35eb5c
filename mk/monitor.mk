# mk/monitor.mk: the starvation monitor on real threads (issue 30, item 10).
#
#   make bench-monitor   bench/examples/monitor.rs: convoys, CPU floods, declared
#                        and undeclared blocking, a shrink, a spinning neighbour,
#                        seed 000's stream, blocking regions' retirement and the
#                        monitor thread's own cost, each beside a Fixed pool where
#                        that compares: times, peak threads, injections,
#                        retirements. Printed, never asserted: `make test` checks
#                        the monitor's decisions on a simulated pool and clock
#                        (core/src/growth/sim.rs). MONITOR_BENCH_ONLY=convoy,flood,...
#                        runs a subset.
#
# Part of `make bench`, not of `make test`.

BENCH_TARGETS += bench-monitor

.PHONY: bench-monitor

bench-monitor:
	$(CARGO) run --release -q -p wspool-bench --example monitor
