#pragma once
// The registration subcommands of the coverbs tool.
#include <CLI/App.hpp>

#include <functional>

namespace coverbs::cli {
/// Adds `coverbs reg-latency [--size A..B] [--percentiles P,...] [--iters N] [--device NAME] [--json]` to
/// `app`; the function returned runs it (exit status) once the command line has been parsed.
std::function<int()> add_reg_latency(CLI::App& app);
/// Adds `coverbs stress [--size S] [--count N] [--threads T] [--device NAME]` to `app`, as `add_reg_latency`.
std::function<int()> add_stress(CLI::App& app);
} // namespace coverbs::cli
