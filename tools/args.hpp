// Command-line parsing for conv3d-dx: flags of the form --name VALUE, --name=VALUE or bare --switch.
// Every problem is a CliError carrying the exit status (2 for a bad command line) and a message that
// names the flag.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace conv3d_dx::cli {

// An error the CLI reports as "conv3d-dx: <message>" before exiting with `exit_code`.
class CliError : public std::runtime_error {
 public:
  CliError(int exit_code, const std::string& message) : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const noexcept { return exit_code_; }

 private:
  int exit_code_;
};

// A bad command line (exit status 2), phrased as "invalid <flag>: <why>".
CliError usage_error(const std::string& flag, const std::string& why);

struct FlagSpec {
  std::string name;        // "--strides", or "-o"
  std::string value_name;  // "a,b,c,d,e"; empty for a switch that takes no value
  std::string help;
};

class Args {
 public:
  // Parses argv (without the program and subcommand names) against `flags`; unknown flags, missing values,
  // repeated flags and stray words are errors. `command` names the subcommand in messages.
  Args(const std::vector<std::string>& argv, const std::vector<FlagSpec>& flags, const std::string& command);

  bool has(const std::string& flag) const { return values_.count(flag) != 0; }
  // The value of a flag, or nullopt when it was not given.
  std::optional<std::string> get(const std::string& flag) const;
  // The value of a flag that must be present.
  std::string required(const std::string& flag) const;

 private:
  std::map<std::string, std::string> values_;
};

// "1,2,3" -> {1, 2, 3}; every element a decimal int64. The count must be one of `counts`.
std::vector<std::int64_t> parse_int_list(const std::string& flag, const std::string& text,
                                         const std::vector<std::size_t>& counts);
// One decimal integer in [min, max].
std::int64_t parse_int(const std::string& flag, const std::string& text, std::int64_t min, std::int64_t max);

// True when args ask for help (--help or -h anywhere): every command then prints its help and does nothing.
bool wants_help(const std::vector<std::string>& args);

// Help text for a list of flags, one per line, aligned.
std::string format_flags(const std::vector<FlagSpec>& flags);

// s as a JSON string literal: quoted, with quotes, backslashes and control characters escaped.
std::string json_string(const std::string& s);

}  // namespace conv3d_dx::cli
