// The helpers every command line and --json output goes through (coverbs_support/command_line.hpp,
// coverbs_support/json_output.hpp): sizes and counts checked by CLI11 validators, an option given twice refused,
// and names with quotes or backslashes come out as valid, escaped JSON.
#include <coverbs_support/command_line.hpp>
#include <coverbs_support/json_output.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace {

/// Parses `args` (after the program name) with `app`; the CLI11 error message, or "" on success.
std::string parse(CLI::App& app, std::vector<std::string> args) {
  std::vector<char*> argv{const_cast<char*>("prog")};
  for (auto& a : args)
    argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
    return "";
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
}

} // namespace

TEST_CASE("a size option takes K, M, G suffixes and refuses signs, overflow and out-of-range values", "[command_line]") {
  CLI::App app{"", "prog"};
  command_line::describe(app, "usage: prog\n");
  std::uint64_t size = 0;
  std::vector<std::uint64_t> sizes;
  app.add_option("--size", size)->transform(command_line::size(1, std::uint64_t{1} << 30));
  app.add_option("--sizes", sizes)->delimiter(',')->transform(command_line::size(1, std::uint64_t{1} << 30));
  CHECK(parse(app, {"--size", "64K", "--sizes", "4K,1M,3"}).empty());
  CHECK(size == 65536);
  CHECK(sizes == std::vector<std::uint64_t>{4096, 1 << 20, 3});
  CHECK(parse(app, {"--size", "4K", "--size", "16M"}).empty());
  CHECK(size == 16u << 20);  // the last one wins, converted too
  CHECK(parse(app, {"--size", "-1"}) ==
        "--size: takes a size from 1 to 1G: bytes, or with a K, M or G suffix (powers of 1024), e.g. 4096, 64K, "
        "16M, 1G (got '-1')");
  CHECK_THAT(parse(app, {"--size", "18446744073709551616"}), Catch::Contains("(got '18446744073709551616')"));
  CHECK_THAT(parse(app, {"--size", "2G"}), Catch::Contains("(got '2G')"));
  CHECK_THAT(parse(app, {"--sizes", "4K,x"}), Catch::StartsWith("--sizes: takes a size") && Catch::Contains("got 'x'"));
}

TEST_CASE("an option given twice is refused, naming it, whether a value, a flag or in a subcommand",
          "[command_line]") {
  CLI::App app{"", "prog"};
  command_line::describe(app, "usage: prog\n");
  std::uint64_t size = 0;
  std::vector<std::uint64_t> sizes;
  bool json = false;
  std::string mode;
  app.add_option("--size", size)->transform(command_line::size(1, std::uint64_t{1} << 30));
  app.add_option("--sizes", sizes)->delimiter(',')->transform(command_line::size(1, std::uint64_t{1} << 30));
  app.add_flag("--json", json);
  CLI::App* sub = app.add_subcommand("run");
  sub->add_option("--mode", mode);
  auto repeated = [&](std::vector<std::string> args) -> std::string {
    std::vector<char*> argv{const_cast<char*>("prog")};
    for (auto& a : args)
      argv.push_back(a.data());
    const int argc = static_cast<int>(argv.size());
    app.clear();
    app.parse(argc, argv.data());
    return command_line::repeated_option(app, argc, argv.data()).value_or("");
  };
  CHECK(repeated({"--size", "4K", "--size", "16M"}) == "--size is given 2 times: give it once (the programs do not "
                                                         "pick one of its values for you)");
  CHECK_THAT(repeated({"--size=4K", "--json", "--size", "8K", "--size=1M"}), Catch::StartsWith("--size is given 3 times"));
  CHECK_THAT(repeated({"--json", "--json"}), Catch::StartsWith("--json is given 2 times"));
  CHECK_THAT(repeated({"run", "--mode", "a", "--mode", "b"}), Catch::StartsWith("--mode is given 2 times"));
  // Once each is fine, and so is a list option given once with several values.
  CHECK(repeated({"--size", "4K", "--sizes", "4K,1M,3", "--json", "run", "--mode", "a"}).empty());
  CHECK(sizes == std::vector<std::uint64_t>{4096, 1 << 20, 3});

  // command_line::parse refuses it with the exit status of bad input, 2.
  std::vector<std::string> args{"--json", "--size", "1K", "--json"};
  std::vector<char*> argv{const_cast<char*>("prog")};
  for (auto& a : args)
    argv.push_back(a.data());
  app.clear();
  CHECK(command_line::parse(app, static_cast<int>(argv.size()), argv.data()) == 2);
}

