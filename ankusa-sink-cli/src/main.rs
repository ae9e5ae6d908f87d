//! `ankusa-sink`: send hooks to a sink, test its credentials, and see why a delivery fails.
//! The command is the library's ([`ankusa_sink_cli::run_with`]); this binary runs it with
//! the built-in sink types.

// The binary's allocator, never the library's: a delivery allocates a few dozen times
// across the reader, the dispatcher, the sink and librdkafka's threads, where glibc's
// malloc took a fifth of the CPU (docs/benchmarks-history.md, "Stop 36").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    ankusa_sink_cli::main_with(ankusa_sinks::Registry::builtin())
}
