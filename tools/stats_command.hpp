#pragma once
// The stats subcommand of the coverbs tool: a running program's metrics, scraped over HTTP.
#include <CLI/App.hpp>

#include <functional>

namespace coverbs::cli {
/// Adds `coverbs stats HOST:PORT [--path /metrics] [--raw]` to `app`; the function returned runs it (exit
/// status) once the command line has been parsed.
std::function<int()> add_stats(CLI::App& app);
}  // namespace coverbs::cli