TEST_CASE("a size option's message offers only suffixes and examples within its range", "[command_line]") {
  CLI::App app{"", "prog"};
  command_line::describe(app, "usage: prog\n");
  std::uint64_t small = 0, tiny = 0;
  app.add_option("--small", small)->transform(command_line::size(1, std::uint64_t{1} << 20));
  app.add_option("--tiny", tiny)->transform(command_line::size(8, 512));
  CHECK(parse(app, {"--small", "2M"}) ==
        "--small: takes a size from 1 to 1M: bytes, or with a K or M suffix (powers of 1024), e.g. 4096, 64K "
        "(got '2M')");
  CHECK(parse(app, {"--tiny", "0"}) == "--tiny: takes a size from 8 to 512: bytes, e.g. 8, 512 (got '0')");
}

TEST_CASE("count and one_of name the option and what it takes", "[command_line]") {
  CLI::App app{"", "prog"};
  int n = 0;
  std::string mode = "spin";
  app.add_option("--iters", n)->transform(command_line::count(2, 100));
  app.add_option("--mode", mode)->check(command_line::one_of({"spin", "events", "adaptive"}));
  CHECK(parse(app, {"--iters", "7", "--mode", "events"}).empty());
  CHECK((n == 7 && mode == "events"));
  // Leading zeros are decimal: CLI11 alone reads 010 as octal 8 and refuses 08 as "Could not convert".
  CHECK(parse(app, {"--iters", "010"}).empty());
  CHECK(n == 10);
  CHECK(parse(app, {"--iters", "08"}).empty());
  CHECK(n == 8);
  CHECK(parse(app, {"--iters", "1"}) == "--iters: takes a whole number from 2 to 100 (got '1')");
  CHECK(parse(app, {"--iters", "-5"}) == "--iters: takes a whole number from 2 to 100 (got '-5')");
  CHECK(parse(app, {"--iters", "4K"}) == "--iters: takes a whole number from 2 to 100 (got '4K')");
  CHECK(parse(app, {"--mode", "x"}) == "--mode: takes 'spin', 'events' or 'adaptive' (got 'x')");
}

TEST_CASE("--help prints the usage as written", "[command_line]") {
  CLI::App app{"", "prog"};
  command_line::describe(app, "usage: prog [--x N]\n  what it does\n");
  CHECK(app.help() == "usage: prog [--x N]\n  what it does\n");
}

TEST_CASE("--help lists the options that were given a description, wrapped", "[command_line]") {
  CLI::App app{"", "prog"};
  command_line::describe(app, "usage: prog [--x N] [--y N]\n");
  int x = 0, y = 0;
  app.add_option("--x", x);
  app.add_option("--y", y, std::string(40, 'a') + " " + std::string(40, 'b') + " " + std::string(40, 'c'));
  CHECK(app.help() == "usage: prog [--x N] [--y N]\noptions:\n  --y\n      " + std::string(40, 'a') + " " +
                          std::string(40, 'b') + "\n      " + std::string(40, 'c') + "\n");
}

TEST_CASE("--help shows the range or the words an option takes", "[command_line]") {
  CLI::App app{"", "prog"};
  command_line::describe(app, "usage: prog\n");
  int n = 1;
  std::string mode = "spin";
  app.add_option("--cq-mod", n, "signal every Nth")->transform(command_line::count(1, 8192));
  app.add_option("--mode", mode, "how to wait")->check(command_line::one_of({"spin", "events"}));
  CHECK(app.help() == "usage: prog\noptions:\n  --cq-mod N 1..8192\n      signal every Nth\n"
                      "  --mode 'spin' or 'events'\n      how to wait\n");
}

