#pragma once
// The command lines of the coverbs tool, the benchmarks and the examples, all parsed by CLI11: the validators
// they share (sizes, whole numbers, one word of a list) and one way to end on --help or bad input.
// Header-only, no coverbs dependency.
#include "size_argument.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace command_line {

/// A size in bytes in [min, max] (size_argument::parse: "4096", "64K", "16M", "1G"; no sign, no overflow).
/// A transform (`option->transform(size(...))`): the option receives the number of bytes. Refused text gets
/// "OPTION: takes a size from ...".
inline CLI::Validator size(std::uint64_t min, std::uint64_t max) {
  return {[=](std::string& text) -> std::string {
            const auto n = size_argument::parse(text, min, max);
            if (!n) return size_argument::expected(text, min, max);
            text = std::to_string(*n);
            return {};
          },
          "SIZE " + size_argument::text(min) + ".." + size_argument::text(max), "size"};
}

/// A whole number in [min, max], decimal digits only (no sign: "-1" is not 2^64-1; "010" is ten, not CLI11's
/// octal eight). A transform (`option->transform(count(...))`): the option receives the number written
/// without leading zeros. Refused text gets "OPTION: takes a whole number from MIN to MAX (got 'TEXT')".
inline CLI::Validator count(std::uint64_t min, std::uint64_t max) {
  return {[=](std::string& text) -> std::string {
            if (text.find_first_not_of("0123456789") == std::string::npos)
              if (const auto n = size_argument::parse(text, min, max)) {
                text = std::to_string(*n);
                return {};
              }
            return "takes a whole number from " + std::to_string(min) + " to " + std::to_string(max) + " (got '" +
                   text + "')";
          },
          "N " + std::to_string(min) + ".." + std::to_string(max), "count"};
}

/// One of `words`. Refused text gets "OPTION: takes 'a', 'b' or 'c' (got 'TEXT')".
inline CLI::Validator one_of(std::initializer_list<const char*> words) {
  std::vector<std::string> list(words.begin(), words.end());
  std::string said;
  for (std::size_t i = 0; i < list.size(); ++i)
    said += (i == 0 ? "'" : i + 1 == list.size() ? " or '" : ", '") + list[i] + "'";
  return {[list, said](std::string& text) -> std::string {
            for (const std::string& w : list)
              if (text == w) return {};
            return "takes " + said + " (got '" + text + "')";
          },
          said, "one_of"};
}

/// A CLI11 application whose --help prints `usage` as written (the programs' usage texts say more than a
/// generated option list), then, under "options:", each option that was given a description, with what it
/// takes where a validator says (a range, a list of words), its description wrapped at 100 columns. An option given
/// twice is refused by `parse` (`repeated_option`); CLI11 is left to keep the last value, which only a list option
/// given once with several values (`--sizes 4K,1M`) relies on.
inline void describe(CLI::App& app, const std::string& usage) {
  app.description(usage);
  app.formatter_fn([](const CLI::App* a, const std::string&, CLI::AppFormatMode) {
    std::string options;
    for (const CLI::Option* o : a->get_options()) {
      if (o == a->get_help_ptr() || o->get_description().empty()) continue;
      options += "  " + o->get_name();
      // What it takes, where a validator says ("N 1..8192", "SIZE 1..1G", "'spin', 'events' or 'adaptive'"):
      // CLI11's type name is "TYPE:description" then.
      const std::string type = o->get_type_name();
      if (const auto colon = type.find(':'); colon != std::string::npos) options += " " + type.substr(colon + 1);
      std::string line = "     ";
      std::size_t from = 0;
      const std::string& text = o->get_description();
      while (from < text.size()) {
        std::size_t to = text.find(' ', from);
        if (to == std::string::npos) to = text.size();
        const std::string word = text.substr(from, to - from);
        if (line.size() + 1 + word.size() > 100) {
          options += "\n" + line;
          line = "     ";
        }
        line += " " + word;
        from = to + 1;
      }
      options += "\n" + line + "\n";
    }
    return a->get_description() + (options.empty() ? "" : "options:\n" + options);
  });
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

/// The name of `app` and of the subcommand it ran, for messages: "coverbs stress".
inline std::string program(const CLI::App& app) {
  std::string name = app.get_name();
  for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
    sub = sub->get_subcommands().front();
    name += " " + sub->get_name();
  }
  return name;
}

/// Prints why the command line is bad and where to look. @returns 2, the exit status for a bad command line.
inline int bad(const std::string& prog, const std::string& why) {
  std::fprintf(stderr, "%s: %s\n(%s --help tells how to run it)\n", prog.c_str(), why.c_str(), prog.c_str());
  return 2;
}

