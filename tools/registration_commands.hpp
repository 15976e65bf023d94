#pragma once
// The registration subcommands of the coverbs tool.
namespace coverbs::cli {
/// coverbs reg-latency [--size A..B] [--percentiles P,...] [--iters N] [--device NAME] [--json]
int reg_latency(int argc, char** argv);
/// coverbs stress [--size S] [--count N] [--threads T] [--device NAME]
int stress(int argc, char** argv);
} // namespace coverbs::cli