TEST_CASE("JSON output escapes quotes, backslashes and control characters", "[json]") {
  namespace json = json_output::json;
  const json::value v = json::object{{"name", "rxe\"0\\x\n"}, {"p99_us", json_output::rounded(12.34567, 3)}};
  const std::string text = json_output::text(v);
  CHECK_THAT(text, Catch::StartsWith(R"({"name":"rxe\"0\\x\n","p99_us":)"));
  // What any reader gets back: the name as it was.
  CHECK(json::parse(text).at("name").as_string() == "rxe\"0\\x\n");
  CHECK(json::parse(text).at("p99_us").as_double() == 12.346);
}

TEST_CASE("figures print in decimal form, as a reader expects, and a non-finite one as null", "[cli][unit]") {
  namespace json = json_output::json;
  const json::value v = json::object{{"us", json_output::rounded(19.94, 1)},
                                     {"ns", json::array{4286.8, 20.0, 0.125, 1e5, 1.2e9, 1.2e-5}},
                                     {"count", 3},
                                     {"bad", std::nan("")},
                                     {"nested", json::object{{"ratio", 1.062}}}};
  // Boost.JSON itself writes 1.99E1; what the JSON files show is the decimal figure.
  CHECK(
      json_output::text(v) ==
      R"({"us":19.9,"ns":[4286.8,20,0.125,100000,1200000000,0.000012],"count":3,"bad":null,"nested":{"ratio":1.062}})");
  CHECK(json::parse(json_output::text(v)).at("us").as_double() == 19.9);
}

TEST_CASE("an option given without its value says so in plain words, with what it takes", "[command_line]") {
  CLI::App app{"", "prog"};
  int n = 0;
  std::string mode = "spin";
  app.add_option("--iters", n)->transform(command_line::count(2, 100));
  app.add_option("--mode", mode)->check(command_line::one_of({"spin", "events"}));
  CHECK(command_line::missing_value(parse(app, {"--mode"})) == "--mode: needs a value: 'spin' or 'events'");
  CHECK(command_line::missing_value(parse(app, {"--iters"})) == "--iters: needs a value: N 2..100");
  // Other messages pass through unchanged.
  CHECK(command_line::missing_value("--mode: takes 'spin' (got 'x')") == "--mode: takes 'spin' (got 'x')");
}

TEST_CASE("words not expected are listed as given, naming an option the program lacks", "[command_line]") {
  // CLI11 said "The following arguments were not expected: 4 -Q" for `-Q 4`.
  CHECK(command_line::not_expected({"-Q", "4"}) == "not expected: -Q 4 (there is no option -Q)");
  CHECK(command_line::not_expected({"--no-such=3"}) == "not expected: --no-such=3 (there is no option --no-such)");
  CHECK(command_line::not_expected({"frobnicate", "-5"}) == "not expected: frobnicate -5");
  CLI::App app{"", "prog"};
  int n = 0;
  app.add_option("--iters", n);
  std::vector<std::string> args{"prog", "-Q", "4", "--iters", "3"};
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  CHECK_THROWS_AS(app.parse(static_cast<int>(argv.size()), argv.data()), CLI::ExtrasError);
  CHECK(command_line::not_expected(app.remaining(true)) == "not expected: -Q 4 (there is no option -Q)");
}

TEST_CASE("a word where a subcommand goes is named as a subcommand the program lacks, with the ones it has",
          "[command_line]") {
  // `coverbs nope` said "not expected: nope", without saying what was expected there.
  CLI::App app{"", "prog"};
  app.require_subcommand(0, 1);
  app.add_subcommand("devices");
  app.add_subcommand("stress");
  std::vector<std::string> args{"prog", "nope", "-x"};
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  CHECK_THROWS_AS(app.parse(static_cast<int>(argv.size()), argv.data()), CLI::ExtrasError);
  CHECK(command_line::not_expected(app.remaining(true), command_line::subcommands_not_given(app)) ==
        "not expected: nope -x (there is no subcommand nope: devices or stress)");
  // With no subcommands to name, an unknown word is only listed.
  CHECK(command_line::not_expected({"nope"}, {}) == "not expected: nope");
}