/// CLI11's message for an option given without its value ("--op: 1 required TEXT:'a' or 'b' missing") in
/// plain words: "--op: needs a value: 'a' or 'b'". Any other message is returned as it is.
inline std::string missing_value(const std::string& what) {
  static const std::regex form(R"(^(\S+): (\d+) required [A-Z]+(?::(.*))? missing$)");
  std::smatch m;
  if (!std::regex_match(what, m, form)) return what;
  const std::string values = m[2] == "1" ? "a value" : m[2].str() + " values";
  return m[1].str() + ": needs " + values + (m[3].length() ? ": " + m[3].str() : std::string());
}

/// The words CLI11 did not take, in the order given (its own message lists them backwards: "4 -Q" for
/// `-Q 4`), and the first of them that looks like an option named as one the program does not have. Where
/// the program runs `subcommands` and none was given, a first word that is not an option is named as a
/// subcommand it does not have, with the ones it has: "(there is no subcommand nope: devices or stress)".
inline std::string not_expected(const std::vector<std::string>& args,
                                const std::vector<std::string>& subcommands = {}) {
  std::string out = "not expected:";
  for (const auto& a : args)
    out += " " + a;
  if (!subcommands.empty() && !args.empty() && !args[0].starts_with('-')) {
    std::string names;
    for (std::size_t i = 0; i < subcommands.size(); ++i)
      names += (i == 0 ? "" : i + 1 == subcommands.size() ? " or " : ", ") + subcommands[i];
    return out + " (there is no subcommand " + args[0] + ": " + names + ")";
  }
  for (const auto& a : args)
    if (a.size() > 1 && a[0] == '-' && !(a[1] >= '0' && a[1] <= '9'))
      return out + " (there is no option " + a.substr(0, a.find('=')) + ")";
  return out;
}

/// The names of the subcommands `app` has, when none of them was given; otherwise none.
inline std::vector<std::string> subcommands_not_given(const CLI::App& app) {
  std::vector<std::string> names;
  if (!app.get_subcommands().empty()) return names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

/// The option of `app` (or of a subcommand of it that ran) that `argv` gives more than once, as
/// "--size is given 2 times: give it once", or nothing. A repeated option would otherwise silently keep one
/// of its values (CLI11 takes the last), which hides a mistake in a script or a pasted command line. Words
/// after "--" are not options; a flag counts too.
inline std::optional<std::string> repeated_option(const CLI::App& app, int argc, char** argv) {
  std::vector<std::pair<const CLI::Option*, int>> seen;
  const CLI::App* level = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    const CLI::App* sub = nullptr;
    for (const CLI::App* s : level->get_subcommands())
      if (s->get_name() == arg) sub = s;
    if (sub) {
      level = sub;
      continue;
    }
    std::string name;
    if (arg.size() > 2 && arg.starts_with("--"))
      name = arg.substr(0, arg.find('='));
    else if (arg.size() >= 2 && arg[0] == '-' && std::isalpha(static_cast<unsigned char>(arg[1])))
      name = arg.substr(0, 2);
    else
      continue;
    for (const CLI::App* a = level; a != nullptr; a = a->get_parent()) {
      const CLI::Option* o = a->get_option_no_throw(name);
      if (!o) continue;
      auto it = std::find_if(seen.begin(), seen.end(), [o](const auto& e) { return e.first == o; });
      if (it == seen.end()) it = seen.insert(seen.end(), {o, 0});
      ++it->second;
      break;
    }
  }
  for (const auto& [o, times] : seen)
    if (times > 1)
      return o->get_name() + " is given " + std::to_string(times) + " times: give it once (the programs do not pick " +
             "one of its values for you)";
  return std::nullopt;
}

/// Parses the command line with `app`. --help (of the app or of the subcommand given) prints the usage on
/// stdout once every other argument was taken; bad input, before or after --help, prints what was wrong on
/// stderr, naming the option and what it takes; so does an option given more than once (`repeated_option`).
/// @returns the exit status to leave with now (0 after --help, 2 for bad input), or nothing to go on.
inline std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    if (const auto why = repeated_option(app, argc, argv)) return bad(program(app), *why);
    return std::nullopt;
  } catch (const CLI::CallForHelp&) {
    // CLI11 answers --help before it looks for arguments it did not take: `--bogus --help` printed the usage
    // and exited 0, so a script checking its arguments with a trailing --help let unknown options through.
    if (const auto args = app.remaining(true); !args.empty())
      return bad(program(app), not_expected(args, subcommands_not_given(app)));
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ArgumentMismatch& e) {
    return bad(program(app), missing_value(e.what()));
  } catch (const CLI::ExtrasError& e) {
    const auto args = app.remaining(true);
    return bad(program(app), args.empty() ? e.what() : not_expected(args, subcommands_not_given(app)));
  } catch (const CLI::ParseError& e) {
    return bad(program(app), e.what());
  }
}

} // namespace command_line
