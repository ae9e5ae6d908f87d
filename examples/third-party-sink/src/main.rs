//! `ankusa-sink-with-example`: the whole `ankusa-sink` command, with this crate's sink as
//! `type = "example"` beside the built-in types its build enables (here only `log`).
//!
//! ```text
//! ankusa-sink-with-example info --sink example.toml
//! ankusa-sink-with-example gen --count 10 | ankusa-sink-with-example forward --sink example.toml
//! ```

use ankusa_sinks::Registry;
use std::process::ExitCode;

fn main() -> ExitCode {
    match redis_stream_sink::register(Registry::builtin()) {
        Ok(registry) => ankusa_sink_cli::main_with(registry),
        // Only a build that already names `example` can get here: say so, as the command
        // says a usage error.
        Err(e) => {
            eprintln!("ankusa-sink-with-example: {e}");
            ExitCode::from(2)
        }
    }
}
